"""Self-contained HTML reports of a run (``report --html``) and of two runs (``compare --html``).

One file, everything inline (CSS and SVG; no script, no font, no image, no request of any
kind), built from the analysis layer's results: the report (categories on the critical path,
per-step compounding), the run's transcript (:mod:`agentloop.export.transcript`, each
waterfall bar a link to its message), the what-if curve (output speed x K up to the Amdahl ceiling) and, for
compare, the prediction from run A against run B's measurement. The waterfall is the layout
of :mod:`agentloop.export._layout`, drawn by :mod:`agentloop.export._svg`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from agentloop.analysis.agents import steps_text
from agentloop.analysis.compare import Comparison, compare
from agentloop.analysis.flat import Graph
from agentloop.analysis.graph import build_graph
from agentloop.analysis.report import Report, build_report
from agentloop.analysis.report_text import wall_line
from agentloop.analysis.whatif import Scenario, WhatIf, ratio_of, whatif
from agentloop.analysis.whatif_text import widening_line
from agentloop.config.tiers import Tier, faster_tier
from agentloop.errors import ConfigError
from agentloop.export import _svg, _transcript_html, _waterfall
from agentloop.export._layout import Timeline, layout
from agentloop.export.transcript import transcript
from agentloop.trace.reader import Trace

CURVE_SPEEDUP = 11.0  # the scenario whose curve is drawn: as the run summary's what-if hint

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;
max-width:1600px}
svg.waterfall{width:100%;height:auto;display:block}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px}
.sub{color:#555;margin:0 0 12px} .warn{color:#a40;font-weight:600} .note{color:#666}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
td,th{padding:3px 10px;border-bottom:1px solid #e4e4e4;text-align:right}
td:first-child,th:first-child{text-align:left} th{background:#f5f5f5}
.grid{stroke:#e8e8e8} .tick{font-size:11px;fill:#555} .lane{font-size:12px;fill:#333}
.cap{font-size:12px;fill:#333;font-weight:600} .axis{font-size:12px;fill:#333}
.step{fill:#f4f6fa;stroke:#d5dbe6} .steplabel{font-size:10px;fill:#778}
.span{stroke:none} .crit{stroke:#c0392b;stroke-width:2.5} .inflight{stroke-dasharray:4 2;
stroke:#a40;stroke-width:2} .barlabel{font-size:10px;fill:#fff}
.line{fill:none;stroke:#3b5ba5;stroke-width:2} .pt{fill:#3b5ba5}
.ceiling{stroke:#c0392b;stroke-dasharray:6 4;stroke-width:1.5}
.mark0{fill:#2ca02c} .mark1{fill:#ff7f0e}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:6px 0}
.key i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.critkey{border:2.5px solid #c0392b;box-sizing:border-box;background:#fff}
.cols{display:flex;gap:32px;flex-wrap:wrap}
.cum{display:inline-block;height:10px;background:#8da0cb;vertical-align:middle}
"""


def _s(ns: int) -> str:
    return f"{ns / 1e9:.3f}"


