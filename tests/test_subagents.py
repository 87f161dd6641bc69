"""Sub-agents as tools (issue 23): one trace for the tree, per-call tiers, failure, cancel, bad input.

Every run here is a real run on the embedded simulator (the openai SDK over HTTP), with the
real tools in a real workspace; timing is read from the trace, never from wall clocks.
"""

from __future__ import annotations

import asyncio
import itertools
import textwrap
from pathlib import Path

import pytest

from agentloop.api import open_task, run_task
from agentloop.cli import main
from agentloop.config.routing import CallKey, Routing
from agentloop.errors import ConfigError, TaskFileError, TraceFileError
from agentloop.events import RunEvent
from agentloop.replay import replay
from agentloop.trace import attrs as A
from agentloop.trace.reader import load_trace
from tests.conftest import instant_tiers_file

ROOT = Path(__file__).resolve().parent.parent

# three workers called in one turn: one long (three steps), two short; one worker may fail
FAN_OUT = """
name: fan-out
prompt: Ask the workers.
workspace: work
tools: [read_file, run, long, short-a, short-b]
limits: {max_steps: 20, max_parallel_tools: 4}
agents:
  - name: long
    description: the long worker
    prompt: "Long job: {input}"
    tools: [read_file]
    script:
      - {reasoning_tokens: 60, tool_calls: [{name: read_file, arguments: {path: a.txt}}]}
      - {reasoning_tokens: 60, tool_calls: [{name: read_file, arguments: {path: a.txt}}]}
      - {reasoning_tokens: 40, tool_calls: [{name: finish, arguments: {summary: LONG DONE}}]}
  - name: short-a
    description: a short worker
    tools: [read_file]
    script:
      - {reasoning_tokens: 20, tool_calls: [{name: finish, arguments: {summary: A DONE}}]}
  - name: short-b
    description: a short worker that may run out of steps
    tools: [read_file]
    limits: {max_steps: STEPS_B}
    script:
      - {reasoning_tokens: 20, tool_calls: [{name: read_file, arguments: {path: a.txt}}]}
      - {reasoning_tokens: 20, tool_calls: [{name: finish, arguments: {summary: B DONE}}]}
ROUTING
script:
  - tool_calls:
      - {name: long, arguments: {input: go}}
      - {name: short-a, arguments: {input: go}}
      - {name: short-b, arguments: {input: go}}
  - tool_calls: [{name: finish, arguments: {summary: all asked}}]
"""


def write_task(tmp_path: Path, steps_b: int = 4, routing: str = "", body: str = FAN_OUT) -> Path:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "a.txt").write_text("alpha\n")
    path = tmp_path / "task.yaml"
    path.write_text(body.replace("STEPS_B", str(steps_b)).replace("ROUTING", routing))
    return path


async def test_sub_agents_run_in_parallel_nested_under_their_tool_spans(tmp_path: Path) -> None:
    events: list[RunEvent] = []
    result = await run_task(
        write_task(tmp_path),
        tier="sim-ultrafast",
        trace_dir=tmp_path / "traces",
        events=events.append,
    )
    assert result.status == "ok", result.reason
    trace = load_trace(result.trace_path or "")
    agents = {s.start_attrs[A.GEN_AI_AGENT_NAME]: s for s in trace.of_kind("agent")}
    assert set(agents) == {"long", "short-a", "short-b"}
    for name, span in agents.items():
        assert span.name == f"invoke_agent {name}"
        assert span.start_attrs[A.AGENT_INVOCATION] == 1
        assert span.start_attrs[A.AGENT_DEPTH] == 1
        assert span.start_attrs[A.TIER] == "sim-ultrafast"
        tool = trace.spans[span.parent or ""]
        assert (tool.kind, tool.name) == ("tool", f"execute_tool {name}")
        assert A.GEN_AI_AGENT_NAME not in tool.start_attrs  # the main agent's call
        steps = [s for s in trace.children(span.id) if s.kind == "step"]
        assert steps and all(s.start_attrs[A.GEN_AI_AGENT_NAME] == name for s in steps)
        for prev, nxt in itertools.pairwise(steps):
            assert nxt.after == [prev.id]
        for step in steps:
            for child in trace.children(step.id):
                assert child.kind in ("model", "tool")
                assert child.start_attrs[A.GEN_AI_AGENT_NAME] == name
                assert child.start_attrs[A.AGENT_DEPTH] == 1
    assert len([s for s in trace.children(agents["long"].id) if s.kind == "step"]) == 3
    # the three sub-runs overlap in time (the trace's clock): each starts before the others end
    spans = list(agents.values())
    assert max(s.t0 for s in spans) < min(s.t1 or 0 for s in spans)
    # the main agent's spans carry no agent attrs; its tool results are the answers
    outputs = {t.tool.name: t.tool.output for t in trace.of_kind("tool") if t.tool}
    assert outputs["long"] == "LONG DONE" and outputs["short-b"] == "B DONE"
    header = trace.run
    assert [a.name for a in header.agents] == ["long", "short-a", "short-b"]
    assert [t.name for t in header.all_tiers] == ["sim-ultrafast"]
    # live events of the sub-runs say whose they are
    assert {e.data.get("agent") for e in events if e.kind == "model_end"} == {
        None,
        "long",
        "short-a",
        "short-b",
    }


