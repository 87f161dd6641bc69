"""Plain aligned text tables and number formatting for the analysis reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
MAX_ROWS = 40  # longer per-step tables show their first and last rows (--json has them all)


def secs(ns: int | float, digits: int = 3) -> str:
    """Nanoseconds as seconds with ``digits`` decimals."""
    return f"{ns / 1e9:.{digits}f}"


def ratio(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.2f}x"


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def elide(items: Sequence[T], limit: int = MAX_ROWS) -> list[T | str]:
    """The first and last ``limit // 2`` items, with a note line in place of the rest."""
    if len(items) <= limit:
        return list(items)
    half = limit // 2
    return [
        *items[:half],
        f"... {len(items) - 2 * half} more rows (--json lists all)",
        *items[-half:],
    ]


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object] | str], indent: str = "  "
) -> str:
    """Columns padded to their widest cell; text left-aligned, numbers right-aligned.

    A row that is a plain string is printed as a note line (see :func:`elide`).
    """
    notes = {k + 1: r for k, r in enumerate(rows) if isinstance(r, str)}
    cells = [[str(c) for c in headers]] + [
        [str(c) for c in r] for r in rows if not isinstance(r, str)
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        all(_is_num(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))
    ]
    out = []
    shift = 0
    for k, r in enumerate(cells):
        while k + shift in notes:
            out.append(indent + notes[k + shift])
            shift += 1
        parts = [
            c.rjust(w) if numeric[i] else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append(indent + "  ".join(parts).rstrip())
        if k == 0:
            out.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _is_num(s: str) -> bool:
    s = s.rstrip("%x").lstrip("+-")
    return s in ("", "-", "inf") or s.replace(".", "", 1).isdigit()
