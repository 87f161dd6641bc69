"""The HTML pages list only what they draw: a legend without series that never appear, no
category row of zeros, no meaningless ``run 0.000`` row in compare's step table."""

from __future__ import annotations

import re
from pathlib import Path

from agentloop.export.html import compare_html, report_html
from agentloop.trace.reader import load_trace

ROOT = Path(__file__).resolve().parent.parent
STANDARD = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"
ULTRAFAST = ROOT / "traces/reference/checkout-timeouts-sim-ultrafast.jsonl"


def table_rows(html: str, element_id: str) -> list[list[str]]:
    body = html[html.index(f'id="{element_id}"') :]
    body = body[: body.index("</table>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in body.split("<tr>")[2:]]


def test_legend_lists_only_the_phases_drawn() -> None:
    page = report_html(load_trace(STANDARD))
    keys = re.findall(r'<span class="key"><i [^>]*></i>([^<]+)</span>', page)
    assert {"model base", "model reasoning", "model decode"} <= set(keys)
    assert "model retry" not in keys and "model wait" not in keys  # this run had no retry
    assert "tool run_tests" in keys


def test_category_table_has_no_zero_rows() -> None:
    rows = table_rows(report_html(load_trace(STANDARD)), "category-table")
    assert rows and all(r[1] != "0.000" or r[3] != "0.000" for r in rows)


def test_compare_step_table_has_no_empty_run_row() -> None:
    rows = table_rows(compare_html(load_trace(STANDARD), load_trace(ULTRAFAST)), "compare-steps")
    assert [str(i) for i in range(1, 8)] == [r[0] for r in rows]
