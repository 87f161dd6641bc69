"""How long the router takes on a 2,000-call fan-out trace (target: under 5 s), and its bound.

Run: ``python tests/benchmarks/bench_router.py``. Prints the trace's size, the time to predict
every call on both tiers, to route within 10% and to compute the frontier, and the plan's cost
beside the lower bound and the all-fastest cost.
"""

from __future__ import annotations

import time

from agentloop.analysis.graph import build_graph
from agentloop.analysis.mix import TierModel, options
from agentloop.analysis.router import fastest, frontier, route
from agentloop.analysis.synthetic import tier_record
from agentloop.analysis.synthetic_runs import fanout_run
from agentloop.model.prices import Prices
from agentloop.model.speed import SpeedProfile


def main() -> None:
    tiers = [tier_record("std", output_tps=60, prices=(1.25, 0.125, 10.0))]
    g = build_graph(fanout_run([8, 3, 2, 2, 1, 1, 1, 1], rounds=80, tiers=tiers).trace())
    cands = [
        TierModel("std", SpeedProfile(0.3, 20000, 60), Prices(1.25, 0.125, 10.0)),
        TierModel("fast", SpeedProfile(0.2, 50000, 600), Prices(2.5, 0.25, 20.0)),
    ]
    t0 = time.perf_counter()
    o = options(g, cands)
    t1 = time.perf_counter()
    fast = fastest(o)
    sol = route(o, o.end(fast) * 110 // 100)
    t2 = time.perf_counter()
    pts = frontier(o)
    t3 = time.perf_counter()
    assert sol is not None
    print(f"trace: {len(g)} spans, {len(o.calls)} model calls, 2 tiers")
    print(f"predict every call on every tier: {t1 - t0:.3f} s")
    print(f"route --within 10%:              {t2 - t1:.3f} s  (target < 5 s)")
    print(f"frontier ({len(pts)} points):          {t3 - t2:.3f} s")
    print(
        f"plan ${sol.cost_usd:.4f} (all-fastest ${o.total_cost(fast):.4f}, lower bound "
        f"${sol.lower_bound_usd:.4f}), {sol.predicted_ns / 1e9:.1f} s vs all-fastest "
        f"{o.end(fast) / 1e9:.1f} s"
    )


if __name__ == "__main__":
    main()
