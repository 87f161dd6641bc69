"""The run's waterfall as SVG: lanes, step bands, model calls split into phases, tools by name.

Each model and tool span is a bar on its lane (critical-path ones outlined, one still open when
the trace stopped marked), a model bar split into its phases with a strip in its tier's colour
when the run used several tiers and a tick for each context trim; the bars share the colours of
:mod:`agentloop.export._svg` (the legend's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from agentloop.analysis.report_text import trim_line
from agentloop.export._layout import Bar, Timeline
from agentloop.export._svg import (
    MODEL_OTHER,
    PHASE_COLOURS,
    TIER_PALETTE,
    TRIM_COLOUR,
    fmt_s,
    ticks,
    tool_colour,
)
from agentloop.trace import attrs as A
from agentloop.trace.schema import SpanEvent

MAX_BARS = 4000  # a bigger trace draws its first bars and says how many it left out
MIN_TOOL_W = 4.0  # a tool of a millisecond stays a bar one can see and click, not a sliver
MODEL_GAP = 1.5  # the white between a model call's bar and the next one's


def _bar_title(b: Bar) -> str:
    a = b.span.attrs
    bits = [b.name, f"{fmt_s((b.t1 - b.t0) / 1e9)}", f"status {b.status}"]
    if b.in_flight:
        bits.append("IN FLIGHT when the trace stopped")
    if b.critical:
        bits.append("on the critical path")
    for k, label in (
        (A.GEN_AI_USAGE_INPUT_TOKENS, "in"),
        (A.GEN_AI_USAGE_OUTPUT_TOKENS, "out"),
        (A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, "reasoning"),
    ):
        if isinstance(a.get(k), int):
            bits.append(f"{label} {a[k]} tok")
    return " | ".join(bits)


@dataclass(frozen=True, slots=True)
class _Frame:
    """The waterfall's geometry: where an instant (ns from the run's start) falls, the rows."""

    total: int
    left: int
    plot_w: int
    top: int
    row_h: int
    lanes: int

    def x(self, t: int) -> float:
        return self.left + self.plot_w * min(t, self.total) / self.total


def waterfall(
    tl: Timeline,
    *,
    width: int = 1100,
    total_ns: int | None = None,
    element_id: str = "waterfall",
    caption: str = "",
    tools: list[str] | None = None,
    link: str | None = None,
) -> str:
    """The run on its lanes: steps as bands, model calls split into phases, tools by name,
    critical-path spans outlined; ``link``: each model and tool bar links to ``#{link}{span id}``
    (its message in the page's transcript); ``total_ns`` fixes the time axis (to share it in compare),
    ``tools`` the tool names whose order picks their colours (as in :func:`legend`)."""
    left, row_h, top = 90, 32, 34
    total = max(1, total_ns if total_ns is not None else tl.end_ns)
    f = _Frame(total, left, width - left - 20, top, row_h, len(tl.lanes))
    height = top + f.lanes * row_h + 30
    out = [
        # the viewBox scales to the page's width (CSS: width 100%), the drawing's units stay
        f'<svg id="{element_id}" class="waterfall" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'preserveAspectRatio="xMinYMin meet" role="img">'
    ]
    out += _axes(tl, f, caption, height)
    bars = tl.bars[:MAX_BARS]
    tier_col = tier_colours(tl)
    trims: dict[str, list[SpanEvent]] = {}
    for ev in tl.trace.events:
        if ev.name == A.EVENT_CONTEXT_TRIM:
            trims.setdefault(ev.span, []).append(ev)
    out += _step_bands(bars, f)
    for b in bars:
        if b.kind not in ("model", "tool"):
            continue
        if link is not None:
            out.append(f'<a href="#{escape(link + b.id)}">')
        if b.kind == "model":
            out += _model_bar(b, f, tl, tier_col, trims.get(b.id, []))
        else:
            out += _tool_bar(b, f, tools)
        if link is not None:
            out.append("</a>")
    for k, (name, col) in enumerate(tier_col.items()):  # the tiers' key, top right
        xk = width - 20 - 150 * (len(tier_col) - k)
        out.append(
            f'<rect x="{xk}" y="4" width="12" height="8" fill="{col}"/>'
            f'<text x="{xk + 16}" y="12" class="cap">tier {escape(name)}</text>'
        )
    out.append("</svg>")
    if len(tl.bars) > MAX_BARS:
        out.append(f'<p class="note">{len(tl.bars) - MAX_BARS} later spans not drawn.</p>')
    return "".join(out)


def _axes(tl: Timeline, f: _Frame, caption: str, height: int) -> list[str]:
    """The caption, the time axis's ticks and grid lines, the lanes' names."""
    out = []
    if caption:
        out.append(f'<text x="{f.left}" y="14" class="cap">{escape(caption)}</text>')
    for t in ticks(f.total / 1e9):
        xt = f.x(round(t * 1e9))
        out.append(
            f'<line x1="{xt:.1f}" y1="{f.top - 6}" x2="{xt:.1f}" y2="{height - 24}" '
            f'class="grid"/><text x="{xt:.1f}" y="{height - 10}" class="tick">'
            f"{t:g} s</text>"
        )
    for k, lane in enumerate(tl.lanes):
        out.append(f'<text x="4" y="{f.top + k * f.row_h + 17}" class="lane">{escape(lane)}</text>')
    return out


def _step_bands(bars: Sequence[Bar], f: _Frame) -> list[str]:
    """Each step as a band behind every lane, labelled with its number."""
    out = []
    for b in bars:
        if b.kind != "step":
            continue
        x0, x1 = f.x(b.t0), f.x(b.t1)
        out.append(
            f'<rect class="step" x="{x0:.1f}" y="{f.top - 8}" width="{max(0.5, x1 - x0):.1f}" '
            f'height="{f.lanes * f.row_h + 4}"><title>{escape(b.name)}: '
            f"{fmt_s((b.t1 - b.t0) / 1e9)}</title></rect>"
        )
        label = b.span.start_attrs.get(A.STEP, b.name)
        out.append(
            f'<text x="{x0 + 2:.1f}" y="{f.top - 10}" class="steplabel">{escape(str(label))}</text>'
        )
    return out


def _bar_class(b: Bar) -> str:
    cls = "span crit" if b.critical else "span"
    return cls + " inflight" if b.in_flight else cls


def _model_bar(
    b: Bar, f: _Frame, tl: Timeline, tier_col: dict[str, str], trims: list[SpanEvent]
) -> list[str]:
    """A model call's bar: its phases, its tier's strip (several tiers), its context trims."""
    row_h, y = f.row_h, f.top + b.lane * f.row_h + 3
    x0, x1 = f.x(b.t0), f.x(b.t1)
    if x1 - x0 > 4 * MODEL_GAP:  # consecutive calls do not touch
        x1 -= MODEL_GAP
    out = [
        f'<g class="model" data-span="{escape(b.id)}"><title>{escape(_bar_title(b))}</title>'
        f'<rect class="{_bar_class(b)}" x="{x0:.1f}" y="{y}" width="{max(0.5, x1 - x0):.1f}" '
        f'height="{row_h - 6}" fill="{MODEL_OTHER}"/>'
    ]
    for p in b.phases:
        px0, px1 = min(f.x(p.t0), x1), min(f.x(p.t1), x1)
        out.append(
            f'<rect class="phase phase-{p.name}" x="{px0:.1f}" y="{y + 2}" '
            f'width="{max(0.3, px1 - px0):.1f}" height="{row_h - 10}" '
            f'fill="{PHASE_COLOURS[p.name]}"><title>{p.name}: '
            f"{fmt_s((p.t1 - p.t0) / 1e9)}</title></rect>"
        )
    if tier_col:  # several tiers: a strip under the bar in its tier's colour
        from agentloop.analysis.agents import call_tier, recorded_tiers

        tier = call_tier(tl.trace, b.span.attrs, recorded_tiers(tl.trace))
        out.append(
            f'<rect class="tier" data-tier="{escape(tier)}" x="{x0:.1f}" '
            f'y="{y + row_h - 9}" width="{max(0.5, x1 - x0):.1f}" height="3" '
            f'fill="{tier_col.get(tier, MODEL_OTHER)}"><title>tier {escape(tier)}'
            "</title></rect>"
        )
    for ev in trims:  # a context trim: a tick where it was made
        xt = f.x(max(0, ev.t - tl.start_ns))
        what = escape(trim_line({A.STEP: b.span.step, **ev.attrs}))
        out.append(
            f'<rect class="trim" x="{xt - 1:.1f}" y="{y - 3}" width="2" '
            f'height="{row_h}" fill="{TRIM_COLOUR}"><title>context trim: {what}'
            "</title></rect>"
        )
    out.append("</g>")
    return out


def _tool_bar(b: Bar, f: _Frame, tools: list[str] | None) -> list[str]:
    """A tool call's bar in its tool's colour, at least ``MIN_TOOL_W`` wide, named if it fits."""
    y = f.top + b.lane * f.row_h + 3
    x0, x1 = f.x(b.t0), f.x(b.t1)
    if x1 - x0 < MIN_TOOL_W:  # widened, but inside the axis
        x0 = min(x0, f.left + f.plot_w - MIN_TOOL_W)
    out = [
        f'<g class="tool" data-span="{escape(b.id)}"><title>{escape(_bar_title(b))}</title>'
        f'<rect class="{_bar_class(b)}" x="{x0:.1f}" y="{y}" '
        f'width="{max(MIN_TOOL_W, x1 - x0):.1f}" '
        f'height="{f.row_h - 6}" fill="{tool_colour(b.label, tools)}"/>'
    ]
    if x1 - x0 > 8 * len(b.label):
        out.append(f'<text x="{x0 + 3:.1f}" y="{y + 14}" class="barlabel">{escape(b.label)}</text>')
    out.append("</g>")
    return out


def tier_colours(tl: Timeline) -> dict[str, str]:
    """Each tier of a run that used several (header ``tiers``) its colour; {} for one tier."""
    from agentloop.analysis.agents import recorded_tiers

    names = list(recorded_tiers(tl.trace))
    if len(names) < 2:
        return {}
    return {n: TIER_PALETTE[k % len(TIER_PALETTE)] for k, n in enumerate(names)}
