"""Benchmark: N concurrent simulated runs in one process: errors, wall time, peak RSS, pacing.

Run: ``python tests/benchmarks/bench_suite_scale.py`` (about 3 minutes; ``--runs 1000`` is the
target, ``--quick`` does 50). Each configuration runs in its own fresh process (so peak RSS is
its own) through the real suite runner (:func:`agentloop.suite.run.run_suite`): N runs of a
two-step task on ``sim-standard`` (60 tok/s), all N at once, every model call through the real
``openai`` SDK over loopback HTTP. Configurations, side by side in one run of this script:

- ``per-run sims``: every run starts its own simulator (one listening port per run), as a single
  ``agentloop run`` does; at 200 runs;
- ``shared sim``: the suite's one simulator, in a process of its own
  (:mod:`agentloop.sim.child`), a route per run (its write budget ``SUITE_WRITE_BUDGET``, the
  first wave held at the start gate until every run is set up and connected,
  :mod:`agentloop.suite.gate`); at 200 and at N.

Pacing is read from the traces as the client measured it: each model call's ``output_tps``
(``(V - 1) / decode`` of its visible tokens) against the tier's 60 tok/s, and its
``ttft_visible`` against the profile's ``base + input / prefill_tps + reasoning / output_tps``.
Printed per configuration: runs ok / errors, the most runs in flight at once and the most model
calls streaming at once (from the traces' wall-clock anchors), wall time, peak RSS, mean output
tok/s, mean, p99 and worst per-call output-rate error, and the mean TTFT lateness. The N-run
shared configuration runs twice: at the start gate's spacing (``agentloop.suite.gate.SPACING_S``,
10 ms) and at 5 ms, which puts more calls in flight at once against the pacing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TIER = "sim-standard"
# each turn: hidden reasoning, then ~300 visible tokens, so one write-budget interval at the
# end of a stream (up to 50 ms with 1,000 streams) is under 1% of its ~5 s decode
TEXT = " ".join(f"word{i % 97}" for i in range(300))
TASK = f"""name: scale
prompt: Think, then write the long answer.
tools: [think]
success: {{expect_text: "word3"}}
script:
  - reasoning_tokens: 60
    text: "{TEXT}"
    tool_calls:
      - {{name: think, arguments: {{thought: "next"}}}}
  - reasoning_tokens: 30
    text: "{TEXT}"
"""


async def one(runs: int, shared: bool, folder: Path, spacing_ms: float | None = None) -> dict:
    from agentloop.suite import gate
    from agentloop.suite.run import Progress, run_suite

    if spacing_ms is not None:
        gate.SPACING_S = spacing_ms / 1000
    from agentloop.config.tiers import get_tier, load_tiers
    from agentloop.trace.reader import load_trace

    task = folder / "scale.yaml"
    task.write_text(TASK)
    peak = [0]

    def progress(state: Progress) -> None:
        peak[0] = max(peak[0], state.running)

    t0 = time.perf_counter()
    suite = await run_suite(
        [task],
        folder / "out",
        tier=TIER,
        concurrency=runs,
        repeat=runs,
        share_simulator=shared,
        progress=progress,
        progress_interval_s=0.5,
        freeze_gc=True,  # as `agentloop suite` asks
    )
    wall = time.perf_counter() - t0
    prof = get_tier(load_tiers(), TIER).profile
    assert prof is not None
    target = prof.output_tps
    errs, tps, late = [], [], []
    edges: list[tuple[float, int]] = []  # model calls' starts and ends, on the wall clock
    for r in suite.runs:
        if not r.trace:
            continue
        trace = load_trace(folder / "out" / r.trace)
        anchor = datetime.fromisoformat(trace.run.wall).timestamp()
        for s in trace.of_kind("model"):
            edges += [(anchor + s.t0 / 1e9, 1), (anchor + (s.t1 or s.t0) / 1e9, -1)]
            a = s.attrs
            if a.get("output_tps"):
                tps.append(a["output_tps"])
                errs.append(abs(a["output_tps"] - target) / target)
            if a.get("ttft_visible_s") is not None:
                due = (
                    prof.base_latency_s
                    + a["gen_ai.usage.input_tokens"] / prof.prefill_tps
                    + a["gen_ai.usage.reasoning.output_tokens"] / target
                )
                late.append(a["ttft_visible_s"] - due)
    errs.sort()
    at_once = most = 0
    for _, step in sorted(edges):
        at_once += step
        most = max(most, at_once)
    return {
        "runs": runs,
        "shared": shared,
        "spacing_ms": 1000 * gate.SPACING_S,
        "ok": sum(r.status == "ok" for r in suite.runs),
        "errors": sum(r.status != "ok" for r in suite.runs),
        "peak_running": peak[0],
        "calls_at_once": most,
        "reasons": sorted({r.reason for r in suite.runs if r.status != "ok"})[:3],
        "wall_s": wall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "calls": len(tps),
        "mean_tps": statistics.fmean(tps) if tps else 0.0,
        "mean_err": statistics.fmean(errs) if errs else 0.0,
        "worst_err": errs[-1] if errs else 0.0,
        "p99_err": errs[int(0.99 * (len(errs) - 1))] if errs else 0.0,
        "ttft_late_ms": 1000 * statistics.fmean(late) if late else 0.0,
    }


def child(runs: int, shared: bool, spacing_ms: float | None = None) -> dict:
    """Run one configuration in a fresh interpreter; its result."""
    spacing = [] if spacing_ms is None else ["--spacing-ms", str(spacing_ms)]
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--one",
            str(runs),
            "--shared" if shared else "--per-run",
            *spacing,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise SystemExit(f"configuration failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="50 and 20 runs instead")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--shared", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spacing-ms", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--per-run", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
            one_run = one(args.one, args.shared, Path(tmp), args.spacing_ms)
            print(json.dumps(asyncio.run(one_run)))
        return
    small, big = (20, 50) if args.quick else (200, args.runs)
    # the gate's default spacing, then half of it: calls at once against pacing
    rows = [child(small, False), child(small, True), child(big, True), child(big, True, 5.0)]
    print(
        f"{'config':<14} {'gate':>5} {'runs':>5} {'ok':>5} {'err':>4} {'at once':>7} {'calls':>5} "
        f"{'wall s':>7} "
        f"{'peak RSS':>9} "
        f"{'tok/s':>7} {'mean err':>9} {'p99 err':>8} {'worst':>7} {'TTFT late':>10}"
    )
    for r in rows:
        name = "shared sim" if r["shared"] else "per-run sims"
        gap = f"{r['spacing_ms']:g}ms" if r["shared"] else "-"
        print(
            f"{name:<14} {gap:>5} {r['runs']:>5} {r['ok']:>5} {r['errors']:>4} {r['peak_running']:>7} "
            f"{r['calls_at_once']:>5} "
            f"{r['wall_s']:>7.1f} "
            f"{r['peak_rss_mb']:>6.0f} MB {r['mean_tps']:>7.2f} {100 * r['mean_err']:>8.2f}% "
            f"{100 * r['p99_err']:>7.2f}% {100 * r['worst_err']:>6.2f}% "
            f"{r['ttft_late_ms']:>7.1f} ms"
        )
        for reason in r["reasons"]:
            print(f"    error: {reason}")
    print(f"target: {TIER} at 60 tok/s; goal: zero errors and pacing within 2% at {big} runs")


if __name__ == "__main__":
    main()