async def test_routing_puts_each_agent_s_calls_on_its_tier(tmp_path: Path) -> None:
    path = write_task(tmp_path, routing="routing: {long: sim-instant-c}")
    plan = Routing(
        agents={"short-a": "sim-instant-b"}, calls={CallKey("long", 1, 3): "sim-instant"}
    )
    result = await run_task(
        path,
        tier="sim-instant",
        tiers_file=instant_tiers_file(tmp_path),
        trace_dir=tmp_path / "traces",
        routing=plan,
    )
    assert result.status == "ok", result.reason
    trace = load_trace(result.trace_path or "")
    tiers = {t.name for t in trace.run.tiers}
    assert {"sim-instant", "sim-instant-c", "sim-instant-b"} <= tiers
    assert trace.run.tier.name == "sim-instant" == trace.run.tiers[0].name
    assert trace.run.routing is not None and trace.run.routing["agents"]["long"] == "sim-instant-c"
    used = {
        (m.start_attrs.get(A.GEN_AI_AGENT_NAME, "main"), m.start_attrs[A.STEP]): m.attrs[A.TIER]
        for m in trace.of_kind("model")
    }
    assert used[("long", 1)] == used[("long", 2)] == "sim-instant-c"
    assert used[("long", 3)] == "sim-instant"  # the plan's single call wins
    assert used[("short-a", 1)] == "sim-instant-b"
    assert used[("main", 1)] == used[("short-b", 1)] == "sim-instant"


async def test_a_failing_sub_agent_is_an_error_result_and_the_run_goes_on(tmp_path: Path) -> None:
    result = await run_task(
        write_task(tmp_path, steps_b=1),
        tier="sim-instant",
        tiers_file=instant_tiers_file(tmp_path),
        trace_dir=tmp_path / "traces",
    )
    assert result.status == "ok", result.reason
    trace = load_trace(result.trace_path or "")
    calls = {t.tool.name: t.tool for t in trace.of_kind("tool") if t.tool}
    assert not calls["short-b"].ok
    assert "sub-agent 'short-b' did not finish (budget)" in calls["short-b"].output
    assert calls["long"].ok and calls["long"].output == "LONG DONE"
    failed = next(s for s in trace.of_kind("agent") if s.name == "invoke_agent short-b")
    assert failed.status == "error"


SLOW = """
name: slow-tree
prompt: go
tools: [slow]
limits: {max_steps: 5}
agents:
  - name: slow
    description: a worker that sleeps
    tools: [run]
    script:
      - tool_calls: [{name: run, arguments: {command: sleep 60}}]
      - tool_calls: [{name: finish, arguments: {summary: woke}}]
script:
  - tool_calls: [{name: slow, arguments: {input: sleep}}]
  - tool_calls: [{name: finish, arguments: {summary: done}}]
"""


