"""Benchmark: 200 concurrent ``run_task`` calls in one process, measured against true pacing.

Run: ``python tests/benchmarks/bench_load.py [--runs 200]`` (about a minute per
configuration). Each configuration runs in its own fresh process: RUNS concurrent
:func:`agentloop.run_task` calls of a two-step task with a shell command (``run``) on
``sim-standard``, whose simulator paces 60 tok/s (to within 0.2% on a quiet loop), as an
embedding service would call the library. Side by side: the load protection off
(``AGENTLOOP_LOAD_GATE=off``) and on (the default: :mod:`agentloop.loadgate`).

Read from the traces, per model call with two visible tokens or more: its ``output_tps`` as the
client measured it against the simulator's 60 tok/s (the true error: the simulator knows its
pacing), and what the call's span says of itself (``timing_under_load``, ``timing_error_s``,
issue 28). Printed: mean output tok/s and mean / worst per-call error; calls flagged; calls off
by more than 5% and how many of them were flagged (the bound's recall); flagged calls whose
true error lies within their bound (its soundness); the mean bound as a share of decode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACE = 60.0  # sim-standard's output_tps
# two steps of ~70 visible tokens each (about 1.2 s of decode at 60 tok/s), a command between
TASK = """\
name: load-two-step
prompt: Look at the folder, then finish.
tools: [run]
tier: sim-standard
script:
  - text: >-
      {text}
    tool_calls:
      - {{name: run, arguments: {{command: "ls -la && echo done"}}}}
  - text: >-
      {text}
    tool_calls:
      - {{name: finish, arguments: {{summary: listed the folder}}}}
"""
WORDS = (
    "I will look at the folder first to see which files the task gives me, then read the "
    "listing carefully, check that nothing is missing, and only then decide what to do next, "
    "because a careful first look saves a wasted step later in the run."
)


async def _runs(n: int, task: Path, traces: Path) -> tuple[list[str], float]:
    from agentloop import run_task

    t0 = time.perf_counter()
    results = await asyncio.gather(
        *(run_task(task, trace_dir=traces) for _ in range(n)), return_exceptions=True
    )
    wall = time.perf_counter() - t0
    errors = [repr(r)[:200] for r in results if isinstance(r, BaseException)]
    errors += [
        f"status {r.status}"
        for r in results
        if not isinstance(r, BaseException) and r.status != "ok"
    ]  # type: ignore[union-attr]
    return errors, wall


def _measure(traces: Path) -> dict[str, object]:
    from agentloop.trace.reader import load_trace

    calls = []
    for p in sorted(traces.glob("*.jsonl")):
        for rec in map(json.loads, p.read_text().splitlines()):
            a = rec.get("attrs") or {}
            if rec.get("type") == "span_end" and a.get("output_tps") and a.get("decode_s"):
                calls.append(
                    (
                        a["output_tps"],
                        a.get("timing_error_s"),
                        a.get("timing_under_load"),
                        a["decode_s"],
                    )
                )
        load_trace(p)  # every trace loads
    errs = [tps / PACE - 1 for tps, *_ in calls]
    flagged = [c for c in calls if c[2]]
    off5 = [c for c, e in zip(calls, errs, strict=True) if abs(e) > 0.05]
    off5_flagged = [c for c in off5 if c[2]]
    sound = [c for c in flagged if abs(c[0] / PACE - 1) <= c[1] / c[3]]
    unflagged_over2 = [e for c, e in zip(calls, errs, strict=True) if not c[2] and abs(e) > 0.02]
    return {
        "calls": len(calls),
        "mean_tps": statistics.fmean(c[0] for c in calls),
        "mean_err": statistics.fmean(errs),
        "worst_err": min(errs, key=lambda e: -abs(e)),
        "flagged": len(flagged),
        "off5": len(off5),
        "off5_flagged": len(off5_flagged),
        "flagged_within_bound": len(sound),
        "unflagged_over_2pct": len(unflagged_over2),
        "mean_bound_share": statistics.fmean(c[1] / c[3] for c in calls if c[1] is not None),
        "max_bound_s": max((c[1] for c in calls if c[1] is not None), default=0.0),
    }


def worker(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        task = Path(tmp) / "task.yaml"
        task.write_text(TASK.format(text=WORDS))
        traces = Path(tmp) / "traces"
        errors, wall = asyncio.run(_runs(n, task, traces))
        out = {"runs": n, "errors": len(errors), "first_errors": errors[:3], "wall_s": wall}
        out |= _measure(traces)
    print(json.dumps(out))


def run_config(n: int, gate: str) -> dict[str, object]:
    env = {**os.environ, "AGENTLOOP_LOAD_GATE": gate}
    p = subprocess.run(
        [sys.executable, __file__, "--worker", str(n)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode:
        sys.exit(f"worker ({gate}) failed:\n{p.stderr[-3000:]}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--worker", type=int)
    ap.add_argument("--only", choices=("off", "on"))
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    rows = []
    for gate in ("off", "on") if args.only is None else (args.only,):
        r = run_config(args.runs, gate)
        rows.append((gate, r))
        print(f"  ({gate} done, load average {os.getloadavg()[0]:.2f})", flush=True)
    head = (
        f"{'protection':<10} {'runs':>5} {'err':>4} {'wall s':>7} {'calls':>6} {'mean tok/s':>10} "
        f"{'mean err':>9} {'worst':>8} {'flagged':>8} {'>5% off':>8} {'of them flagged':>15} "
        f"{'flagged in bound':>16} {'unflagged >2%':>13} {'bound/decode':>12}"
    )
    print(head)
    for gate, r in rows:
        print(
            f"{gate:<10} {r['runs']:>5} {r['errors']:>4} {r['wall_s']:>7.1f} {r['calls']:>6} "
            f"{r['mean_tps']:>10.2f} {100 * r['mean_err']:>8.2f}% {100 * r['worst_err']:>7.1f}% "
            f"{r['flagged']:>8} {r['off5']:>8} {r['off5_flagged']:>15} "
            f"{r['flagged_within_bound']:>16} {r['unflagged_over_2pct']:>13} "
            f"{100 * r['mean_bound_share']:>11.2f}%"
        )
        if r["first_errors"]:
            print(f"  first errors: {r['first_errors']}")


if __name__ == "__main__":
    main()
