"""Sub-agents in the analysis: the tree re-times, the critical path runs through the longest."""

from __future__ import annotations

import pytest

from agentloop.analysis.agents import calls
from agentloop.analysis.graph import build_graph, critical_path, retime
from agentloop.analysis.report import build_report
from agentloop.analysis.synthetic import tier_record
from agentloop.analysis.synthetic_runs import fanout_run
from agentloop.analysis.whatif import Scenario, durations, new_parts
from agentloop.config.tiers import SpeedProfile
from agentloop.trace import attrs as A

TIERS = [
    tier_record("std", output_tps=60, prices=(1.25, 0.125, 10.0)),
    tier_record("fast", output_tps=600, prices=(2.5, 0.25, 20.0)),
]


def test_the_sub_agents_overlap_and_the_critical_path_runs_through_the_longest():
    """Five sub-agents of one turn overlap in time; the path passes the longest one's calls only."""
    g = build_graph(fanout_run([4, 1, 2, 1, 1], tiers=TIERS).trace())
    agents = {
        g.spans[i].start_attrs[A.GEN_AI_AGENT_NAME]: (g.t0[i], g.t1[i])
        for i in range(len(g))
        if g.kinds[i] == "agent"
    }
    assert sorted(agents) == ["w0", "w1", "w2", "w3", "w4"]
    latest_start = max(t0 for t0, _ in agents.values())
    assert all(t1 > latest_start for _, t1 in agents.values())  # all open at once
    on_path = {
        g.spans[i].start_attrs.get(A.GEN_AI_AGENT_NAME, "main")
        for i, _, gap in critical_path(g, g.t0, g.t1, g.end_ns)
        if i >= 0 and not gap and g.kinds[i] == "model"
    }
    assert on_path == {"main", "w0"}


def test_a_tool_span_holding_a_sub_agent_ends_when_its_sub_run_does():
    """Halving the long sub-run's model durations moves its tool span's end (and the run's),
    keeping the recorded gap; the short sub-runs' tools stay as they were."""
    g = build_graph(fanout_run([4, 1], tiers=TIERS).trace())
    dur = g.durations()
    long_calls = [c.span for c in calls(g) if c.key.agent == "w0"]
    for i in long_calls:
        dur[i] //= 2
    S, E, end = retime(g, dur)
    tool = {
        g.names[i].removeprefix("execute_tool "): i
        for i in range(len(g))
        if g.kinds[i] == "tool" and i in g.children
    }
    agent_of = {g.parent[i]: i for i in range(len(g)) if g.kinds[i] == "agent"}
    w0, w1 = tool["w0"], tool["w1"]
    saved = sum(g.recorded_dur[i] - dur[i] for i in long_calls)
    assert E[w0] == g.t1[w0] - saved
    assert E[w0] - E[agent_of[w0]] == g.t1[w0] - g.t1[agent_of[w0]]
    assert (S[w1], E[w1]) == (g.t0[w1], g.t1[w1])
    assert end == g.end_ns - saved


def test_calls_know_their_agent_invocation_step_and_tier():
    """Every model call is keyed by (agent, invocation, step) and names the tier it used."""
    g = build_graph(fanout_run([2, 1], rounds=2, tiers=TIERS, sub_tier="fast").trace())
    keys = {(c.key.agent, c.key.invocation, c.key.step): (c.tier, c.depth) for c in calls(g)}
    assert keys[("main", 1, 1)] == ("std", 0)
    assert keys[("main", 1, 3)] == ("std", 0)
    assert keys[("w0", 2, 3)] == ("fast", 1)
    assert keys[("w1", 2, 2)] == ("fast", 1)
    assert len(keys) == len(g.models) == 3 + 2 * (3 + 2)


def test_sub_run_steps_are_labelled_by_their_agent():
    """The report's step rows name a sub-run's steps agent#invocation:step, the lead's by number."""
    r = build_report(build_graph(fanout_run([2, 1], tiers=TIERS).trace()))
    labels = [s.step for s in r.steps]  # in start order: the two sub-runs interleave
    assert (labels[0], labels[-1]) == ("1", "2")
    assert sorted(labels[1:-1]) == ["w0#1:1", "w0#1:2", "w0#1:3", "w1#1:1", "w1#1:2"]


def test_an_old_single_tier_trace_keys_every_call_as_the_main_agent():
    """A trace without agent attributes or a tier list: every call is main's, on header.tier."""
    from agentloop.analysis.synthetic_runs import StepSpec, sequential_run

    g = build_graph(sequential_run([StepSpec(10**8), StepSpec(10**8)]).trace())
    assert [(c.key.agent, c.key.invocation, c.key.step, c.tier) for c in calls(g)] == [
        ("main", 1, 1, "sim-standard"),
        ("main", 1, 2, "sim-standard"),
    ]


