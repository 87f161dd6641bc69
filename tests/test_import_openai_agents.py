"""`agentloop import` of an openai-agents run: OpenInference's spans of a real openai-agents agent
(against the simulator) become an agentloop trace that report, whatif and compare read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.trace.reader import load_trace
from tests.conftest import held_drift_s
from tests.test_export_import import agent_spans, as_json, imported_runs, starved_s


def openai_agents_spans(tier: str, out: Path) -> Path:
    """Run the openai-agents agent against ``agentloop sim serve`` on ``tier``; its OTLP JSON."""
    return agent_spans(
        "openai-agents", "OPENAI_AGENTS_VERSION", "openai_agents_agent.py", tier, out
    )


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The agent's spans on sim-standard and sim-ultrafast, imported as agentloop traces."""
    yield imported_runs(tmp_path_factory.mktemp("openai-agents"), openai_agents_spans)


@pytest.mark.external
def test_openinference_spans_become_steps(imported: dict[str, Path]) -> None:
    """Three LLM spans open three steps; the TOOL spans follow their call, tokens come along."""
    trace = load_trace(imported["sim-standard"])
    steps = [
        [c.name for c in sorted(trace.children(s.id), key=lambda c: c.t0)]
        for s in sorted(trace.of_kind("step"), key=lambda s: s.t0)
    ]
    assert [
        ["chat sim-standard", "execute_tool read_runbook"],
        ["chat sim-standard", "execute_tool check_latency", "execute_tool check_latency"],
        ["chat sim-standard"],
    ] == steps
    first = min(trace.of_kind("model"), key=lambda s: s.t0).attrs
    assert (33, 134) == (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"])
    probe = next(s for s in trace.of_kind("tool") if s.attrs["gen_ai.tool.name"] == "check_latency")
    assert "p99" in probe.attrs["output"] and "upstream" in probe.attrs["arguments"]


@pytest.mark.pacing
@pytest.mark.external
def test_whatif_of_the_import_predicts_the_real_ultrafast_run(imported: dict[str, Path]) -> None:
    """The imported standard run's prediction on sim-ultrafast against the agent re-run there."""
    _predicts_the_ultrafast_run(imported, "")


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The team (triage -> latency as a tool, handoff to fixer) on sim-standard and
    sim-ultrafast, imported: one simulator for the triage agent's conversation (the handoff
    continues it), one for the latency agent's."""

    def team_spans(tier: str, out: Path) -> Path:
        return agent_spans(
            "openai-agents",
            "OPENAI_AGENTS_VERSION",
            "openai_agents_team.py",
            tier,
            out,
            scripts=("team_main.yaml", "team_latency.yaml"),
        )

    yield imported_runs(tmp_path_factory.mktemp("openai-agents-team"), team_spans)


def shape(trace, parent: str) -> list:
    """The spans under ``parent`` as (kind, name, [their children's shape]), in start order."""
    kids = sorted((s for s in trace.spans.values() if s.parent == parent), key=lambda s: s.t0)
    return [(s.kind, s.name, shape(trace, s.id)) for s in kids]


