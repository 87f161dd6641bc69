"""Inline SVG pieces for the HTML report: the waterfall, the speedup curve, bars, and colours.

Plain SVG text with ``<title>`` tooltips: no script, no external resource, so one HTML file
shows everything offline. Every text that came from a trace is escaped.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable
from html import escape

PHASE_COLOURS = {
    "base": "#8da0cb",
    "reasoning": "#e78ac3",
    "decode": "#66c2a5",
    "tail": "#b3b3b3",
    "retry": "#fc8d62",
    "wait": "#ffd92f",
}
TOOL_PALETTE = (
    "#1b9e77",
    "#d95f02",
    "#7570b3",
    "#66a61e",
    "#e6ab02",
    "#a6761d",
    "#e7298a",
    "#17becf",
    "#bcbd22",
    "#8c564b",
)
CRITICAL = "#c0392b"
MODEL_OTHER = "#cfd8e3"
TRIM_COLOUR = "#d62728"  # a context-trim tick on a model bar
TIER_PALETTE = ("#2c7fb8", "#f03b20", "#31a354", "#756bb1")  # model bars' tier strip (issue 23)


def tool_colour(name: str, names: list[str] | None = None) -> str:
    """A tool's colour: by its place among ``names`` (the page's tools, sorted), so no two of
    a page's first ten tools share one; by a hash of the name otherwise."""
    if names and name in names:
        return TOOL_PALETTE[sorted(names).index(name) % len(TOOL_PALETTE)]
    return TOOL_PALETTE[zlib.crc32(name.encode()) % len(TOOL_PALETTE)]


def category_colour(cat: str, tools: list[str] | None = None) -> str:
    if cat in PHASE_COLOURS:
        return PHASE_COLOURS[cat]
    if cat.startswith("tool:"):
        return tool_colour(cat.removeprefix("tool:"), tools)
    return "#999999"


def ticks(span_s: float, n: int = 8) -> list[float]:
    if span_s <= 0:
        return [0.0]
    raw = span_s / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(span_s / step) + 1)]


def fmt_s(s: float) -> str:
    return f"{s:.3f} s" if s < 10 else f"{s:.2f} s"


def legend(tools: list[str], phases: Iterable[str] | None = None) -> str:
    """The colour key: the model phases that ``phases`` holds (default: all), each tool, the
    critical path; a series the page never draws is not listed."""
    shown = set(PHASE_COLOURS) if phases is None else set(phases)
    items = [(f"model {k}", c) for k, c in PHASE_COLOURS.items() if k in shown]
    items += [(f"tool {t}", tool_colour(t, tools)) for t in tools]
    cells = "".join(
        f'<span class="key"><i style="background:{c}"></i>{escape(n)}</span>' for n, c in items
    )
    return (
        f'<div class="legend">{cells}<span class="key"><i class="critkey"></i>'
        f"critical path</span></div>"
    )


