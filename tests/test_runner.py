"""The runner's loop: every way it ends, concurrency of tool calls, dependency edges, bad turns."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

import pytest

from agentloop.clients.scripted import ScriptedClient
from agentloop.config.tasks import Limits, Task
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.loop.ending import RunResult
from agentloop.loop.runner import Runner
from agentloop.sandbox.context import RunContext
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import MemorySink
from agentloop.types import ToolSpec
from tests.conftest import ShellSleepTool, SleepTool, records_to_trace

TIER = Tier("scripted", "sim", "scripted-model", "responses", SpeedProfile(0.1, 1000, 100))


def turn(text: str = "", *calls: tuple[str, str], reasoning: int = 0) -> ScriptTurn:
    return ScriptTurn(
        text=text,
        reasoning_tokens=reasoning,
        tool_calls=tuple(ScriptToolCall(n, a) for n, a in calls),
    )


def make(
    turns: list[ScriptTurn],
    tmp_path: Path,
    tools: dict | None = None,
    delay: float = 0.0,
    **limits: float,
) -> tuple[Runner, MemorySink, ScriptedClient]:
    task = Task(
        name="t",
        prompt="do it",
        system="sys",
        tools=tuple((tools or {}).keys()),
        limits=Limits(**limits),
    )
    sink = MemorySink()
    client = ScriptedClient(turns, delay_s=delay)
    runner = Runner(task, client, tools or {}, TIER, Tracer(sink), RunContext(tmp_path))
    return runner, sink, client


async def test_finish_tool_ends_the_run(tmp_path: Path) -> None:
    """A call to finish ends the run with status ok and its summary as the final text."""
    sleep = SleepTool()
    runner, sink, _ = make(
        [
            turn("look", ("sleep", '{"seconds": 0}')),
            turn("", ("finish", '{"summary": "all fixed"}')),
            turn("never reached"),
        ],
        tmp_path,
        {"sleep": sleep},
    )
    result = await runner.run()
    assert ("ok", 2, "all fixed") == (result.status, result.steps, result.final_text)
    trace = records_to_trace(sink.records)
    assert trace.complete and "ok" == trace.end["status"]


async def test_turn_without_tool_calls_ends_the_run(tmp_path: Path) -> None:
    """A model turn with no tool calls is the end of the task."""
    runner, _, client = make([turn("nothing to do")], tmp_path)
    result = await runner.run()
    assert ("ok", 1, "nothing to do") == (result.status, result.steps, result.final_text)
    assert 1 == len(client.requests)


async def test_step_limit_ends_with_budget(tmp_path: Path) -> None:
    """Hitting max_steps ends the run with status budget and says which limit."""
    turns = [turn("again", ("sleep", '{"seconds": 0}'))] * 5
    runner, sink, _ = make(turns, tmp_path, {"sleep": SleepTool()}, max_steps=3)
    result = await runner.run()
    assert ("budget", 3) == (result.status, result.steps)
    assert "step limit of 3" in result.reason
    assert "budget" == records_to_trace(sink.records).end["status"]


async def test_output_token_limit_ends_with_budget(tmp_path: Path) -> None:
    """Output tokens past the limit (reasoning included) end the run with status budget."""
    turns = [turn("think", ("sleep", '{"seconds": 0}'), reasoning=500)] * 5
    runner, _, _ = make(turns, tmp_path, {"sleep": SleepTool()}, max_output_tokens=1000)
    result = await runner.run()
    assert ("budget", 2) == (result.status, result.steps)
    assert "output-token limit" in result.reason


async def test_wall_time_limit_ends_with_budget(tmp_path: Path) -> None:
    """The wall-time limit interrupts a slow tool and ends the run with status budget."""
    turns = [turn("wait", ("sleep", '{"seconds": 5}'))]
    runner, sink, _ = make(turns, tmp_path, {"sleep": SleepTool()}, timeout_s=0.3)
    result = await runner.run()
    assert "budget" == result.status and "wall-time limit" in result.reason
    assert result.elapsed_s < 2.0
    trace = records_to_trace(sink.records)
    assert [] == trace.in_flight


async def test_cancellation_closes_trace_and_kills_subprocess(tmp_path: Path) -> None:
    """Cancelling the caller's task ends the run as cancelled and kills the tool's subprocess."""
    shell = ShellSleepTool()
    runner, sink, _ = make(
        [turn("run", ("shell_sleep", '{"seconds": 30}'))], tmp_path, {"shell_sleep": shell}
    )
    job = asyncio.create_task(runner.run())
    while not shell.pids:
        await asyncio.sleep(0.01)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    trace = records_to_trace(sink.records)
    assert "cancelled" == trace.end["status"]
    assert {"cancelled"} == {s.status for s in trace.of_kind("tool")}
    with pytest.raises(ProcessLookupError):
        os.kill(shell.pids[0], 0)


async def test_tool_calls_of_one_turn_overlap_in_time(tmp_path: Path) -> None:
    """Three 0.3 s tool calls in one turn run concurrently, not one after another."""
    sleep = SleepTool()
    calls = [("sleep", '{"seconds": 0.3}')] * 3
    runner, sink, _ = make([turn("go", *calls), turn("done")], tmp_path, {"sleep": sleep})
    result = await runner.run()
    assert "ok" == result.status
    starts = [a for a, _ in sleep.intervals]
    ends = [b for _, b in sleep.intervals]
    assert max(starts) < min(ends)  # every call started before any ended
    tools = records_to_trace(sink.records).of_kind("tool")
    assert max(s.t0 for s in tools) < min(s.t1 for s in tools)


async def test_concurrency_is_bounded(tmp_path: Path) -> None:
    """With max_parallel_tools=1 the same calls run one after another."""
    sleep = SleepTool()
    calls = [("sleep", '{"seconds": 0.1}')] * 3
    runner, _, _ = make(
        [turn("go", *calls), turn("done")], tmp_path, {"sleep": sleep}, max_parallel_tools=1
    )
    await runner.run()
    ordered = sorted(sleep.intervals)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ordered))


async def test_after_edges_form_the_dependency_graph(tmp_path: Path) -> None:
    """Tools wait for their model call; the next model call waits for every tool of the step."""
    runner, sink, _ = make(
        [turn("a", ("sleep", '{"seconds": 0}'), ("sleep", '{"seconds": 0}')), turn("b")],
        tmp_path,
        {"sleep": SleepTool()},
    )
    await runner.run()
    trace = records_to_trace(sink.records)
    m1, m2 = sorted(trace.of_kind("model"), key=lambda s: s.t0)
    tools = trace.of_kind("tool")
    assert all([m1.id] == t.after for t in tools)
    assert sorted(t.id for t in tools) == sorted(m2.after)
    s1, s2 = sorted(trace.of_kind("step"), key=lambda s: s.t0)
    assert [s1.id] == s2.after
    run = trace.of_kind("run")[0]
    assert {run.id} == {s1.parent, s2.parent}


async def test_unknown_tool_and_bad_arguments_are_fed_back(tmp_path: Path) -> None:
    """An unknown tool and non-JSON arguments become error results; the loop goes on."""
    runner, sink, client = make(
        [turn("x", ("nope", "{}"), ("sleep", "{not json")), turn("recovered")],
        tmp_path,
        {"sleep": SleepTool()},
    )
    result: RunResult = await runner.run()
    assert ("ok", 2) == (result.status, result.steps)
    fed_back = [m for m in client.requests[1].messages if m.role == "tool"]
    assert "unknown tool 'nope'" in fed_back[0].content
    assert "not valid JSON" in fed_back[1].content
    tools = records_to_trace(sink.records).of_kind("tool")
    assert [False, False] == [t.attrs["ok"] for t in tools]


async def test_broken_arguments_are_replayed_as_json_and_traced_as_written(
    tmp_path: Path,
) -> None:
    """A call with non-JSON arguments goes back to the model as {"invalid_arguments": text}
    (servers parse the history), while the trace keeps the text the model wrote."""
    runner, sink, client = make(
        [turn("x", ("sleep", '{"seconds": 0'), ("sleep", '{"seconds": 0}')), turn("done")],
        tmp_path,
        {"sleep": SleepTool()},
    )
    await runner.run()
    (assistant,) = [m for m in client.requests[1].messages if m.role == "assistant"]
    model = records_to_trace(sink.records).of_kind("model")[0]
    assert ['{"invalid_arguments":"{\\"seconds\\": 0"}', '{"seconds": 0}'] == [
        c.arguments for c in assistant.tool_calls
    ]
    assert ['{"seconds": 0', '{"seconds": 0}'] == [
        c["arguments"] for c in model.attrs["output"]["tool_calls"]
    ]


async def test_model_failure_ends_with_error_and_closed_trace(tmp_path: Path) -> None:
    """A model error (here: the script runs out) ends the run with status error, trace closed."""
    runner, sink, _ = make(
        [turn("a", ("sleep", '{"seconds": 0}'))], tmp_path, {"sleep": SleepTool()}
    )
    result = await runner.run()
    assert "error" == result.status and "no turn 2" in result.reason
    trace = records_to_trace(sink.records)
    assert trace.complete and [] == trace.in_flight


async def test_model_span_records_usage_and_output(tmp_path: Path) -> None:
    """Model spans carry usage and the full output, enough to replay the run."""
    runner, sink, _ = make(
        [turn("hello", ("sleep", '{"seconds": 0}'), reasoning=7), turn("bye")],
        tmp_path,
        {"sleep": SleepTool()},
    )
    await runner.run()
    m1 = sorted(records_to_trace(sink.records).of_kind("model"), key=lambda s: s.t0)[0]
    assert 7 == m1.attrs["gen_ai.usage.reasoning.output_tokens"]
    assert {
        "text": "hello",
        "reasoning_tokens": 7,
        "tool_calls": [{"id": "call_0_0", "name": "sleep", "arguments": '{"seconds": 0}'}],
    } == m1.attrs["output"]


class BrokenTool:
    """A real tool with a bug: it raises instead of returning a result."""

    spec = ToolSpec("broken", "Always raises.", {"type": "object"})

    async def __call__(self, ctx: object, arguments: dict) -> object:
        raise RuntimeError("disk on fire")


async def test_a_raising_tool_becomes_an_error_result(tmp_path: Path) -> None:
    """A tool that raises gives the model an ok=False result; the run goes on."""
    runner, _, client = make(
        [turn("x", ("broken", "{}")), turn("fine")], tmp_path, {"broken": BrokenTool()}
    )
    result = await runner.run()
    assert "ok" == result.status
    fed = [m.content for m in client.requests[1].messages if m.role == "tool"]
    assert ["Error: tool 'broken' failed: RuntimeError: disk on fire"] == fed


async def test_an_internal_error_still_closes_the_trace(tmp_path: Path) -> None:
    """A bug in the loop surfaces as an exception, and the trace still gets its end record."""

    def explode(event: object) -> None:
        raise SystemExit("event sink bug")  # not an Exception: _emit does not swallow it

    runner, sink, _ = make(
        [turn("x", ("sleep", '{"seconds": 0}')), turn("y")], tmp_path, {"sleep": SleepTool()}
    )
    runner.events = explode
    with pytest.raises(SystemExit):
        await runner.run()
    trace = records_to_trace(sink.records)
    assert trace.complete and "error" == trace.end["status"]
    assert "internal error: SystemExit" in trace.end["reason"]