def test_the_fast_tier_what_if_of_a_fan_out_re_times_every_sub_run():
    """On a 10x faster tier every sub-run's calls shrink and the run ends sooner."""
    g = build_graph(fanout_run([3, 1, 1], tiers=TIERS).trace())
    sc = Scenario.tier("fast", SpeedProfile(0.3, 20000, 600))
    end = retime(g, durations(g, new_parts(g, sc)))[2]
    assert end < g.end_ns


def test_report_json_lists_time_calls_and_cost_per_tier_and_agent(tmp_path):
    """A run whose lead used one tier and sub-agents another: `report --json` lists both tiers
    (calls, cost at each tier's prices, summing to the run's cost) and every agent."""
    import json
    import subprocess
    import sys

    trace = fanout_run([2, 1], tiers=TIERS, sub_tier="fast").write(tmp_path / "run.jsonl")
    out = subprocess.run(
        [sys.executable, "-m", "agentloop", "report", str(trace), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    doc = json.loads(out)
    tiers = {t["tier"]: t for t in doc["tiers"]}
    assert {n: t["calls"] for n, t in tiers.items()} == {"std": 2, "fast": 5}
    # 1000 input tokens per call; fast's prices are twice std's
    assert tiers["std"]["cost_usd"] == pytest.approx(2 * 1000 * 1.25e-6 + (30 + 60) * 10e-6)
    assert sum(t["cost_usd"] for t in tiers.values()) == pytest.approx(doc["cost"]["total_usd"])
    assert {a["agent"]: a["calls"] for a in doc["agents"]} == {"main": 2, "w0": 3, "w1": 2}


def test_the_waterfall_colours_each_model_bar_by_its_tier():
    """With two tiers every model bar has a strip naming its tier, and the key lists both; a
    one-tier run draws none."""
    import re

    from agentloop.export._layout import layout
    from agentloop.export._waterfall import waterfall

    svg = waterfall(layout(fanout_run([2, 1], tiers=TIERS, sub_tier="fast").trace()))
    tiers = re.findall(r'class="tier" data-tier="([^"]+)"', svg)
    assert sorted(tiers) == ["fast"] * 5 + ["std"] * 2
    assert "tier std</text>" in svg and "tier fast</text>" in svg
    assert 'class="tier"' not in waterfall(layout(fanout_run([2, 1]).trace()))


@pytest.mark.parametrize("sub_tier", [None, "fast"])
def test_cost_by_step_keeps_each_agents_steps_apart(sub_tier):
    """The cost by step names each sub-run's steps as the steps table does (w0#1:2), so the
    main agent's steps sum to its own cost and each sub-agent's to its, on one tier or two."""
    from agentloop.analysis.agents import usage
    from agentloop.analysis.cost import of_trace, render

    trace = fanout_run([3, 1], tiers=TIERS, sub_tier=sub_tier).trace()
    by_step = of_trace(trace).by_step
    assert ["1", "2", "w0#1:1", "w0#1:2", "w0#1:3", "w0#1:4", "w1#1:1", "w1#1:2"] == list(by_step)
    per_agent = {r["agent"]: r["cost_usd"] for r in usage(build_graph(trace), "agent")}

    def agent(label: str) -> str:
        return "main" if label.isdigit() else label.rpartition("#")[0]

    for name, cost in per_agent.items():
        mine = sum(v for k, v in by_step.items() if agent(k) == name)
        assert cost == pytest.approx(mine, rel=1e-12), name
    lines = render(of_trace(trace)).splitlines()
    assert lines[2].startswith("  by step:     1: $") and lines[3].startswith(
        "  by step of w0#1: 1:"
    )


def test_the_html_report_counts_the_lead_s_steps_and_the_sub_runs_apart(tmp_path):
    """A fan-out's page says "2 steps (+6 in sub-agents)", as the trace's end counts the lead's
    steps, not 8 steps."""
    from agentloop.cli import main

    trace = fanout_run([3, 1], tiers=TIERS).write(tmp_path / "run.jsonl")
    assert 0 == main(["report", str(trace), "--html", str(tmp_path / "r.html")])
    page = (tmp_path / "r.html").read_text()
    assert "status ok, 2 steps (+6 in sub-agents)." in page


def test_the_text_report_counts_the_lead_s_steps_and_the_sub_runs_apart():
    """The text report's headline counts as the HTML page does: "2 steps (+6 in sub-agents)"."""
    from agentloop.analysis.report import build_report
    from agentloop.analysis.report_text import render_report

    text = render_report(build_report(build_graph(fanout_run([3, 1], tiers=TIERS).trace())))
    assert "status ok, 2 steps (+6 in sub-agents)" in text.splitlines()[0]
