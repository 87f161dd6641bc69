"""Figures for the HTML report of a long run: page size, render time, Chromium load time.

A 500-step trace is made from the reference standard run, its steps laid end to end again and
again (ids and instants shifted, step numbers continued); ``report_html`` renders it and real
Chromium (Debian's, via playwright) opens the page. Prints the figures; asserts nothing.

    python tests/benchmarks/bench_html_page.py [--steps 500]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from agentloop_tools._chromium import CHROMIUM_ARGS, SYSTEM_CHROMIUM
from playwright.async_api import async_playwright

from agentloop.export.html import report_html
from agentloop.trace.reader import load_trace

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"


def long_trace(steps: int, out: Path) -> Path:
    """The reference run's steps repeated until ``steps`` steps, as one trace file."""
    recs = [orjson.loads(x) for x in REFERENCE.read_bytes().splitlines()]
    header, run_start, end = recs[0], recs[1], recs[-1]
    body = [r for r in recs[2:-1] if r.get("id") != run_start["id"]]
    run_end = next(r for r in recs if r.get("type") == "span_end" and r["id"] == run_start["id"])
    per = max(int(r["t"]) for r in body) - min(int(r["t"]) for r in body) + 1_000_000
    n_steps = end["steps"]
    reps = -(-steps // n_steps)
    t0 = min(int(r["t"]) for r in body)

    def shift(r: dict[str, Any], k: int) -> dict[str, Any]:
        r = orjson.loads(orjson.dumps(r))
        r["t"] = int(r["t"]) + k * per
        if r.get("id") != run_start["id"]:
            r["id"] = f"{r['id']}r{k}"
        if r.get("parent") and r["parent"] != run_start["id"]:
            r["parent"] = f"{r['parent']}r{k}"
        if "after" in r:
            r["after"] = [f"{a}r{k}" for a in r["after"]]
        attrs = r.get("attrs") or {}
        if isinstance(attrs.get("step"), int):
            attrs["step"] += k * n_steps
        if r.get("type") == "span_start" and r.get("kind") == "step":
            r["name"] = f"step {attrs['step']}"
        tm = attrs.get("timing")
        if isinstance(tm, dict):
            for key, v in tm.items():
                if key.startswith("t_") and isinstance(v, int):
                    tm[key] = v + k * per
        for a in attrs.get("attempts") or ():
            for key in ("t_start", "t_end"):
                if isinstance(a.get(key), int):
                    a[key] += k * per
        return r

    lines = [header, run_start]
    for k in range(reps):
        lines += [shift(r, k) for r in body]
    last = t0 + reps * per
    lines += [{**run_end, "t": last}, {**end, "t": last + 1, "steps": reps * n_steps}]
    out.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    return out


async def load_in_chromium(page_file: Path) -> tuple[float, int]:
    """Seconds from navigation to the load event, and console errors seen."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=SYSTEM_CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            t = time.perf_counter()
            await page.goto(page_file.as_uri(), wait_until="load")
            return time.perf_counter() - t, len(errors)
        finally:
            await browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = long_trace(args.steps, Path(d) / "long.jsonl")
        trace = load_trace(path)
        t = time.perf_counter()
        page = report_html(trace)
        render_s = time.perf_counter() - t
        html = Path(d) / "long.html"
        html.write_text(page, encoding="utf-8")
        load_s, errors = asyncio.run(load_in_chromium(html))
        spans = len(trace.of_kind("model")) + len(trace.of_kind("tool"))
        print(
            f"steps {trace.end_record.steps if trace.end_record else '?'}  spans {spans}  "
            f"page {len(page.encode()) / 1e6:.2f} MB  render {render_s:.2f} s  "
            f"chromium load {load_s:.2f} s  console errors {errors}"
        )


if __name__ == "__main__":
    main()
