"""Benchmark: how closely ``agentloop probe`` measures the simulator's pacing (sim-ultrafast).

Run: ``python tests/benchmarks/bench_probe.py [PROBES]`` (default 10, about a minute). Each probe
is ``probe --tier sim-ultrafast -n 2``, as the test runs it; printed: each measured figure against
the profile (750 tok/s, 0.2 s base, 100,000 tok/s prefill) as the median and worst relative
error over the probes. Targets (an idle machine): output tok/s within 2%,
TTFT and base latency within 5%, prefill rate within 25%; exit 1 if the median misses one. The
test (tests/test_tiers_cli.py) keeps only what load cannot break: a paced answer is never early.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop.commands.probe import probe  # noqa: E402
from agentloop.config.tiers import get_tier, load_tiers  # noqa: E402

TARGETS = {"output_tps": 0.02, "ttft_s": 0.05, "base_latency_s": 0.05, "prefill_tps": 0.25}


async def one_probe() -> dict[str, float]:
    tier = get_tier(load_tiers(), "sim-ultrafast")
    res = await probe(tier, n=2)
    p = tier.profile
    assert p is not None
    expected = {
        "output_tps": p.output_tps,
        "ttft_s": p.base_latency_s + res["input_tokens_short"] / p.prefill_tps,
        "base_latency_s": p.base_latency_s,
        "prefill_tps": p.prefill_tps,
    }
    return {k: res[k] / v - 1 for k, v in expected.items()}


def main() -> int:
    probes = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    errors = [asyncio.run(one_probe()) for _ in range(probes)]
    missed = []
    print(f"probe --tier sim-ultrafast -n 2, {len(errors)} probes: error against the profile")
    print(f"{'figure':<16} {'median':>8} {'worst':>8} {'target':>8}")
    for key, target in TARGETS.items():
        values = [e[key] for e in errors]
        median = statistics.median(values)
        worst = max(values, key=abs)
        print(f"{key:<16} {median:>+8.2%} {worst:>+8.2%} {target:>8.0%}")
        if abs(median) > target:
            missed.append(key)
    if missed:
        print("missed: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