def _page(title: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        f"<title>{escape(title)}</title><style>{CSS}{_transcript_html.CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def _tools(tl: Timeline) -> list[str]:
    return sorted({b.label for b in tl.bars if b.kind == "tool"})


def _phases(*tls: Timeline) -> set[str]:
    """The model phases the waterfalls draw (a phase of no width is not drawn)."""
    return {p.name for tl in tls for b in tl.bars for p in b.phases if p.t1 > p.t0}


def _categories(r: Report, tools: list[str]) -> str:
    rows = [
        (c, r.critical.get(c, 0) / 1e9, _svg.category_colour(c, tools))
        for c in r.critical
        if r.critical.get(c, 0) > 0
    ]
    table = "".join(
        f"<tr><td>{escape(c)}</td><td>{_s(r.critical.get(c, 0))}</td>"
        f"<td>{100 * r.critical.get(c, 0) / max(1, r.measured_ns):.1f}%</td>"
        f"<td>{_s(r.busy.get(c, 0))}</td></tr>"
        for c in dict.fromkeys([*r.critical, *r.busy])
        if round(r.critical.get(c, 0) / 1e6) or round(r.busy.get(c, 0) / 1e6)  # no 0.000 rows
    )
    return (
        f'<div class="cols"><div>{_svg.hbars(rows, element_id="categories")}</div>'
        f'<table id="category-table"><tr><th>category</th><th>critical s</th><th>share</th>'
        f"<th>busy s</th></tr>{table}</table></div>"
        f"<p>Model share of the critical path: <b>{100 * r.model_share:.1f}%</b>. Critical "
        f"path time sums to the end-to-end time; busy time adds parallel spans.</p>"
    )


def _steps(r: Report) -> str:
    end = max(1, r.measured_ns)
    rows = []
    for s in r.steps:
        tools = ", ".join(f"{escape(n)} {v / 1e9:.2f}" for n, v in s.tools) or "-"
        rows.append(
            f"<tr><td>{escape(s.step)}{' (in flight)' if s.in_flight else ''}</td>"
            f"<td>{_s(s.duration_ns)}</td><td>{_s(s.model['base'])}</td>"
            f"<td>{_s(s.model['reasoning'])}</td><td>{_s(s.model['decode'])}</td>"
            f"<td>{_s(s.model['other'])}</td><td>{tools}</td>"
            f"<td>{s.input_tokens}/{s.output_tokens}/{s.reasoning_tokens}</td>"
            f'<td>{_s(s.cumulative_ns)}</td><td style="text-align:left">'
            f'<span class="cum" style="width:{200 * s.cumulative_ns / end:.0f}px">'
            f"</span></td></tr>"
        )
    return (
        '<table id="steps"><tr><th>step</th><th>step s</th><th>base</th><th>reasoning</th>'
        "<th>decode</th><th>model other</th><th>tools (s)</th><th>tokens in/out/reas</th>"
        "<th>cumulative s</th><th>run so far</th></tr>" + "".join(rows) + "</table>"
    )


def _curve(w: WhatIf, marks: dict[str, tuple[float, float]] | None = None) -> str:
    pts = [(k, ratio_of(w.measured_ns, ns)) for k, ns in w.curve]
    table = "".join(
        f"<tr><td>{k:g}</td><td>{ns / 1e9:.3f}</td><td>{ratio_of(w.measured_ns, ns):.2f}x</td></tr>"
        for k, ns in w.curve
    )
    return (
        f'<div class="cols"><div>{_svg.curve(pts, w.ceiling, marks=marks)}</div>'
        f'<table id="curve-table"><tr><th>K</th><th>predicted s</th><th>speedup</th></tr>'
        f"{table}</table></div><p>Amdahl ceiling (output speed to infinity, base, tools and "
        f"framework as measured): <b>{w.ceiling_ns / 1e9:.3f} s, {w.ceiling:.2f}x</b>.</p>"
    )


def _tps(trace: Trace) -> float:
    prof = trace.run.tier.profile
    return prof.output_tps if prof is not None else 0.0


def _header_notes(trace: Trace) -> list[str]:
    out = []
    if not trace.complete:
        out.append(
            f'<p class="warn">Incomplete trace: the run did not finish; '
            f"{len(trace.in_flight)} span(s) in flight (dashed outline).</p>"
        )
    if trace.run.inferred:
        out.append(
            '<p class="warn">Imported trace: dependency edges are inferred, and what '
            "the spans did not record (first-token time, reasoning split) is unknown."
            "</p>"
        )
    return out


def _headline(g: Graph, r: Report, w: WhatIf, tiers: dict[str, Tier] | None) -> str:
    """What the run took and what a faster tier would buy, each figure said for what it is: the
    fastest tier the user has that is faster than the run's (its whole profile: base latency,
    prefill, output speed), beside the output-speed-only curve's point."""
    out = (
        f"agent time {r.measured_ns / 1e9:.3f} s (the run span: model calls, tools, framework; "
        f"what the what-if re-times; set-up and the success check are not in it); "
        f"{escape(wall_line(r))}; status {escape(r.status)}, {steps_text(s.step for s in r.steps)}."
    )
    target = faster_tier(g.trace, tiers)
    if target is not None and target.profile is not None:
        t = whatif(g, Scenario.tier(target.name, target.profile), curve=())
        out += (
            f" On <b>{escape(target.name)}</b> ({target.profile.output_tps:g} tok/s), the "
            f"fastest faster tier you have: <b>{t.predicted_ns / 1e9:.3f} s "
            f"({t.speedup:.2f}x)</b>, predicted with its base latency, prefill and output speed."
        )
    out += (
        f" Output speed alone {CURVE_SPEEDUP:g}x faster (the curve below): "
        f"{w.predicted_ns / 1e9:.3f} s ({w.speedup:.2f}x); ceiling at infinite output speed "
        f"{w.ceiling:.2f}x."
    )
    return f'<p class="sub" id="headline">{out}</p>'


def report_html(
    trace: Trace, extra: Sequence[str] = (), tiers: dict[str, Tier] | None = None
) -> str:
    """The whole report page of one trace; ``extra``: sections added at its end (the router's
    frontier, issue 23); ``tiers``: the user's, for the headline's faster tier (none: the
    output-speed curve's point only)."""
    g = build_graph(trace)
    r = build_report(g)
    w = whatif(g, Scenario.multipliers(CURVE_SPEEDUP))
    tl = layout(trace)
    tools = _tools(tl)
    late = r.lateness.line()  # the client's own lateness (issue 28)
    widen = widening_line(r.lateness)
    body = [
        f"<h1>agentloop report: {escape(r.task)} on {escape(r.tier)}</h1>",
        _headline(g, r, w, tiers),
        *_header_notes(trace),
        *([f'<p class="warn">{escape(late)}.{escape(widen or "")}</p>'] if late else []),
        "<h2>Waterfall</h2>",
        _svg.legend(tools, _phases(tl)),
        _waterfall.waterfall(tl, tools=tools, link="msg-"),
        "<h2>Transcript</h2>",
        _transcript_html.transcript_html(transcript(trace), prefix="msg-"),
        "<h2>Time by category (critical path)</h2>",
        _categories(r, tools),
        "<h2>Steps: how the time compounds</h2>",
        _steps(r),
        "<h2>What a faster tier buys: speedup curve</h2>",
        _curve(w),
        *extra,
    ]
    return _page(f"agentloop report {r.task}", body)


def route_section(doc: dict[str, Any]) -> list[str]:
    """The router's frontier (``agentloop route`` output) as a report section."""
    pts = [(p["predicted_s"], p["predicted_cost_usd"]) for p in doc["frontier"]]
    return [
        "<h2>Routing: time against cost (the plan marked)</h2>",
        f'<p class="sub">{escape(doc["goal"])}: plan {doc["predicted_s"]:.3f} s, '
        f"${doc['predicted_cost_usd']:.6f}; all-fastest {doc['fastest_s']:.3f} s, "
        f"${doc['fastest_cost_usd']:.6f}; all-cheapest {doc['cheapest_s']:.3f} s, "
        f"${doc['cheapest_cost_usd']:.6f}</p>",
        _svg.frontier(pts, (doc["predicted_s"], doc["predicted_cost_usd"])),
    ]


def compare_html(a: Trace, b: Trace) -> str:
    """The compare page: both waterfalls on one time axis, measured vs predicted speedup."""
    ga, gb = build_graph(a), build_graph(b)
    c: Comparison = compare(ga, gb)
    tla, tlb = layout(a), layout(b)
    axis = max(tla.end_ns, tlb.end_ns)
    tools = sorted(set(_tools(tla)) | set(_tools(tlb)))
    curve_w = whatif(ga, Scenario.multipliers(CURVE_SPEEDUP))
    k_b = _tps(b) / _tps(a) if _tps(a) and _tps(b) else CURVE_SPEEDUP  # B's K on A's curve
    rows = _error_rows(
        x
        for x in c.steps
        if round(x.a_ns / 1e6) or round(x.b_ns / 1e6) or round(x.predicted_ns / 1e6)
    )
    cats = _error_rows(x for x in c.categories if x.a_ns or x.b_ns or x.predicted_ns)
    speed = _svg.hbars(
        [
            ("measured", c.measured_speedup, "#2ca02c"),
            ("predicted from A", c.predicted_speedup, "#ff7f0e"),
        ],
        element_id="speedups",
        unit="x",
    )
    body = [
        f"<h1>agentloop compare: {escape(c.task)}, {escape(c.tier_a)} vs {escape(c.tier_b)}</h1>",
        f'<p class="sub">A {c.a_ns / 1e9:.3f} s, B {c.b_ns / 1e9:.3f} s: measured speedup '
        f"<b>{c.measured_speedup:.2f}x</b>; predicted from A alone "
        f"{c.prediction.predicted_ns / 1e9:.3f} s, <b>{c.predicted_speedup:.2f}x</b> "
        f"(error {c.error_pct:+.2f}%)</p>",
        *[f'<p class="warn">{escape(x)}</p>' for x in c.warnings],
        *_header_notes(a),
        *_header_notes(b),
        "<h2>Both runs on one time axis</h2>",
        _svg.legend(tools, _phases(tla, tlb)),
        *_waterfalls(c, (tla, tlb), axis, tools),
        "<h2>Speedup: measured vs predicted</h2>",
        speed,
        "<h2>Run A's speedup curve, with B's measured and predicted speedups</h2>",
        '<p class="sub" id="off-curve">The curve changes output speed alone. B\'s tier '
        "differs from A's in base latency and prefill too, so B's dots may sit off it: "
        "'B predicted' re-times A with B's whole speed profile, 'B measured' is B's run; "
        "their distance from the curve is what the other figures of the tier buy.</p>",
        _curve(
            curve_w,
            {"B measured": (k_b, c.measured_speedup), "B predicted": (k_b, c.predicted_speedup)},
        ),
        "<h2>Per step (critical path)</h2>",
        '<table id="compare-steps"><tr><th>step</th><th>A s</th><th>predicted B s</th>'
        f"<th>B s</th><th>error s</th></tr>{rows}</table>",
        "<h2>Per category (critical path)</h2>",
        '<table id="compare-categories"><tr><th>category</th><th>A s</th>'
        f"<th>predicted B s</th><th>B s</th><th>error s</th></tr>{cats}</table>",
        *_transcripts(c, a, b),
    ]
    return _page(f"agentloop compare {c.task}", body)


def _error_rows(xs: Iterable[Any]) -> str:
    """Table rows of A, predicted B, B and the prediction's error, one per step or category."""
    return "".join(
        f"<tr><td>{escape(x.name)}</td><td>{_s(x.a_ns)}</td><td>{_s(x.predicted_ns)}"
        f"</td><td>{_s(x.b_ns)}</td><td>{(x.predicted_ns - x.b_ns) / 1e9:+.3f}</td>"
        f"</tr>"
        for x in xs
    )


def _waterfalls(
    c: Comparison, tls: tuple[Timeline, Timeline], axis: int, tools: list[str]
) -> list[str]:
    """Both runs' waterfalls on one time axis, each bar linked to its run's transcript."""
    return [
        _waterfall.waterfall(
            tl,
            total_ns=axis,
            element_id=f"waterfall-{side}",
            tools=tools,
            caption=f"{side.upper()}: {tier}, {ns / 1e9:.3f} s",
            link=f"{side}-",
        )
        for tl, side, tier, ns in ((tls[0], "a", c.tier_a, c.a_ns), (tls[1], "b", c.tier_b, c.b_ns))
    ]


def _transcripts(c: Comparison, a: Trace, b: Trace) -> list[str]:
    """Both runs' transcripts side by side, each message linked back to its waterfall."""
    return [
        "<h2>Transcripts</h2>",
        '<div class="cols">',
        f"<div><h3>A: {escape(c.tier_a)}</h3>"
        + _transcript_html.transcript_html(transcript(a), prefix="a-", back="waterfall-a")
        + "</div>",
        f"<div><h3>B: {escape(c.tier_b)}</h3>"
        + _transcript_html.transcript_html(transcript(b), prefix="b-", back="waterfall-b")
        + "</div>",
        "</div>",
    ]


def write_html(path: Path, render: Callable[..., str], *traces: Trace) -> None:
    """Render ``traces`` with ``render`` and write the page to ``path``."""
    page = render(*traces)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the HTML report: {exc.strerror}") from None