async def test_cancelling_the_run_cancels_its_sub_runs(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(SLOW)
    started = asyncio.Event()

    def sink(event: RunEvent) -> None:
        if event.kind == "tool_start" and event.data.get("agent") == "slow":
            started.set()

    job = asyncio.create_task(
        run_task(
            path,
            tier="sim-instant",
            tiers_file=instant_tiers_file(tmp_path),
            trace_dir=tmp_path / "traces",
            events=sink,
        )
    )
    await asyncio.wait_for(started.wait(), 30)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(job, 30)
    trace = load_trace(next((tmp_path / "traces").glob("*.jsonl")))
    assert (trace.end or {}).get("status") == "cancelled"
    agent = trace.of_kind("agent")[0]
    assert agent.t1 is not None  # the sub-run's spans were closed, not left in flight
    sleeper = next(t for t in trace.of_kind("tool") if t.name == "execute_tool run")
    assert sleeper.t1 is not None and sleeper.t1 - sleeper.t0 < 30e9


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        (
            "agents:\n  - {name: a, description: x, agents: [b]}\n"
            "  - {name: b, description: x, agents: [a]}\n",
            "agents[0].agents",
            "a cycle of agents: a -> b -> a",
        ),
        (
            "limits: {max_agent_depth: 2}\n"
            "agents:\n  - {name: a, description: x, agents: [b]}\n"
            "  - {name: b, description: x, agents: [c]}\n  - {name: c, description: x}\n",
            "agents[2].name",
            "depth 3 (main -> a -> b -> c), past limits.max_agent_depth = 2",
        ),
        ("agents:\n  - {name: run, description: x}\n", "agents[0].name", "taken by a tool"),
        (
            "agents:\n  - {name: a, description: x}\n  - {name: a, description: y}\n",
            "agents[1].name",
            "a second agent named 'a'",
        ),
        ("agents:\n  - {name: a, description: x, tools: [teleport]}\n", "agents[0].tools[0]", ""),
        ("agents:\n  - {name: a, description: x, agents: [zz]}\n", "agents[0].agents[0]", ""),
        ("routing: {ghost: sim-fast}\n", "routing.ghost", "unknown agent 'ghost'"),
    ],
)
def test_bad_agents_name_the_file_line_and_field(
    tmp_path: Path, body: str, field: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("name: t\nprompt: hi\ntools: [a]\n" + body)
    if "name: a" not in body:
        path.write_text("name: t\nprompt: hi\n" + body)
    with pytest.raises(TaskFileError) as info:
        open_task(path)
    assert info.value.field == field and info.value.line is not None
    assert needle in info.value.message
    assert main(["run", str(path)]) == 2
    assert field in capsys.readouterr().err


def test_bad_routing_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_task(tmp_path, routing="routing: {long: sim-nowhere}")
    assert main(["run", str(path), "--trace-dir", str(tmp_path / "t")]) == 2
    assert "field 'agents.long': unknown tier 'sim-nowhere'" in capsys.readouterr().err
    path = write_task(tmp_path)
    assert main(["run", str(path), "--route", "ghost=sim-fast"]) == 2
    assert "unknown agent 'ghost'" in capsys.readouterr().err
    plan = tmp_path / "plan.json"
    plan.write_text('{"agentloop_plan": 1, "task": "other", "agents": {"main": "sim-fast"}}')
    assert main(["run", str(path), "--routing", str(plan)]) == 2
    err = capsys.readouterr().err
    assert str(plan) in err and "field 'task'" in err and "'other'" in err
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("offline", [False, True])
async def test_a_tree_trace_replays(tmp_path: Path, offline: bool) -> None:
    recorded = await run_task(
        write_task(tmp_path),
        tier="sim-instant",
        tiers_file=instant_tiers_file(tmp_path),
        trace_dir=tmp_path,
    )
    res = await replay(
        recorded.trace_path or "",
        offline=offline,
        tier="sim-instant-b",
        tiers_file=tmp_path / "tiers.toml",
        trace_dir=tmp_path / "re",
    )
    assert res.run.status == "ok", res.run.reason
    assert res.divergences == []
    trace = load_trace(res.run.trace_path or "")
    agents = {s.start_attrs[A.GEN_AI_AGENT_NAME] for s in trace.of_kind("agent")}
    assert agents == (set() if offline else {"long", "short-a", "short-b"})
    assert {m.attrs[A.TIER] for m in trace.of_kind("model")} == {"sim-instant-b"}
    outputs = {t.tool.name: t.tool.output for t in trace.of_kind("tool") if t.tool}
    assert outputs["long"] == "LONG DONE"


async def test_a_tree_replay_needs_its_task_file(tmp_path: Path) -> None:
    recorded = await run_task(
        write_task(tmp_path),
        tier="sim-instant",
        tiers_file=instant_tiers_file(tmp_path),
        trace_dir=tmp_path,
    )
    (tmp_path / "task.yaml").unlink()
    with pytest.raises(TraceFileError, match=r"field 'agents'.*task file"):
        await replay(recorded.trace_path or "")


def test_old_traces_read_as_one_agent_on_one_tier() -> None:
    for path in sorted((ROOT / "traces" / "reference").glob("*.jsonl"))[:3]:
        trace = load_trace(path)
        assert trace.run.tiers == () and trace.run.agents == () and trace.run.routing is None
        assert trace.run.all_tiers == (trace.run.tier,)
        assert trace.of_kind("agent") == []


def test_the_fleet_triage_playbook_fans_out_to_services_of_different_sizes() -> None:
    task = open_task("fleet-triage")
    first = task.script[1].tool_calls  # one turn calls every analyst
    analysts = {a.name for a in task.agents}
    assert len(analysts) >= 5 and {c.name for c in first} == analysts
    assert task.limits.max_parallel_tools >= len(analysts)
    sizes = sorted(len(a.script) for a in task.agents)
    assert sizes[-1] >= 3 * sizes[0]  # one long analyst, the rest short
    assert textwrap.dedent(task.success_text or "") == "FLEET OK"


def test_routing_value_rejects_an_unknown_tier_in_the_api(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown tier 'nope'"):
        asyncio.run(
            run_task(
                write_task(tmp_path),
                trace_dir=tmp_path,
                routing=Routing(agents={"long": "nope"}),
            )
        )


async def test_routing_main_moves_the_main_agent_alone(tmp_path: Path) -> None:
    result = await run_task(
        write_task(tmp_path),
        tier="sim-instant",
        tiers_file=instant_tiers_file(tmp_path),
        trace_dir=tmp_path / "traces",
        routing=Routing(agents={"main": "sim-instant-b"}),
    )
    trace = load_trace(result.trace_path or "")
    assert trace.run.tier.name == "sim-instant-b"  # the header's tier is the main agent's
    tiers = {
        m.start_attrs.get(A.GEN_AI_AGENT_NAME, "main"): m.attrs[A.TIER]
        for m in trace.of_kind("model")
    }
    assert tiers == {
        "main": "sim-instant-b",
        "long": "sim-instant",
        "short-a": "sim-instant",
        "short-b": "sim-instant",
    }


async def test_progress_names_the_agent_of_each_sub_run_line(tmp_path: Path) -> None:
    import io

    from agentloop.commands.progress import Progress

    out = io.StringIO()
    result = await run_task(
        write_task(tmp_path),
        tier="sim-instant",
        tiers_file=instant_tiers_file(tmp_path),
        trace_dir=tmp_path,
        events=Progress(out),
    )
    assert result.status == "ok"
    lines = out.getvalue().splitlines()
    assert sum(line.startswith("[long] step") for line in lines) == 3
    assert any(line.strip().startswith("[long] read_file") for line in lines)
    assert sum(line.startswith("step ") for line in lines) == 2  # the main agent's own


async def test_the_run_s_budgets_count_every_agent(tmp_path: Path) -> None:
    """The main agent's output-token limit is the run's: the sub-runs' tokens use it up."""
    body = FAN_OUT.replace(
        "limits: {max_steps: 20, max_parallel_tools: 4}",
        "limits: {max_steps: 20, max_parallel_tools: 4, max_output_tokens: 100}",
    )
    result = await run_task(
        write_task(tmp_path, body=body),
        tier="sim-instant",
        tiers_file=instant_tiers_file(tmp_path),
        trace_dir=tmp_path,
    )
    assert (result.status, result.steps) == ("budget", 2), result.reason
    trace = load_trace(result.trace_path or "")
    main_tokens = sum(
        m.attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS]
        for m in trace.of_kind("model")
        if A.GEN_AI_AGENT_NAME not in m.start_attrs
    )
    assert main_tokens < 100 < result.totals["output_tokens"]
    long = next(t.tool for t in trace.of_kind("tool") if t.tool and t.tool.name == "long")
    assert long is not None and not long.ok and "(budget)" in long.output
