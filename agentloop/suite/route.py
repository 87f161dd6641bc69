"""Suite-level routing: which task runs on which tier for the cheapest suite within a wall time.

A suite folder's runs (:func:`agentloop.suite.compare.load`) are each predicted whole on every
candidate tier (:mod:`agentloop.analysis.mix`: each call on that tier's profile and prices);
the suite's wall time at concurrency N is the list schedule of :mod:`agentloop.suite.whatif`
(each run's recorded slot, set-up and check, with its run time replaced by the prediction, in
the recorded start order). A task's runs share one tier. The cheapest assignment whose wall
time is within PCT of the all-fastest one (or the fastest within a budget) is found
exhaustively when there are at most :data:`agentloop.analysis.router.EXHAUSTIVE` assignments,
else greedily (the task saving most per second of wall time added, while it fits), with the
same per-task lower bound as the call router: each task's cheapest tier that fits alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentloop.analysis.mix import TierModel, options
from agentloop.analysis.router import EXHAUSTIVE
from agentloop.errors import ConfigError
from agentloop.suite.compare import load
from agentloop.suite.whatif import schedule


@dataclass(frozen=True, slots=True)
class SuiteOptions:
    """Per task: its runs' indices; per run and tier: predicted run time (s) and cost (USD)."""

    tasks: tuple[str, ...]
    runs_of: tuple[tuple[int, ...], ...]
    order: tuple[int, ...]  # runs in recorded start order
    slot_s: tuple[float, ...]  # per run: set-up and check around its run time
    time_s: tuple[tuple[float, ...], ...]  # [run][tier]
    cost: tuple[tuple[float, ...], ...]  # [run][tier]
    tiers: tuple[TierModel, ...]
    concurrency: int

    def wall(self, choice: Sequence[int]) -> float:
        tier_of = {r: choice[k] for k, rs in enumerate(self.runs_of) for r in rs}
        return schedule(
            [self.slot_s[r] + self.time_s[r][tier_of[r]] for r in self.order], self.concurrency
        )

    def total_cost(self, choice: Sequence[int]) -> float:
        return sum(self.cost[r][choice[k]] for k, rs in enumerate(self.runs_of) for r in rs)


def suite_options(folder: Path, tiers: list[TierModel], concurrency: int) -> SuiteOptions:
    """Predict every run of a suite folder on each tier."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1 (got {concurrency})")
    A = load(folder)
    if not A.runs:
        raise ConfigError(f"{folder}: no finished runs to route")
    time_s, cost = [], []
    for g in A.graphs:
        o = options(g, tiers)
        time_s.append(tuple(o.end([t] * len(o.calls)) / 1e9 for t in range(len(tiers))))
        cost.append(tuple(o.total_cost([t] * len(o.calls)) for t in range(len(tiers))))
    slot = tuple(
        max(0.0, (r.ended_s - r.started_s) - g.measured_ns / 1e9)
        for r, g in zip(A.runs, A.graphs, strict=True)
    )
    by: dict[str, list[int]] = {}
    for i, r in enumerate(A.runs):
        by.setdefault(r.task, []).append(i)
    return SuiteOptions(
        tuple(by),
        tuple(tuple(v) for v in by.values()),
        tuple(sorted(range(len(A.runs)), key=lambda i: A.runs[i].started_s)),
        slot,
        tuple(time_s),
        tuple(cost),
        tuple(tiers),
        concurrency,
    )


def _task_rows(o: SuiteOptions) -> list[tuple[list[float], list[float]]]:
    """Per task: its runs' summed time and cost per tier."""
    n = len(o.tiers)
    return [
        (
            [sum(o.time_s[r][t] for r in rs) for t in range(n)],
            [sum(o.cost[r][t] for r in rs) for t in range(n)],
        )
        for rs in o.runs_of
    ]


Test = Callable[[Sequence[int]], bool]  # a choice of tier per task -> yes / no
Better = Callable[[Sequence[int], Sequence[int]], bool]  # is the first choice better?


