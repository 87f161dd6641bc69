"""The GDP-Val-like suite's shared arithmetic: per-group totals of a two-column CSV.

``figures(path)`` reads ``group,a,b`` rows and returns, per group in first-seen order, the sums
of ``a`` and ``b`` and the ratio ``b / a`` (rounded to 4 places), plus the total row. Both the
analysis the agent writes and the report check import nothing else, so they agree by
construction only if the report really carries these numbers.
"""

from __future__ import annotations

import csv
from pathlib import Path


def figures(path: str | Path) -> list[tuple[str, float, float, float]]:
    sums: dict[str, list[float]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            s = sums.setdefault(row["group"], [0.0, 0.0])
            s[0] += float(row["a"])
            s[1] += float(row["b"])
    out = [(g, round(a, 2), round(b, 2), round(b / a, 4) if a else 0.0)
           for g, (a, b) in sums.items()]
    ta, tb = sum(r[1] for r in out), sum(r[2] for r in out)
    out.append(("Total", round(ta, 2), round(tb, 2), round(tb / ta, 4) if ta else 0.0))
    return out


def table_lines(rows: list[tuple[str, float, float, float]]) -> list[str]:
    """The report's table rows, exactly as the check expects them."""
    return [f"| {g} | {a:.2f} | {b:.2f} | {r:.4f} |" for g, a, b, r in rows]
