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


def test_headline_names_the_fastest_faster_tier_beside_the_curve() -> None:
    """The report's headline: agent time said for what it is, the what-if on the fastest tier
    the user has (its whole profile), and the output-speed-only point, each labelled."""
    from agentloop.config.tiers import load_tiers

    trace = load_trace(STANDARD)
    text = re.sub(r"<[^>]+>", "", report_html(trace, tiers=load_tiers()))
    head = text[text.index("agent time") :]
    head = head[: head.index("ceiling")]
    assert "On sim-ultrafast (750 tok/s), the fastest faster tier you have: " in head
    assert "(5.17x), predicted with its base latency, prefill and output speed" in head
    assert "Output speed alone 11x faster (the curve below): " in head and "(3.98x)" in head
    assert "fastest faster tier" not in report_html(trace)  # no tiers given: the curve only


def test_compare_says_why_a_point_is_off_the_curve() -> None:
    page = compare_html(load_trace(STANDARD), load_trace(ULTRAFAST))
    assert 'id="off-curve"' in page and "base latency and prefill too" in page
