"""Benchmark: what-if predictions checked against real runs across a 3-tier sweep.

Run as ``python tests/benchmarks/bench_whatif_sweep.py``. Each task runs for real on every
simulated tier (sim-standard 60 tok/s, sim-fast 200, sim-ultrafast 750: the embedded simulator,
real tools, real traces); then every run predicts every other tier with ``whatif``, and the
script prints predicted vs measured end-to-end time and the error, per pair. Two tasks: ``steady``
(fixed-time tools, so the error left is the model side's) and the ``checkout-timeouts``
playbook (real pytest runs, whose own run-to-run noise the prediction cannot know).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop import run_task  # noqa: E402
from agentloop.analysis import build_graph, whatif  # noqa: E402
from agentloop.analysis.whatif import Scenario  # noqa: E402
from agentloop.config.tiers import load_tiers  # noqa: E402
from agentloop.trace.reader import load_trace  # noqa: E402

TIERS = ("sim-standard", "sim-fast", "sim-ultrafast")
TASKS = {
    "steady": ROOT / "tests" / "data" / "steady.yaml",
    "checkout-timeouts": ROOT / "tasks" / "incident" / "checkout-timeouts.yaml",
}


async def sweep(name: str, path: Path, out: Path) -> list[tuple[str, str, float, float]]:
    tiers = load_tiers()
    traces = {}
    for tier in TIERS:
        result = await run_task(path, tier=tier, trace_dir=out)
        assert result.status == "ok", result.reason
        traces[tier] = load_trace(result.trace_path or "")
    rows = []
    for a in TIERS:
        graph = build_graph(traces[a])
        for b in TIERS:
            if a == b:
                continue
            pred = whatif(graph, Scenario.tier(b, tiers[b].profile), curve=()).predicted_ns / 1e9
            rows.append((a, b, pred, traces[b].end_ns / 1e9 - _run_start(traces[b])))
    return rows


def _run_start(trace: object) -> float:
    run = trace.of_kind("run")[0]  # type: ignore[attr-defined]
    return run.t0 / 1e9


def main() -> None:
    worst: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in TASKS.items():
            rows = asyncio.run(sweep(name, path, Path(tmp)))
            print(f"\n{name}")
            print(
                f"  {'from':<14} {'predict':<14} {'predicted s':>11} {'measured s':>10} "
                f"{'error':>7}"
            )
            for a, b, pred, meas in rows:
                err = pred / meas - 1
                worst[name] = max(worst.get(name, 0.0), abs(err))
                print(f"  {a:<14} {b:<14} {pred:11.3f} {meas:10.3f} {100 * err:+6.2f}%")
    print()
    for name, w in worst.items():
        print(f"worst |error| {name}: {100 * w:.2f}%")


if __name__ == "__main__":
    main()
