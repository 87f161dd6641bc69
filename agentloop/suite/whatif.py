"""Suite-level what-if: a suite folder's runs re-timed for another tier, at some concurrency.

Folder A, tier B, concurrency N: each run's predicted time
(:func:`agentloop.analysis.whatif.predict_ns`) and its cost at B's prices (same tokens), and the
suite's wall time on N workers by list scheduling in A's start order: each run's slot is its
recorded slot (set-up, check) with its run time replaced by the prediction. The same schedule
with the measured times is shown beside the measured wall time.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentloop.analysis._table import table
from agentloop.analysis.cost import breakdown
from agentloop.analysis.graph import Graph
from agentloop.analysis.whatif import Scenario, predict_ns
from agentloop.config.tiers import Tier
from agentloop.errors import ConfigError
from agentloop.model.prices import Prices
from agentloop.suite.compare import load
from agentloop.suite.stats import mean


def schedule(slots: Sequence[float], workers: int) -> float:
    """Makespan of ``slots`` (seconds, in start order) on ``workers`` by list scheduling."""
    free = [0.0] * max(1, workers)
    end = 0.0
    for s in slots:
        t = heapq.heappop(free) + s
        end = max(end, t)
        heapq.heappush(free, t)
    return end


@dataclass(frozen=True)
class TaskWhatIf:
    """One task of a suite re-timed: its runs' mean times and costs (None: no prices)."""

    task: str
    runs: int
    a_s: float
    predicted_s: float
    speedup: float
    cost_a_usd: float | None
    cost_b_usd: float | None


@dataclass(frozen=True)
class SuiteWhatIf:
    """A suite re-timed for another tier at some concurrency."""

    tier_a: str
    tier_b: str
    concurrency: int
    tasks: list[TaskWhatIf]
    measured_wall_s: float
    scheduled_a_s: float  # the schedule with the measured times (check of the method)
    predicted_wall_s: float
    run_time_a_s: float
    run_time_b_s: float
    cost_a_usd: float | None
    cost_b_usd: float | None
    placeholder_prices: bool
    notes: list[str]


def _cost(g: Graph, prices: Prices | None) -> float | None:
    if prices is None:
        return None
    return breakdown((s.model for s in g.trace.of_kind("model")), prices).total_usd


def suite_whatif(a_dir: Path, tier: Tier, concurrency: int | None = None) -> SuiteWhatIf:
    """Predict suite folder A's wall time and cost on ``tier`` with ``concurrency`` workers
    (default: the concurrency A ran with)."""
    A = load(a_dir)
    if not A.runs:
        raise ConfigError(f"{a_dir}: no finished runs to predict from")
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1 (got {concurrency})")
    n = concurrency or A.suite.concurrency
    if tier.profile is None:
        raise ConfigError(
            f"tier '{tier.name}' has no speed profile to predict with "
            f"(agentloop probe --tier {tier.name} --write measures one)"
        )
    sc = Scenario.tier(tier.name, tier.profile)
    a_prices = A.graphs[0].trace.run.tier.prices
    order = sorted(range(len(A.runs)), key=lambda i: A.runs[i].started_s)
    a_s = [g.measured_ns / 1e9 for g in A.graphs]
    p_s = [predict_ns(g, sc) / 1e9 for g in A.graphs]
    slot = [max(0.0, (r.ended_s - r.started_s) - a) for r, a in zip(A.runs, a_s, strict=True)]
    by: dict[str, list[int]] = {}
    for i, r in enumerate(A.runs):
        by.setdefault(r.task, []).append(i)
    ca = [_cost(g, a_prices) for g in A.graphs]
    cb = [_cost(g, tier.prices) for g in A.graphs]
    rows = [
        TaskWhatIf(
            name,
            len(ix),
            mean([a_s[i] for i in ix]),
            mean([p_s[i] for i in ix]),
            sum(a_s[i] for i in ix) / sum(p_s[i] for i in ix),
            None if a_prices is None else sum(ca[i] or 0 for i in ix) / len(ix),
            None if tier.prices is None else sum(cb[i] or 0 for i in ix) / len(ix),
        )
        for name, ix in by.items()
    ]
    placeholder = bool(tier.prices and tier.prices.placeholder) or A.suite.placeholder_prices
    return SuiteWhatIf(
        A.suite.tier,
        tier.name,
        n,
        rows,
        A.suite.wall_s,
        schedule([slot[i] + a_s[i] for i in order], A.suite.concurrency),
        schedule([slot[i] + p_s[i] for i in order], n),
        sum(a_s),
        sum(p_s),
        None if a_prices is None else sum(c or 0 for c in ca),
        None if tier.prices is None else sum(c or 0 for c in cb),
        placeholder,
        [f"A: {s}" for s in A.skipped],
    )


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def render_suite_whatif(w: SuiteWhatIf) -> str:
    rows = [
        [
            t.task,
            t.runs,
            f"{t.a_s:.2f}",
            f"{t.predicted_s:.2f}",
            f"{t.speedup:.2f}x",
            _usd(t.cost_a_usd),
            _usd(t.cost_b_usd),
        ]
        for t in w.tasks
    ]
    out = [
        f"suite whatif  {w.tier_a} -> {w.tier_b}, concurrency {w.concurrency}",
        table(
            [
                "task",
                "runs",
                "A s (mean)",
                "predicted s",
                "speedup",
                "cost A (mean)",
                f"cost {w.tier_b} (mean)",
            ],
            rows,
        ),
        f"wall time   measured {w.measured_wall_s:.2f} s (schedule check with measured times: "
        f"{w.scheduled_a_s:.2f} s); predicted {w.predicted_wall_s:.2f} s on {w.tier_b} "
        f"with {w.concurrency} at once",
        f"run time    {w.run_time_a_s:.2f} s -> {w.run_time_b_s:.2f} s "
        f"({w.run_time_a_s / w.run_time_b_s:.2f}x)"
        if w.run_time_b_s
        else "",
        f"cost        {_usd(w.cost_a_usd)} -> {_usd(w.cost_b_usd)}"
        + (" (placeholder prices)" if w.placeholder_prices else ""),
    ]
    out += [f"note: {n}" for n in w.notes]
    return "\n".join(x for x in out if x)


def suite_whatif_json(w: SuiteWhatIf) -> dict[str, Any]:
    return asdict(w)
