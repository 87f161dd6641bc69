"""agentloop.testing lets a user test their own tool inside a real run and read its trace."""

from __future__ import annotations

from typing import Any

from agentloop.config.tasks import Task
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.loop.runner import Runner
from agentloop.sandbox.context import RunContext
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.testing import MemorySink, ScriptedClient, run_and_trace, trace_of
from agentloop.trace.tracer import Tracer
from agentloop.types import ToolResult, ToolSpec


class Shout:
    """A user's own tool: upper-cases its text."""

    spec = ToolSpec(
        "shout",
        "Upper-case a text.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    )

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(ok=True, output=str(arguments["text"]).upper())


TURNS = [
    ScriptTurn(tool_calls=(ScriptToolCall("shout", '{"text": "hello"}'),)),
    ScriptTurn(text="said it"),
]


async def test_run_and_trace_gives_the_result_and_the_typed_trace() -> None:
    """A scripted run of a task using the user's tool ends ok, and its trace holds the tool's
    result as the model saw it."""
    task = Task(name="shout-once", prompt="shout hello", system="Be loud.", tools=("shout",))
    result, trace = await run_and_trace(
        task, client=ScriptedClient(TURNS), tools={"shout": Shout()}
    )
    (span,) = trace.of_kind("tool")
    assert ("ok", "said it", "HELLO") == (
        result.status,
        result.final_text,
        span.tool.output if span.tool else None,
    )


async def test_memory_sink_records_read_back_as_a_trace(tmp_path: Any) -> None:
    """A runner writing to a MemorySink gives records that trace_of reads like a file."""
    sink = MemorySink()
    tier = Tier("scripted", "sim", "scripted", "responses", SpeedProfile(0.1, 1000, 100))
    task = Task(name="shout-once", prompt="shout hello", system="Be loud.", tools=("shout",))
    await Runner(
        task, ScriptedClient(TURNS), {"shout": Shout()}, tier, Tracer(sink), RunContext(tmp_path)
    ).run()
    trace = trace_of(sink.records)
    assert (True, 2, "shout-once") == (
        trace.complete,
        len(trace.of_kind("model")),
        trace.run.task.name,
    )
