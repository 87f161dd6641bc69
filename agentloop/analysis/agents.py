"""Which agent, invocation and tier each span of a recorded run belongs to (issue 23).

A sub-agent call is a tool span holding an ``agent`` span; every step, model and tool span of
the sub-run carries the agent's name, invocation and depth as start attributes
(:mod:`agentloop.trace.attrs`). A span without them is the main agent's (invocation 1, depth
0), so a trace written before sub-agents reads as one agent. A model span's tier is its ``tier``
end attribute when the header lists that tier, else the header's ``tier`` (the main agent's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from agentloop.analysis.flat import Graph
from agentloop.config.routing import CallKey
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace
from agentloop.trace.run_header import TierInfo


class Who(NamedTuple):
    """The agent a span belongs to: its name, which invocation of it, how deep."""

    agent: str
    invocation: int
    depth: int


MAIN = Who(A.MAIN_AGENT, 1, 0)


def who(start_attrs: Mapping[str, Any]) -> Who:
    """The agent of a span from its start attributes (none: the main agent)."""
    name = start_attrs.get(A.GEN_AI_AGENT_NAME)
    if not isinstance(name, str) or not name:
        return MAIN
    inv, depth = start_attrs.get(A.AGENT_INVOCATION), start_attrs.get(A.AGENT_DEPTH)
    return Who(
        name,
        inv if type(inv) is int else 1,
        depth if type(depth) is int else 1,
    )


def step_text(start_attrs: Mapping[str, Any], name: str) -> str:
    """A step span's label: its step number for the main agent ("3"), the agent, invocation
    and step for a sub-run's ("logs#2:3"), its name when it has no number."""
    n = start_attrs.get(A.STEP)
    if n is None:
        return name
    w = who(start_attrs)
    return str(n) if w.agent == A.MAIN_AGENT else f"{w.agent}#{w.invocation}:{n}"


def sub_run_step(label: str) -> tuple[str, int, int] | None:
    """A sub-run's step label (:func:`step_text`, "logs#2:3") as its agent, invocation and step;
    None for the main agent's ("3") or a span's name."""
    agent, _, rest = label.rpartition("#")
    inv, sep, step = rest.partition(":")
    if agent and sep and inv.isdigit() and step.isdigit():
        return agent, int(inv), int(step)
    return None


def steps_text(labels: Iterable[str]) -> str:
    """A run's step count from its steps' labels (:func:`step_text`): the main agent's steps,
    its sub-runs' apart ("6 steps (+16 in sub-agents)"), as the trace's end counts them."""
    main = sub = 0
    for label in labels:
        if sub_run_step(label) is None:
            main += 1
        else:
            sub += 1
    return f"{main} steps" + (f" (+{sub} in sub-agents)" if sub else "")


def recorded_tiers(trace: Trace) -> dict[str, TierInfo]:
    """Every tier the run's header lists (``tiers``; an older trace: its one ``tier``), by name."""
    return {t.name: t for t in trace.run.all_tiers}


def call_tier(trace: Trace, span_attrs: Mapping[str, Any], tiers: Mapping[str, TierInfo]) -> str:
    """The tier one model call used: its ``tier`` end attribute if the header lists it, else
    the header's main tier (an older trace names only that one)."""
    t = span_attrs.get(A.TIER)
    return t if isinstance(t, str) and t in tiers else trace.run.tier.name


class Call(NamedTuple):
    """One re-timable model call of a graph: its span index, key (agent, invocation, step),
    the tier it used, and its agent's depth."""

    span: int
    key: CallKey
    tier: str
    depth: int


def calls(g: Graph) -> list[Call]:
    """The graph's re-timable model calls (``g.models``), in index order."""
    tiers = recorded_tiers(g.trace)
    out = []
    for i in g.models:
        s = g.spans[i]
        w = who(s.start_attrs)
        step = s.step or (s.model.step if s.model is not None else None) or 0
        out.append(
            Call(
                i, CallKey(w.agent, w.invocation, step), call_tier(g.trace, s.attrs, tiers), w.depth
            )
        )
    return out


