"""The transcript in real Chromium: the page loads clean, a waterfall bar leads to its message."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agentloop_tools._chromium import CHROMIUM_ARGS, SYSTEM_CHROMIUM
from playwright.async_api import async_playwright

from agentloop.trace.reader import load_trace
from tests.conftest import run_cli

pytestmark = pytest.mark.external  # drives a real Chromium

ROOT = Path(__file__).resolve().parent.parent
STANDARD = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"
ULTRAFAST = ROOT / "traces/reference/checkout-timeouts-sim-ultrafast.jsonl"


async def visit(page_file: Path, counts: list[str], click: str | None = None) -> dict[str, Any]:
    """Open the page; what it logged and fetched, element counts, and (after clicking the first
    ``click`` element) the location's hash and the id of the element ``:target`` matches."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=SYSTEM_CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            console: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            await page.goto(page_file.as_uri())
            out: dict[str, Any] = {"console": console, "requests": requests}
            out["count"] = {sel: await page.locator(sel).count() for sel in counts}
            if click is not None:
                link = page.locator(click).first
                out["href"] = await link.get_attribute("href")
                await link.click()
                out["hash"] = await page.evaluate("location.hash")
                out["target"] = await page.evaluate(
                    "document.querySelector(':target') && document.querySelector(':target').id"
                )
                out["visible"] = await page.locator(":target").is_visible()
            return out
        finally:
            await browser.close()


async def test_report_transcript_loads_and_bars_link_to_messages(tmp_path: Path) -> None:
    """``report --html``: no console error, no request, one message per model and tool span plus
    the prompts, answer and check, and a clicked bar makes its message the ``:target``."""
    page = tmp_path / "report.html"
    r = await asyncio.to_thread(run_cli, "report", str(STANDARD), "--html", str(page))
    trace = load_trace(STANDARD)
    spans = len(trace.of_kind("model")) + len(trace.of_kind("tool"))
    seen = await visit(
        page,
        [
            "#msg-transcript .msg",
            "#msg-transcript details",
            "#msg-answer",
            "#msg-check",
            "#waterfall a",
        ],
        click="#waterfall a",
    )
    assert 0 == r.returncode, r.stderr
    assert ([], [page.as_uri()]) == (seen["console"], seen["requests"])
    assert spans + 4 == seen["count"]["#msg-transcript .msg"]  # + system, user, answer, check
    assert (1, 1, spans) == (
        seen["count"]["#msg-answer"],
        seen["count"]["#msg-check"],
        seen["count"]["#waterfall a"],
    )
    assert seen["count"]["#msg-transcript details"] > 0
    assert (seen["href"], seen["href"], True) == (
        seen["hash"],
        "#" + seen["target"],
        seen["visible"],
    )


async def test_compare_page_shows_both_transcripts(tmp_path: Path) -> None:
    """``compare --html``: each run's transcript, each waterfall's bars linked to its own."""
    page = tmp_path / "compare.html"
    r = await asyncio.to_thread(
        run_cli, "compare", str(STANDARD), str(ULTRAFAST), "--html", str(page)
    )
    seen = await visit(
        page,
        ["#a-transcript .msg", "#b-transcript .msg", "#a-answer", "#b-answer"],
        click="#waterfall-b a",
    )
    assert 0 == r.returncode, r.stderr
    assert ([], [page.as_uri()]) == (seen["console"], seen["requests"])
    assert (1, 1) == (seen["count"]["#a-answer"], seen["count"]["#b-answer"])
    assert seen["count"]["#a-transcript .msg"] > 4 and seen["count"]["#b-transcript .msg"] > 4
    assert (seen["href"], True) == ("#" + seen["target"], seen["target"].startswith("b-"))
