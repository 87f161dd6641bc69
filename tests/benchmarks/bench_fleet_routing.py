"""The routing proof on fleet-triage (issue 23): all-standard, all-ultrafast, and the plan.

Run: ``python tests/benchmarks/bench_fleet_routing.py``. Runs the fan-out playbook on the
simulator all-standard, routes that trace (``agentloop route --within 10%``), runs the plan and
all-ultrafast, and prints each run's measured time and cost beside what was predicted
(targets: the plan's time within 5% of its prediction and within 10% of all-ultrafast's, cost
within 1% of its prediction, and below all-ultrafast's). Measured once (shared 2-core machine):
all-standard 50.8 s $0.046429; all-ultrafast 6.41 s $0.092858 (predicted 6.43 s); the plan
6.61 s $0.085193 (predicted 6.51 s, $0.085193): +1.5% time, cost exact; 3% slower and 8.3%
cheaper than all-ultrafast.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def cli(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "agentloop", *args], capture_output=True, text=True, check=False
    ).stdout


def run(root: Path, name: str, *how: str) -> dict[str, Any]:
    out = root / name
    cli("run", "fleet-triage", *how, "--trace-dir", str(out), "-q")
    (trace,) = out.glob("*.jsonl")
    doc = json.loads(cli("report", str(trace), "--json"))
    return {"s": doc["measured_s"], "usd": doc["cost"]["total_usd"], "trace": str(trace)}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        std = run(root, "std", "--tier", "sim-standard")
        plan = root / "plan.json"
        routed = json.loads(
            cli(
                "route",
                str(std["trace"]),
                "--tiers",
                "sim-standard,sim-ultrafast",
                "--within",
                "10%",
                "--json",
                "-o",
                str(plan),
            )
        )
        on_plan = run(root, "plan", "--routing", str(plan))
        fast = run(root, "fast", "--tier", "sim-ultrafast")
    p_s, p_usd = routed["predicted_s"], routed["predicted_cost_usd"]
    print(f"{'run':<16}{'measured s':>11}{'predicted s':>13}{'cost $':>11}{'predicted $':>13}")
    print(f"{'all-standard':<16}{std['s']:>11.3f}{'':>13}{std['usd']:>11.6f}")
    print(
        f"{'all-ultrafast':<16}{fast['s']:>11.3f}{routed['fastest_s']:>13.3f}{fast['usd']:>11.6f}"
        f"{routed['fastest_cost_usd']:>13.6f}"
    )
    print(
        f"{'plan (10%)':<16}{on_plan['s']:>11.3f}{p_s:>13.3f}{on_plan['usd']:>11.6f}{p_usd:>13.6f}"
    )
    print(
        f"plan vs its prediction: time {100 * (on_plan['s'] / p_s - 1):+.1f}%, cost "
        f"{100 * (on_plan['usd'] / p_usd - 1):+.2f}%; vs all-ultrafast: time "
        f"{100 * (on_plan['s'] / fast['s'] - 1):+.1f}%, cost {100 * (on_plan['usd'] / fast['usd'] - 1):+.1f}%"
    )


if __name__ == "__main__":
    main()
