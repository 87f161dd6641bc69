"""What ``agentloop route`` answers for one trace: the plan, each call's tier and why, the ends.

:func:`plan_document` is the CLI's and the MCP server's one answer, from the router's search
(:mod:`agentloop.analysis.router`) over the candidate tiers (:func:`candidate_tiers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentloop.analysis._table import secs
from agentloop.analysis.mix import Options, TierModel
from agentloop.analysis.router import (
    Solution,
    cheapest,
    fastest,
    fastest_within,
    frontier,
    route,
    slacks,
)
from agentloop.config.routing import CallKey, Routing
from agentloop.config.tiers import get_tier, load_tiers
from agentloop.errors import ConfigError


def candidate_tiers(names: str, tiers_file: Path | None) -> list[TierModel]:
    """``--tiers A,B``: the candidate tiers with their profiles and prices (ConfigError: unknown, no profile)."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if len(wanted) < 2 or len(set(wanted)) < len(wanted):
        raise ConfigError(f"--tiers '{names}': name at least two different tiers, e.g. A,B")
    known = load_tiers(tiers_file)
    out = []
    for n in wanted:
        t = get_tier(known, n, tiers_file or "tiers.toml")
        out.append(TierModel.of(t.name, t.profile, t.prices))
    return out


def plan_document(o: Options, within: float | None, budget: float | None) -> dict[str, Any]:
    """Everything ``agentloop route`` says (``--within PCT`` or ``--budget-usd X``), as JSON-able
    data: the CLI's and the MCP server's one answer."""
    fast, cheap = fastest(o), cheapest(o)
    t_fast, t_cheap = o.end(fast), o.end(cheap)
    sol, limit, goal = _solve(o, within, budget, t_fast, cheap)
    g = o.graph
    trace = g.trace
    names = [t.name for t in o.tiers]
    routing = Routing(
        calls={
            CallKey(c.key.agent, c.key.invocation, c.key.step): names[t]
            for c, t in zip(o.calls, sol.choice, strict=True)
        },
        task=trace.run.task.name,
        trace=trace.run.run_id,
    )
    chosen = _point(names, sol)
    return {
        "trace": str(trace.path) if trace.path else None,
        "task": trace.run.task.name,
        "tiers": names,
        "goal": goal,
        "limit_s": limit / 1e9,
        "method": sol.method,
        "predicted_s": sol.predicted_ns / 1e9,
        "predicted_cost_usd": sol.cost_usd,
        "lower_bound_usd": sol.lower_bound_usd,
        "gap_usd": sol.gap_usd,
        "measured_s": g.measured_ns / 1e9,
        "fastest_s": t_fast / 1e9,
        "fastest_cost_usd": o.total_cost(fast),
        "cheapest_s": t_cheap / 1e9,
        "cheapest_cost_usd": o.total_cost(cheap),
        "calls_per_tier": chosen["calls"],
        "frontier": [_point(names, s) for s in frontier(o)],
        "calls": _call_rows(o, sol, fast, names, within is not None),
        "plan": routing.as_plan(),
    }


def _solve(
    o: Options, within: float | None, budget: float | None, t_fast: int, cheap: list[int]
) -> tuple[Solution, int, str]:
    """The plan for the goal, its limit (ns) and the goal in words: the cheapest within
    ``within`` % of the all-fastest time, else the fastest within ``budget`` (one the
    all-cheapest plan already passes is a ConfigError)."""
    if within is not None:
        limit = t_fast + round(t_fast * within / 100)
        sol = route(o, limit)
        assert sol is not None  # the all-fastest run is within any limit above it
        return sol, limit, f"cheapest within {within:g}% of the all-fastest time ({secs(limit)} s)"
    assert budget is not None
    got = fastest_within(o, budget)
    if got is None:
        raise ConfigError(
            f"--budget-usd {budget:g}: even the all-cheapest plan costs ${o.total_cost(cheap):.6f}"
        )
    return got, got.predicted_ns, f"fastest within ${budget:g}"


def _call_rows(
    o: Options, sol: Solution, fast: list[int], names: list[str], time_limit: bool
) -> list[dict[str, Any]]:
    """Each call's tier in the plan, its predicted time and why (its slack, or the critical
    path)."""
    # slack against the plan's own end: 0 is the critical path
    sl = slacks(o, list(sol.choice), o.graph.start_ns + sol.predicted_ns)
    # a slower tier on the plan's critical path is there because the limit (or the budget)
    # allows it, not because of where it is: say which
    slower = "the time limit allows it" if time_limit else "no faster tier fits the budget"
    calls = []
    for c, t, s, d, f in zip(o.calls, sol.choice, sl, o.dur, fast, strict=True):
        if s > 0:
            why = f"slack {s / 1e9:.3f} s"
        else:
            why = "on the critical path" if t == f or d[t] <= d[f] else slower
        calls.append(
            {
                "agent": c.key.agent,
                "invocation": c.key.invocation,
                "step": c.key.step,
                "tier": names[t],
                "predicted_s": d[t] / 1e9,
                "reason": why,
            }
        )
    return calls


def _point(names: list[str], s: Solution) -> dict[str, Any]:
    """A plan as the frontier lists it: predicted time and cost, calls per tier."""
    per = {n: 0 for n in names}
    for t in s.choice:
        per[names[t]] += 1
    return {"predicted_s": s.predicted_ns / 1e9, "predicted_cost_usd": s.cost_usd, "calls": per}