@pytest.mark.external
def test_agents_as_tools_and_handoffs_keep_their_nesting(team: dict[str, Path]) -> None:
    """The latency agent (called as the tool ask_latency) is an agent span under that tool, one
    deeper; the fixer (a handoff) is an agent span after the triage agent's last step, at its
    depth; each one's steps carry its name, invocation and depth, as agentloop's own do."""
    trace = load_trace(team["sim-standard"])
    [run] = trace.of_kind("run")
    chat, tool = ("model", "chat sim-standard", []), lambda n: ("tool", f"execute_tool {n}", [])
    latency = [
        ("step", "step 1", [chat, tool("check_latency"), tool("check_latency")]),
        ("step", "step 2", [chat]),
    ]
    fixer = [("step", "step 1", [chat, tool("propose_change")]), ("step", "step 2", [chat])]
    ask = ("tool", "execute_tool ask_latency", [("agent", "invoke_agent latency", latency)])
    assert [
        ("step", "step 1", [chat, tool("read_runbook")]),
        ("step", "step 2", [chat, ask]),
        ("step", "step 3", [chat, tool("handoff to fixer")]),
        ("agent", "invoke_agent fixer", fixer),
    ] == shape(trace, run.id)
    assert "invoke_agent triage" == run.name
    agents = {s.name: s for s in trace.of_kind("agent")}
    sub, took_over = agents["invoke_agent latency"], agents["invoke_agent fixer"]
    assert ("latency", 1, 1) == tuple(sub.start_attrs[k] for k in WHO)
    assert ("fixer", 1, 0) == tuple(took_over.start_attrs[k] for k in WHO)
    assert "triage" == took_over.attrs["agent.handoff_from"]
    last_main_step = max(
        (s for s in trace.of_kind("step") if s.parent == run.id), key=lambda s: s.t0
    )
    assert [last_main_step.id] == took_over.after
    for s in trace.spans.values():
        if s.kind in ("step", "model", "tool"):  # the main agent's carry no name
            owner = next((a for a in agents.values() if _under(trace, s, a.id)), None)
            assert (owner.start_attrs[WHO[0]] if owner else None) == s.start_attrs.get(WHO[0])
    assert {"latency", "fixer"} == {a["name"] for a in trace.header["agents"]}


WHO = ("gen_ai.agent.name", "agent.invocation", "agent.depth")


def _under(trace, s, ancestor: str) -> bool:
    """``s`` is below ``ancestor`` with no other agent span between them."""
    p = s.parent
    while p is not None:
        if p == ancestor:
            return True
        if trace.spans[p].kind == "agent":
            return False
        p = trace.spans[p].parent
    return False


@pytest.mark.external
def test_report_lists_the_teams_agents(team: dict[str, Path]) -> None:
    """report's agents table counts each agent's own model calls: 3 triage (main), 2 each."""
    doc = as_json("report", str(team["sim-standard"]), "--json")
    assert {"main": 3, "latency": 2, "fixer": 2} == {a["agent"]: a["calls"] for a in doc["agents"]}


@pytest.mark.pacing
@pytest.mark.external
def test_whatif_of_the_team_predicts_its_real_ultrafast_run(team: dict[str, Path]) -> None:
    """The imported team's prediction on sim-ultrafast against the team re-run there: the
    sub-agent's calls and the handoff's are re-timed like the main agent's."""
    _predicts_the_ultrafast_run(team, "team: ")


def _predicts_the_ultrafast_run(runs: dict[str, Path], label: str) -> None:
    """The imported sim-standard run's what-if on sim-ultrafast is a real speedup and within 25%
    of the same agent's run on sim-ultrafast (compare's error)."""
    whatif = as_json("whatif", str(runs["sim-standard"]), "--tier", "sim-ultrafast", "--json")
    c = as_json("compare", str(runs["sim-standard"]), str(runs["sim-ultrafast"]), "--json")
    print(
        f"{label}predicted {whatif['speedup']:.2f}x, measured {c['measured_speedup']:.2f}x, "
        f"error {c['error_pct']:+.1f}%"
    )
    assert whatif["speedup"] > 2
    # what a busy machine put between the two runs outside the model calls (the tools' own
    # time, the client's overhead, the framework's gaps), read from the two traces, is allowed
    # on top: -26.8% once under the whole suite's load (a fresh venv's run), -2.6% to -4.2%
    # alone (the share 0.1-0.2%), -10.6% to -11.5% beside six CPU-bound jobs (0.9-2.0%)
    # and how long the ultrafast run's processes (its agent, its simulators) waited for a CPU:
    # a busy machine's share inside its model calls (-30.9% once in CI beside a CPU-bound job,
    # the held share 0.7%: its first category 0.63 s over the prediction)
    held = held_drift_s(*map(_graph, (runs["sim-standard"], runs["sim-ultrafast"])))
    machine = 100 * (held + starved_s(runs["sim-ultrafast"])) / c["b_s"]
    print(f"{label}the machine's share {machine:.1f}%")
    assert abs(c["error_pct"]) < 25 + machine, (c, f"the machine's share {machine:.1f}%")


def _graph(path: Path) -> Any:
    from agentloop.analysis.graph import build_graph

    return build_graph(load_trace(path))
