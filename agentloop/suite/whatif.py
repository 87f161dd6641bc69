"""Suite-level what-if: a suite folder's runs re-timed for another tier, at some concurrency.

Folder A, tier B, concurrency N: each run's predicted time
(:func:`agentloop.analysis.whatif.predict_ns`) and its cost at B's prices (same tokens), and the
suite's wall time on N workers by list scheduling in A's start order: each run's slot is its
recorded slot (set-up, check) with its run time replaced by the prediction. The same schedule
with the measured times is shown beside the measured wall time.

Each run is read from its columnar cache (:mod:`agentloop.analysis.store`, made on first use
whatever the trace's size) and predicted on arrays (:func:`agentloop.analysis.vwhatif.
predict_ns`): a suite of 1,000 runs is answered in seconds once its caches exist, where loading
every trace took minutes. ``columns=False`` takes the loops over each loaded trace instead,
with the same figures (the parity test compares the two).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentloop.analysis._table import table
from agentloop.analysis.cost import breakdown, total_of_columns
from agentloop.analysis.whatif import Scenario
from agentloop.config.tiers import Tier
from agentloop.errors import ConfigError
from agentloop.model.prices import Prices
from agentloop.suite.records import RunRecord, Suite, load_suite
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


@dataclass(frozen=True)
class _Run:
    """One finished run's figures: measured and predicted agent time, tokens at both prices."""

    record: RunRecord
    a_s: float
    p_s: float
    cost_a: float | None
    cost_b: float | None


def _runs(
    folder: Path, suite: Suite, sc: Scenario, prices_b: Prices | None, columns: bool
) -> tuple[list[_Run], list[str]]:
    """Every run with a readable, finished trace (``skipped`` says why the others are left
    out), its prices A those of the first such run's tier."""
    runs: list[_Run] = []
    skipped: list[str] = []
    prices_a: Prices | None = None
    for r in suite.runs:
        if not r.trace or not (folder / r.trace).is_file():
            skipped.append(f"{r.task} #{r.repeat}: no trace")
            continue
        got = (_on_columns if columns else _on_loops)(folder / r.trace, sc)
        if got is None:
            skipped.append(f"{r.task} #{r.repeat}: trace incomplete")
            continue
        measured, predicted, prices, cost = got
        if not runs:
            prices_a = prices
        runs.append(_Run(r, measured / 1e9, predicted / 1e9, cost(prices_a), cost(prices_b)))
    return runs, skipped


_Got = tuple[int, int, Prices | None, Callable[[Prices | None], float | None]] | None


def _on_columns(path: Path, sc: Scenario) -> _Got:
    from agentloop.analysis import store, vector, vwhatif
    from agentloop.trace.run_header import parse_header

    c = store.load_columns(path)
    if not c.complete:
        return None
    vg = vector.build(c)
    prices = parse_header(c.header, path).tier.prices

    def cost(p: Prices | None) -> float | None:
        return None if p is None else total_of_columns(c.usage, p)

    return vg.measured_ns, vwhatif.predict_ns(vg, sc), prices, cost


def _on_loops(path: Path, sc: Scenario) -> _Got:
    from agentloop.analysis.graph import build_graph
    from agentloop.analysis.whatif import predict_ns
    from agentloop.trace.reader import load_trace

    g = build_graph(load_trace(path))
    if not g.trace.complete:
        return None
    calls = [s.model for s in g.trace.of_kind("model")]

    def cost(p: Prices | None) -> float | None:
        return None if p is None else breakdown(calls, p).total_usd

    return g.measured_ns, predict_ns(g, sc), g.trace.run.tier.prices, cost


def suite_whatif(
    a_dir: Path, tier: Tier, concurrency: int | None = None, columns: bool = True
) -> SuiteWhatIf:
    """Predict suite folder A's wall time and cost on ``tier`` with ``concurrency`` workers
    (default: the concurrency A ran with)."""
    suite = load_suite(a_dir)
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1 (got {concurrency})")
    if tier.profile is None:
        raise ConfigError(
            f"tier '{tier.name}' has no speed profile to predict with "
            f"(agentloop probe --tier {tier.name} --write measures one)"
        )
    sc = Scenario.tier(tier.name, tier.profile)
    runs, skipped = _runs(a_dir, suite, sc, tier.prices, columns)
    if not runs:
        raise ConfigError(f"{a_dir}: no finished runs to predict from")
    n = concurrency or suite.concurrency
    priced_a = runs[0].cost_a is not None
    order = sorted(range(len(runs)), key=lambda i: runs[i].record.started_s)
    a_s = [r.a_s for r in runs]
    p_s = [r.p_s for r in runs]
    slot = [max(0.0, (r.record.ended_s - r.record.started_s) - r.a_s) for r in runs]
    by: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        by.setdefault(r.record.task, []).append(i)
    ca = [r.cost_a for r in runs]
    cb = [r.cost_b for r in runs]
    rows = [
        TaskWhatIf(
            name,
            len(ix),
            mean([a_s[i] for i in ix]),
            mean([p_s[i] for i in ix]),
            sum(a_s[i] for i in ix) / sum(p_s[i] for i in ix),
            sum(ca[i] or 0 for i in ix) / len(ix) if priced_a else None,
            None if tier.prices is None else sum(cb[i] or 0 for i in ix) / len(ix),
        )
        for name, ix in by.items()
    ]
    placeholder = bool(tier.prices and tier.prices.placeholder) or suite.placeholder_prices
    return SuiteWhatIf(
        suite.tier,
        tier.name,
        n,
        rows,
        suite.wall_s,
        schedule([slot[i] + a_s[i] for i in order], suite.concurrency),
        schedule([slot[i] + p_s[i] for i in order], n),
        sum(a_s),
        sum(p_s),
        sum(c or 0 for c in ca) if priced_a else None,
        None if tier.prices is None else sum(c or 0 for c in cb),
        placeholder,
        [f"A: {s}" for s in skipped],
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