def usage(g: Graph, by: str) -> list[dict[str, Any]]:
    """Calls, model time (busy and on the critical path, s) and cost per tier (``by="tier"``)
    or per agent (``by="agent"``), in first-use order: what ``report`` lists (issue 23)."""
    from agentloop.analysis.passes import critical_path
    from agentloop.model.prices import cost_parts

    tiers = recorded_tiers(g.trace)
    on_path = {i for i, _, gap in critical_path(g, g.t0, g.t1, g.end_ns) if not gap and i >= 0}
    rows: dict[str, dict[str, Any]] = {}
    for c in calls(g):
        m = g.models[c.span]
        name = c.tier if by == "tier" else c.key.agent
        row = rows.setdefault(
            name, {by: name, "calls": 0, "model_s": 0.0, "critical_model_s": 0.0, "cost_usd": 0.0}
        )
        if by == "agent":
            row.setdefault("invocations", set()).add(c.key.invocation)
        secs = (g.t1[c.span] - g.t0[c.span]) / 1e9
        row["calls"] += 1
        row["model_s"] += secs
        if c.span in on_path:
            row["critical_model_s"] += secs
        prices = tiers[c.tier].prices
        if prices is not None:
            out = m.reasoning_tokens + m.visible_tokens
            row["cost_usd"] += sum(
                cost_parts(
                    prices, m.input_tokens, m.cached_tokens, m.reasoning_tokens, out
                ).values()
            )
    for row in rows.values():
        if "invocations" in row:
            row["invocations"] = len(row["invocations"])
    return list(rows.values())


def has_sub_agents(g: Graph) -> bool:
    return "agent" in g.kinds


def render_usage(g: Graph) -> str:
    """The per-tier (and, with sub-agents, per-agent) table of a report; "" for a one-tier,
    one-agent run (its report says it all already)."""
    return render_usage_rows(usage(g, "tier"), usage(g, "agent") if has_sub_agents(g) else None)


def render_usage_rows(tiers: list[dict[str, Any]], agents: list[dict[str, Any]] | None) -> str:
    """:func:`render_usage` of the rows :func:`usage` gives (``agents``: None without
    sub-agents)."""
    from agentloop.analysis._table import table

    if len(tiers) <= 1 and agents is None:
        return ""
    cols = ["calls", "model s", "critical s", "cost $"]

    def rows(items: list[dict[str, Any]], key: str) -> list[list[str]]:
        return [
            [
                str(r[key]),
                str(r["calls"]),
                f"{r['model_s']:.3f}",
                f"{r['critical_model_s']:.3f}",
                f"{r['cost_usd']:.6f}",
            ]
            for r in items
        ]

    out = ["Per tier (model calls; critical s: their time on the critical path):"]
    out.append(table(["tier", *cols], rows(tiers, "tier")))
    if agents is not None:
        out += ["", "Per agent:", table(["agent", *cols], rows(agents, "agent"))]
    return "\n".join(out)


def usage_of_columns(vg: Any, header: Any, on_path: Any, by: str) -> list[dict[str, Any]]:
    """:func:`usage` from a trace's columns (``vg``: their :class:`agentloop.analysis.vector.
    VGraph`; ``on_path``: the spans whose own time is on the recorded critical path): the same
    rows, each float summed call after call as the loop adds it."""
    import numpy as np

    from agentloop.analysis.columnar import CALL_COLUMNS
    from agentloop.analysis.cost import _call_sums, call_parts, in_order_sums
    from agentloop.analysis.strcols import kind_is

    c = vg.c
    tiers = {t.name: t for t in header.all_tiers}
    row = np.searchsorted(np.flatnonzero(kind_is(c, "model")), vg.models)
    calls = c.calls[row]
    key = calls[:, CALL_COLUMNS.index(by)]
    names = c.call_names[by]
    secs = (c.t1[vg.models] - c.t0[vg.models]) / 1e9
    n = len(names)
    crit = on_path[vg.models]
    cost = np.zeros(len(row), np.float64)
    priced = np.zeros(len(row), np.bool_)
    tier = calls[:, CALL_COLUMNS.index("tier")]
    p = c.parts
    tokens = np.stack([p[:, 7], c.cached_tokens, p[:, 8], p[:, 8] + p[:, 9]], axis=1)
    for t, name in enumerate(c.call_names["tier"]):
        prices, mine = tiers[name].prices, tier == t
        if prices is not None and mine.any():
            cost[mine] = _call_sums(call_parts(prices, tokens[mine]))
            priced |= mine
    cols = {
        "calls": np.bincount(key, minlength=n).tolist(),
        "model_s": in_order_sums(secs, key, n).tolist(),
        "critical_model_s": in_order_sums(secs[crit], key[crit], n).tolist(),
        "cost_usd": in_order_sums(cost[priced], key[priced], n).tolist(),
    }
    _, first = np.unique(key, return_index=True)
    out = []
    for k in key[np.sort(first)].tolist():  # first-use order
        r: dict[str, Any] = {by: names[k], **{f: v[k] for f, v in cols.items()}}
        if by == "agent":
            inv = calls[key == k, CALL_COLUMNS.index("invocation")]
            r["invocations"] = len(np.unique(inv))
        out.append(r)
    return out