def curve(
    points: list[tuple[float, float]],
    ceiling: float,
    *,
    marks: dict[str, tuple[float, float]] | None = None,
    width: int = 560,
    height: int = 300,
    element_id: str = "curve",
) -> str:
    """Speedup (y) against output speed multiplier K (x, log scale), up to the Amdahl ceiling;
    ``marks``: labelled (K, speedup) dots (another run's measured and predicted speedups)."""
    left, right, top, bottom = 52, 20, 16, 40
    pw, ph = width - left - right, height - top - bottom
    kmax = max(k for k, _ in points) if points else 100.0
    finite = [s for _, s in points if math.isfinite(s)]
    ceil_y = ceiling if math.isfinite(ceiling) else max(finite, default=1.0)
    ymax = max([ceil_y, *finite, *(s for _, s in (marks or {}).values()), 1.0]) * 1.1

    def x(k: float) -> float:
        return left + pw * math.log10(max(k, 1)) / math.log10(max(kmax, 2))

    def y(s: float) -> float:
        return top + ph * (1 - min(s, ymax) / ymax)

    out = [
        f'<svg id="{element_id}" class="curve" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    out += _curve_axes(x, y, ymax, kmax, left, pw, top, ph, height)
    out.append(
        f'<line id="{element_id}-ceiling" class="ceiling" x1="{left}" y1="{y(ceil_y):.1f}" '
        f'x2="{left + pw}" y2="{y(ceil_y):.1f}"><title>Amdahl ceiling {ceil_y:.2f}x'
        f'</title></line><text x="{left + pw - 4}" y="{y(ceil_y) - 5:.1f}" class="tick" '
        f'text-anchor="end">ceiling {ceil_y:.2f}x</text>'
    )
    pts = " ".join(f"{x(k):.1f},{y(s):.1f}" for k, s in points if math.isfinite(s))
    out.append(f'<polyline id="{element_id}-line" class="line" points="{pts}"/>')
    for k, s in points:
        if math.isfinite(s):
            out.append(
                f'<circle class="pt" cx="{x(k):.1f}" cy="{y(s):.1f}" r="3.5">'
                f"<title>K = {k:g}: {s:.2f}x</title></circle>"
            )
    for n, (label, (k, s)) in enumerate((marks or {}).items()):
        out.append(
            f'<circle class="mark mark{n}" cx="{x(k):.1f}" cy="{y(s):.1f}" r="6">'
            f"<title>{escape(label)}: {s:.2f}x at K = {k:.3g}</title></circle>"
            f'<text x="{x(k) + 9:.1f}" y="{y(s) + 4 + 13 * n:.1f}" class="tick">'
            f"{escape(label)} {s:.2f}x</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _curve_axes(
    x: Callable[[float], float],
    y: Callable[[float], float],
    ymax: float,
    kmax: float,
    left: int,
    pw: int,
    top: int,
    ph: int,
    height: int,
) -> list[str]:
    """The speedup curve's grid lines and ticks: speedup up the side, K along the bottom."""
    out = []
    for s in ticks(ymax, 5):
        out.append(
            f'<line x1="{left}" y1="{y(s):.1f}" x2="{left + pw}" y2="{y(s):.1f}" '
            f'class="grid"/><text x="{left - 6}" y="{y(s) + 4:.1f}" class="tick" '
            f'text-anchor="end">{s:g}x</text>'
        )
    for tick in (1, 2, 5, 10, 20, 50, 100):
        if tick <= kmax:
            out.append(
                f'<text x="{x(tick):.1f}" y="{top + ph + 16}" class="tick" '
                f'text-anchor="middle">{tick}</text>'
            )
    out.append(
        f'<text x="{left + pw / 2}" y="{height - 4}" class="axis" text-anchor="middle">'
        f"output speed × K (log scale)</text>"
    )
    return out


def hbars(
    rows: list[tuple[str, float, str]], *, width: int = 560, element_id: str, unit: str = "s"
) -> str:
    """Horizontal bars: (label, value, colour) per row, scaled to the largest."""
    row_h, left = 22, 150
    height = row_h * len(rows) + 8
    vmax = max((v for _, v, _ in rows), default=1.0) or 1.0
    out = [
        f'<svg id="{element_id}" class="hbars" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    for i, (label, v, colour) in enumerate(rows):
        w = (width - left - 80) * v / vmax
        y = 4 + i * row_h
        out.append(
            f'<text x="{left - 6}" y="{y + 14}" class="tick" text-anchor="end">'
            f'{escape(label)}</text><rect x="{left}" y="{y}" width="{max(0.5, w):.1f}" '
            f'height="{row_h - 6}" fill="{colour}"><title>{escape(label)}: {v:.3f} {unit}'
            f'</title></rect><text x="{left + w + 4:.1f}" y="{y + 14}" class="tick">'
            f"{v:.3f} {unit}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def frontier(
    points: list[tuple[float, float]],
    chosen: tuple[float, float],
    *,
    width: int = 560,
    height: int = 300,
    element_id: str = "frontier",
) -> str:
    """The router's time/cost frontier (issue 23): predicted seconds across, dollars up, one
    point per plan, the chosen one marked."""
    left, right, top, bottom = 70, 20, 16, 40
    pw, ph = width - left - right, height - top - bottom
    xs = [t for t, _ in points] + [chosen[0]]
    ys = [c for _, c in points] + [chosen[1]]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    dx, dy = (x1 - x0) or 1.0, (y1 - y0) or 1.0

    def x(t: float) -> float:
        return left + pw * (t - x0) / dx

    def y(c: float) -> float:
        return top + ph * (1 - (c - y0) / dy)

    out = [
        f'<svg id="{element_id}" class="curve" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f'<text x="{left + pw / 2}" y="{height - 4}" class="axis" text-anchor="middle">'
        "predicted run time (s)</text>",
        f'<text x="{left - 6}" y="{top + 4}" class="tick" text-anchor="end">${y1:.4f}</text>',
        f'<text x="{left - 6}" y="{top + ph}" class="tick" text-anchor="end">${y0:.4f}</text>',
        f'<text x="{left}" y="{top + ph + 16}" class="tick">{x0:.2f} s</text>',
        f'<text x="{left + pw}" y="{top + ph + 16}" class="tick" text-anchor="end">'
        f"{x1:.2f} s</text>",
    ]
    pts = " ".join(f"{x(t):.1f},{y(c):.1f}" for t, c in sorted(points))
    out.append(f'<polyline id="{element_id}-line" class="line" points="{pts}"/>')
    for t, c in points:
        out.append(
            f'<circle class="pt" cx="{x(t):.1f}" cy="{y(c):.1f}" r="3.5">'
            f"<title>{t:.3f} s, ${c:.6f}</title></circle>"
        )
    out.append(
        f'<circle id="{element_id}-chosen" class="mark mark0" cx="{x(chosen[0]):.1f}" '
        f'cy="{y(chosen[1]):.1f}" r="7"><title>the plan: {chosen[0]:.3f} s, ${chosen[1]:.6f}'
        "</title></circle>"
    )
    out.append("</svg>")
    return "".join(out)