def route_suite(
    o: SuiteOptions, within_pct: float | None, budget_usd: float | None
) -> dict[str, Any]:
    """The suite's plan as JSON-able data: the tier per task, predicted wall time and cost,
    the all-fastest and all-cheapest ends, and what is proven."""
    rows = _task_rows(o)
    n = len(o.tiers)
    fast = [min(range(n), key=lambda t: (ts[t], cs[t])) for ts, cs in rows]
    cheap = [min(range(n), key=lambda t: (cs[t], ts[t])) for ts, cs in rows]
    limit, fits, better = _goal(o, within_pct, budget_usd, fast, cheap)
    method = "exhaustive" if n ** len(rows) <= EXHAUSTIVE else "greedy"
    if method == "exhaustive":
        choice = _exhaustive(n, len(rows), fits, better)
    else:
        by_cost = within_pct is not None
        choice = _greedy(o, n, list(fast if by_cost else cheap), fits, better, by_cost)
    names = [t.name for t in o.tiers]
    return {
        "concurrency": o.concurrency,
        "tiers": names,
        "method": method,
        "limit": limit,
        "predicted_wall_s": o.wall(choice),
        "predicted_cost_usd": o.total_cost(choice),
        "fastest_wall_s": o.wall(fast),
        "fastest_cost_usd": o.total_cost(fast),
        "cheapest_wall_s": o.wall(cheap),
        "cheapest_cost_usd": o.total_cost(cheap),
        "tasks": [
            {
                "task": task,
                "runs": len(rs),
                "tier": names[t],
                "run_s": {nm: rows[k][0][j] / len(rs) for j, nm in enumerate(names)},
                "cost_usd": {nm: rows[k][1][j] / len(rs) for j, nm in enumerate(names)},
            }
            for k, (task, rs, t) in enumerate(zip(o.tasks, o.runs_of, choice, strict=True))
        ],
    }


def _goal(
    o: SuiteOptions,
    within_pct: float | None,
    budget_usd: float | None,
    fast: Sequence[int],
    cheap: Sequence[int],
) -> tuple[float, Test, Better]:
    """The limit, what fits it and what is better: the cheapest within ``within_pct`` of the
    all-fastest wall time, else the fastest within ``budget_usd`` (one the all-cheapest
    suite already passes is a ConfigError)."""
    if within_pct is not None:
        limit = o.wall(fast) * (1 + within_pct / 100)

        def fits(ch: Sequence[int]) -> bool:
            return o.wall(ch) <= limit + 1e-9

        def better(a: Sequence[int], b: Sequence[int]) -> bool:
            return o.total_cost(a) < o.total_cost(b) - 1e-12

        return limit, fits, better
    assert budget_usd is not None
    if o.total_cost(cheap) > budget_usd + 1e-12:
        raise ConfigError(
            f"--budget-usd {budget_usd:g}: even the all-cheapest suite costs "
            f"${o.total_cost(cheap):.6f}"
        )

    def fits_budget(ch: Sequence[int]) -> bool:
        return o.total_cost(ch) <= budget_usd + 1e-12

    def faster(a: Sequence[int], b: Sequence[int]) -> bool:
        return o.wall(a) < o.wall(b) - 1e-9

    return budget_usd, fits_budget, faster


def _exhaustive(n: int, tasks: int, fits: Test, better: Better) -> list[int]:
    """The best of every choice of ``n`` tiers for each of ``tasks`` tasks that fits."""
    best: list[int] | None = None
    for tup in itertools.product(range(n), repeat=tasks):
        if fits(tup) and (best is None or better(tup, best)):
            best = list(tup)
    assert best is not None  # all-fastest fits a time limit, all-cheapest a budget
    return best


def _greedy(
    o: SuiteOptions, n: int, choice: list[int], fits: Test, better: Better, by_cost: bool
) -> list[int]:
    """From ``choice`` (an end that fits), one task's tier moved at a time while a move that
    fits is better: the cheapest such move when ``by_cost`` (a time limit), else the fastest."""
    while True:
        moves = []
        for k in range(len(choice)):
            for t in range(n):
                if t == choice[k]:
                    continue
                ch = list(choice)
                ch[k] = t
                if fits(ch) and better(ch, choice):
                    moves.append((o.total_cost(ch), o.wall(ch), ch))
        if not moves:
            return choice
        choice = min(moves)[2] if by_cost else min(moves, key=lambda m: m[1])[2]


def render_suite_route(doc: dict[str, Any]) -> str:
    """The suite plan as text."""
    from agentloop.analysis._table import table

    names = doc["tiers"]
    out = [
        f"route: suite at concurrency {doc['concurrency']} on {', '.join(names)} ({doc['method']})",
        f"  all-fastest   wall {doc['fastest_wall_s']:9.3f} s   ${doc['fastest_cost_usd']:.6f}",
        f"  all-cheapest  wall {doc['cheapest_wall_s']:9.3f} s   ${doc['cheapest_cost_usd']:.6f}",
        f"  plan          wall {doc['predicted_wall_s']:9.3f} s   ${doc['predicted_cost_usd']:.6f}",
        "",
        table(
            ["task", "runs", "tier", *[f"{n} s" for n in names], *[f"{n} $" for n in names]],
            [
                [
                    t["task"],
                    str(t["runs"]),
                    t["tier"],
                    *[f"{t['run_s'][n]:.3f}" for n in names],
                    *[f"{t['cost_usd'][n]:.6f}" for n in names],
                ]
                for t in doc["tasks"]
            ],
        ),
        "",
        "run each task on its tier: agentloop suite TASK... --route main=TIER (per task)",
    ]
    return "\n".join(out)
