"""The flat-array passes agree with straightforward per-span re-timing and path walks."""

from __future__ import annotations

import math

import pytest

from agentloop.analysis.graph import Graph, build_graph, critical_path, retime, retime_pair
from agentloop.analysis.synthetic import TraceBuilder, agent_lines, model_attrs
from agentloop.analysis.synthetic_runs import StepSpec, sequential_run
from agentloop.analysis.whatif import Scenario, durations, new_parts, path_breakdown, whatif
from agentloop.config.tiers import SpeedProfile
from agentloop.trace.reader import parse_lines

S = 1_000_000_000
MS = 1_000_000


def side_by_side(after_order: tuple[str, ...], tool_s: int = 2) -> Graph:
    """A model call (1 s base, 2 s decode) and a tool side by side, then a span after both."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    st = b.start("step", "step 1", 0, run, step=1)
    m = b.start("model", "chat demo", 0, st)
    tl = b.start("tool", "execute_tool t", 0, st)
    b.end(tl, tool_s * S, **{"gen_ai.tool.name": "t"})
    b.end(m, 3 * S, **model_attrs(0, 1 * S, 0, 121, 60.0))
    ids = {"m": m, "t": tl}
    x = b.start("tool", "execute_tool x", 3 * S, st, [ids[k] for k in after_order])
    b.end(x, 4 * S, **{"gen_ai.tool.name": "x"})
    b.end(st, 4 * S)
    b.end(run, 4 * S)
    b.finish(4 * S)
    return build_graph(b.trace())


GRAPHS = {
    "agent": lambda: build_graph(parse_lines(list(agent_lines(30)))),
    "parallel": lambda: build_graph(
        sequential_run(
            [
                StepSpec(300 * MS, visible=61, tools=(("a", 1 * S), ("b", 3 * S), ("c", 3 * S))),
                StepSpec(300 * MS, visible=2, tools=(("a", 1 * S),)),
            ]
        ).trace()
    ),
    "changes hands": lambda: side_by_side(("m", "t")),
    "tie": lambda: side_by_side(("t", "m"), tool_s=3),
}
SCENARIOS = [
    Scenario.tier("ultra", SpeedProfile(0.2, 100_000, 750)),
    Scenario.multipliers(4),
    Scenario.multipliers(3, 2),
    Scenario.multipliers(1),
]


def lockstep(g: Graph, dur0: list[int], dur1: list[int]) -> tuple[int, int] | None:
    """The lockstep pass spelled out span by span (the reference for :func:`retime_pair`)."""
    n = len(g)
    SA, SB, EA, EB = [0] * n, [0] * n, [0] * n, [0] * n
    for i in range(n):
        p = g.parent[i]
        sa, sb = (SA[p], SB[p]) if p >= 0 else (0, 0)
        for a in g.after[i]:
            ea, eb = EA[a], EB[a]
            if (ea > sa and eb < sb) or (ea < sa and eb > sb):
                return None
            sa, sb = max(sa, ea), max(sb, eb)
        SA[i], SB[i] = sa + g.start_gap[i], sb + g.start_gap[i]
        EA[i], EB[i] = SA[i] + dur0[i], SB[i] + dur1[i]
        for q in g.closes.get(i, []):
            ks = g.children[q]
            ma, mb = max(EA[c] for c in ks), max(EB[c] for c in ks)
            if not any(EA[c] == ma and EB[c] == mb for c in ks):
                return None
            EA[q], EB[q] = ma + g.close_gap[q], mb + g.close_gap[q]
    if not g.roots:
        return g.end_ns, g.end_ns
    ma, mb = max(EA[r] for r in g.roots), max(EB[r] for r in g.roots)
    if not any(EA[r] == ma and EB[r] == mb for r in g.roots):
        return None
    return ma + g.run_end_gap, mb + g.run_end_gap


@pytest.mark.parametrize("name", list(GRAPHS))
def test_retime_pair_matches_the_lockstep_reference(name):
    """The split pass pair gives the lockstep pass's verdict and ends, for every prefill speed."""
    g = GRAPHS[name]()
    verdicts = []
    for p in (1, 2, 0.5):
        fast, slow = (durations(g, new_parts(g, Scenario.multipliers(k, p))) for k in (math.inf, 1))
        verdicts.append(retime_pair(g, fast, slow))
        assert verdicts[-1] == lockstep(g, fast, slow)
    if name == "changes hands":
        assert verdicts[0] is None  # the tool ends after the model call only when it is fast


@pytest.mark.parametrize("name", list(GRAPHS))
def test_whatif_breakdown_matches_the_segment_walk(name):
    """Categories and steps read off the linked path equal those of the segment-by-segment walk."""
    g = GRAPHS[name]()
    old_cats, old_steps = path_breakdown(g, critical_path(g, g.t0, g.t1, g.end_ns), None)
    for sc in SCENARIOS:
        parts = new_parts(g, sc)
        S_, E_, end = retime(g, durations(g, parts))
        new_cats, new_steps = path_breakdown(g, critical_path(g, S_, E_, end), parts)
        w = whatif(g, sc)
        assert w.predicted_ns == end - g.start_ns
        assert {c.name: (c.measured_ns, c.predicted_ns) for c in w.categories} == {
            c: (old_cats.get(c, 0), new_cats.get(c, 0)) for c in old_cats.keys() | new_cats.keys()
        }
        assert [(c.measured_ns, c.predicted_ns) for c in w.steps] == [
            (old_steps.get(s, 0), new_steps.get(s, 0))
            for s in sorted(old_steps.keys() | new_steps.keys())
        ]
        assert sum(c.saved_ns for c in w.categories) == w.measured_ns - w.predicted_ns
