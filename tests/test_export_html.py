"""The HTML reports rendered by real Chromium: no console error, no request, the charts drawn."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agentloop_tools._chromium import CHROMIUM_ARGS, SYSTEM_CHROMIUM
from playwright.async_api import async_playwright

from agentloop.export._svg import CRITICAL, PHASE_COLOURS
from agentloop.trace.reader import load_trace
from tests.conftest import CliResult, run_cli

# the tests here drive a real Chromium
pytestmark = pytest.mark.external

ROOT = Path(__file__).resolve().parent.parent
STANDARD = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"
ULTRAFAST = ROOT / "traces/reference/checkout-timeouts-sim-ultrafast.jsonl"
CURVE_LINE = "#3b5ba5"


def png_pixels(data: bytes) -> Counter[tuple[int, int, int]]:
    """Colour counts of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium's screenshots are)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    counts: Counter[tuple[int, int, int]] = Counter()
    for row in range(height):
        f = raw[row * (stride + 1)]
        line = bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        counts.update(zip(line[0::channels], line[1::channels], line[2::channels], strict=True))
        prev = line
    return counts


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


async def render(page_file: Path, shots: list[str]) -> dict[str, Any]:
    """Open the page in Chromium; what it logged, what it asked for, element screenshots."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=SYSTEM_CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            console: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            await page.goto(page_file.as_uri())
            out: dict[str, Any] = {
                "console": console,
                "requests": requests,
                "shots": {},
                "boxes": {},
            }
            for sel in shots:
                el = page.locator(sel)
                out["boxes"][sel] = await el.bounding_box()
                out["shots"][sel] = png_pixels(await el.screenshot())
            out["count"] = {
                sel: await page.locator(sel).count()
                for sel in (
                    "#waterfall g.model",
                    "#waterfall .crit",
                    "#waterfall .inflight",
                    "#curve circle.pt",
                    "#waterfall-a g.model",
                    "#waterfall-b g.model",
                )
            }
            return out
        finally:
            await browser.close()


async def agentloop(*args: str) -> CliResult:
    """The command in-process, off this test's event loop (``main`` runs a loop of its own)."""
    return await asyncio.to_thread(run_cli, *args)


async def test_report_page_renders_offline_with_waterfall_and_curve(tmp_path: Path) -> None:
    """``report --html``: Chromium logs nothing, fetches nothing, and draws both charts."""
    page = tmp_path / "report.html"
    r = await agentloop("report", str(STANDARD), "--html", str(page))
    seen = await render(page, ["#waterfall", "#curve"])
    wf, cv = seen["shots"]["#waterfall"], seen["shots"]["#curve"]
    models = len(load_trace(STANDARD).of_kind("model"))
    assert 0 == r.returncode, r.stderr
    assert ([], [page.as_uri()]) == (seen["console"], seen["requests"])
    assert (models, 9) == (seen["count"]["#waterfall g.model"], seen["count"]["#curve circle.pt"])
    assert seen["count"]["#waterfall .crit"] >= models  # every call is on this run's path
    for colour in (
        PHASE_COLOURS["base"],
        PHASE_COLOURS["reasoning"],
        PHASE_COLOURS["decode"],
        CRITICAL,
    ):
        assert wf[rgb(colour)] > 50, colour
    assert (True, True) == (cv[rgb(CURVE_LINE)] > 50, cv[rgb(CRITICAL)] > 20)


async def test_compare_page_puts_both_runs_on_one_axis(tmp_path: Path) -> None:
    """``compare --html``: two waterfalls of equal width (one axis) and the speedup bars."""
    page = tmp_path / "compare.html"
    r = await agentloop("compare", str(STANDARD), str(ULTRAFAST), "--html", str(page))
    seen = await render(page, ["#waterfall-a", "#waterfall-b", "#speedups", "#curve"])
    a, b = seen["boxes"]["#waterfall-a"], seen["boxes"]["#waterfall-b"]
    html = page.read_text()
    assert 0 == r.returncode, r.stderr
    assert ([], [page.as_uri()]) == (seen["console"], seen["requests"])
    assert (7, 7) == (seen["count"]["#waterfall-a g.model"], seen["count"]["#waterfall-b g.model"])
    assert a["width"] == b["width"]
    assert ("5.34x" in html, "5.17x" in html) == (True, True)  # measured, predicted from A
    assert seen["shots"]["#speedups"][rgb("#2ca02c")] > 50


async def test_incomplete_trace_page_says_so(tmp_path: Path) -> None:
    """A trace cut mid-run still renders, saying it is incomplete, its open spans dashed."""
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"\n".join(STANDARD.read_bytes().splitlines()[:40]) + b"\n")
    page = tmp_path / "cut.html"
    r = await agentloop("report", str(cut), "--html", str(page))
    seen = await render(page, ["#waterfall"])
    open_leaves = [s for s in load_trace(cut).in_flight if s.kind in ("model", "tool")]
    assert (0, [], True) == (r.returncode, seen["console"], "Incomplete trace" in page.read_text())
    assert (True, len(open_leaves)) == (len(open_leaves) > 0, seen["count"]["#waterfall .inflight"])


async def test_waterfall_fits_the_window_and_tools_stay_visible(tmp_path: Path) -> None:
    """At 1400 px the waterfall fills the page's width, at 700 px it shrinks to fit; every tool bar is at least MIN_TOOL_W wide, and consecutive model bars do not touch.
    The final answer and a tool's output are in the page. AGENTLOOP_SHOTS=DIR writes the page's
    screenshots there (docs/report-1400.png)."""
    import itertools
    import os

    from agentloop.export._waterfall import MIN_TOOL_W

    page_file = tmp_path / "report.html"
    assert 0 == (await agentloop("report", str(STANDARD), "--html", str(page_file))).returncode
    html = page_file.read_text()
    assert "SAFE" in html or "fixed" in html.lower()  # the final answer's words are shown
    shots = os.environ.get("AGENTLOOP_SHOTS")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=SYSTEM_CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            widths = {}
            for vw in (1400, 700):
                page = await browser.new_page(viewport={"width": vw, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda e, seen=errors: seen.append(str(e)))
                page.on(
                    "console",
                    lambda m, seen=errors: seen.append(m.text) if m.type == "error" else None,
                )
                await page.goto(page_file.as_uri())
                box = await page.locator("#waterfall").bounding_box()
                assert box is not None and [] == errors
                widths[vw] = box["width"]
                if vw == 1400:
                    tools = page.locator("#waterfall g.tool rect.span")
                    assert await tools.count() > 0
                    for w in await tools.evaluate_all(
                        "els => els.map(e => +e.getAttribute('width'))"
                    ):
                        assert w >= MIN_TOOL_W
                    edges = await page.locator("#waterfall g.model rect.span").evaluate_all(
                        "els => els.map(e => [+e.getAttribute('x'), +e.getAttribute('width'),"
                        " +e.getAttribute('y')])"
                    )
                    by_lane = sorted(edges, key=lambda e: (e[2], e[0]))
                    for a, b in itertools.pairwise(by_lane):
                        if a[2] == b[2]:
                            assert a[0] + a[1] < b[0], (a, b)  # a gap between calls
                    if shots:
                        await page.screenshot(path=f"{shots}/report-1400.png", full_page=False)
                await page.close()
        finally:
            await browser.close()
    assert widths[1400] > 1250  # the page's width, not a fixed 1,000 px
    assert widths[700] <= 700 - 2 * 24  # shrinks with the window (body margin 24 px)
