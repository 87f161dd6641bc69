"""The printed suite report: per task runs, passed, wall time, tokens and cost; suite totals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentloop.analysis._table import table
from agentloop.analysis.cost import step_order
from agentloop.model.prices import CATEGORIES
from agentloop.model.timing import LATE_FRACTION
from agentloop.suite.records import RunRecord, Suite, finish
from agentloop.suite.stats import quantile


def _s(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def cost_split(runs: Sequence[RunRecord]) -> tuple[dict[str, float], dict[str, float]]:
    """Suite cost by category and by step (its label, :mod:`agentloop.analysis.cost`), summed
    over the runs that were priced."""
    cats = dict.fromkeys(CATEGORIES, 0.0)
    steps: dict[str, float] = {}
    for r in runs:
        for k, v in (r.cost_by_category or {}).items():
            cats[k] = cats.get(k, 0.0) + v
        for k, v in (r.cost_by_step or {}).items():
            steps[k] = steps.get(k, 0.0) + v
    return cats, dict(sorted(steps.items(), key=lambda kv: step_order(kv[0])))


def render_suite(suite: Suite) -> str:
    """The suite as text tables."""
    s = finish(suite)
    tot = s.totals
    out = [
        f"suite  {tot['runs']} runs ({len(s.tasks)} tasks x {s.repeat}) on {s.tier}, "
        f"concurrency {s.concurrency}, {s.backend}",
        table(
            [
                "task",
                "runs",
                "passed",
                "agent s (median)",
                "p10-p90",
                "wall s (median)",
                "output tok",
                "cost (median)",
                "cost (total)",
            ],
            _task_rows(s),
        ),
        *_totals(s),
        *_failed(s),
    ]
    return "\n".join(out)


def _task_rows(s: Suite) -> list[list[Any]]:
    """One row a task: runs, passed, agent and wall times, output tokens, cost."""
    rows = []
    for t in s.tasks:
        w = t.wall_s
        rows.append(
            [
                t.task,
                t.runs,
                t.passed,
                _s(w["median"]),
                f"{_s(w['p10'])}-{_s(w['p90'])}" if t.runs > 1 else "-",  # one run: no spread
                _s(quantile([r.ended_s - r.started_s for r in s.runs if r.task == t.task], 0.5)),
                _s(t.output_tokens["median"], "{:.0f}"),
                _usd(t.cost_usd["median"]) if t.cost_usd else "-",
                _usd(t.total_cost_usd),
            ]
        )
    return rows


def _totals(s: Suite) -> list[str]:
    """The lines under the table: wall time, passed, tokens, throughput, timing, cost."""
    tot = s.totals
    out = [
        f"wall time   {s.wall_s:.2f} s for the suite; its runs: agent {tot['run_time_s']:.2f} s "
        f"(what the what-if re-times), wall {tot.get('run_wall_s', 0.0):.2f} s (with each "
        "run's set-up and success check)",
        f"passed      {tot['passed']}/{tot['runs']} ({tot['failed']} failed)",
        f"tokens      {tot['input_tokens']:,} input ({tot['cached_input_tokens']:,} "
        f"cached), {tot['output_tokens']:,} output ({tot['reasoning_tokens']:,} "
        f"reasoning)",
        f"throughput  {tot['runs_per_min']:.1f} runs/min, "
        f"{tot['output_tokens_per_s']:.0f} output tok/s",
    ]
    if tot.get("calls_under_load"):
        out.append(
            f"timing      {tot['calls_under_load']} of {tot['calls_measured']} model calls "
            f"measured under load (the client's own lateness past {100 * LATE_FRACTION:g}% of "
            f"their decode; worst +/-{1000 * tot['worst_timing_error_s']:.0f} ms)"
        )
    if tot["cost_usd"] is not None:
        label = " (placeholder prices: set your own in tiers.toml)" if s.placeholder_prices else ""
        out.append(f"cost        {_usd(tot['cost_usd'])}{label}")
        cats, steps = cost_split(s.runs)
        out.append("  by category: " + ", ".join(f"{k} {_usd(v)}" for k, v in cats.items()))
        out.append("  by step:     " + ", ".join(f"{k}: {_usd(v)}" for k, v in steps.items()))
    return out


def _failed(s: Suite) -> list[str]:
    """The failed runs, the first 20 of them, each with its status and reason."""
    failed = [r for r in s.runs if not r.passed]
    if not failed:
        return []
    out = ["failed runs:"]
    out += [
        f"  {r.task} #{r.repeat}: {r.status}: {r.reason}"
        + ("" if r.success is not False else " (success check failed)")
        for r in failed[:20]
    ]
    if len(failed) > 20:
        out.append(f"  ... {len(failed) - 20} more (suite.json lists all)")
    return out


def suite_json(suite: Suite) -> dict[str, Any]:
    from dataclasses import asdict

    return {"kind": "agentloop-suite", **asdict(finish(suite))}
