"""How a run ends, as the trace records it: failed calls keep their attempts, the end record is
always written, tool queue time is its own category."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentloop.analysis.graph import build_graph
from agentloop.analysis.report import build_report
from agentloop.clients.openai_client import OpenAIClient
from agentloop.clients.scripted import ScriptedClient
from agentloop.config.tasks import Limits, Task
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.loop.runner import Runner
from agentloop.sandbox.context import RunContext
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import Fault, SimServer
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import MemorySink
from tests.conftest import SleepTool, records_to_trace

PROFILE = SpeedProfile(base_latency_s=0.02, prefill_tps=0, output_tps=400)
TIER = Tier("flaky", "sim", "sim-test", "responses", PROFILE)


def runner_for(
    client: Any,
    tmp_path: Path,
    tools: dict[str, Any] | None = None,
    check: Any = None,
    **limits: Any,
) -> tuple[Runner, MemorySink]:
    task = Task(
        name="t",
        prompt="do it",
        system="sys",
        tools=tuple((tools or {}).keys()),
        limits=Limits(**limits),
    )
    sink = MemorySink()
    return Runner(
        task, client, tools or {}, TIER, Tracer(sink), RunContext(tmp_path), check=check
    ), sink


async def test_a_call_failing_for_good_keeps_its_attempts_and_books_waits(tmp_path: Path) -> None:
    """Against a server answering 503 to everything, the model span keeps all three attempts and
    the back-off between them is booked as wait, not as retry service time."""
    async with SimServer(profile=PROFILE, faults=[Fault("503", every=True)]) as sim:
        client = OpenAIClient(TIER, base_url=sim.base_url, max_attempts=3, backoff_initial_s=0.1)
        try:
            runner, sink = runner_for(client, tmp_path)
            result = await runner.run()
        finally:
            await client.aclose()
    trace = records_to_trace(sink.records)
    (model,) = trace.of_kind("model")
    assert ("error", "error") == (result.status, model.status)
    attempts = model.attrs.get("attempts", [])
    assert [503, 503, 503] == [a["status"] for a in attempts]
    waits = [a["wait_ns"] for a in attempts]
    assert all(w > 50_000_000 for w in waits[:2])
    graph = build_graph(trace)
    assert sum(waits) == graph.models[graph.ids.index(model.id)].wait


async def test_a_raising_success_check_still_writes_the_end_record(tmp_path: Path) -> None:
    """A success check that raises makes the check fail; the end record is still written."""

    async def broken_check(final_text: str) -> dict[str, Any]:
        raise RuntimeError("check exploded")

    runner, sink = runner_for(
        ScriptedClient([ScriptTurn(text="done")]), tmp_path, check=broken_check
    )
    result = await runner.run()
    trace = records_to_trace(sink.records)
    assert trace.complete
    assert ("ok", False) == (trace.end["status"] if trace.end else None, result.success)
    assert "check exploded" in result.success_detail


async def test_a_cancelled_success_check_still_writes_the_end_record(tmp_path: Path) -> None:
    """Cancelling the run while its success check runs ends the trace with status cancelled."""
    checking = asyncio.Event()

    async def slow_check(final_text: str) -> dict[str, Any]:
        checking.set()
        await asyncio.Event().wait()  # never returns: only cancellation ends it
        return {}

    runner, sink = runner_for(ScriptedClient([ScriptTurn(text="done")]), tmp_path, check=slow_check)
    task = asyncio.create_task(runner.run())
    await checking.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    trace = records_to_trace(sink.records)
    assert "cancelled" == (trace.end["status"] if trace.end else None)


async def test_tool_queue_time_is_its_own_category(tmp_path: Path) -> None:
    """Two tools under max_parallel_tools=1: the second one's wait for the bound is booked as
    tool queue time on the critical path, not as framework time."""
    turns = [
        ScriptTurn(
            tool_calls=(
                ScriptToolCall("sleep", '{"seconds": 0.3}'),
                ScriptToolCall("sleep", '{"seconds": 0.3}'),
            )
        ),
        ScriptTurn(text="done"),
    ]
    runner, sink = runner_for(
        ScriptedClient(turns), tmp_path, {"sleep": SleepTool()}, max_parallel_tools=1
    )
    await runner.run()
    trace = records_to_trace(sink.records)
    first, second = sorted(trace.of_kind("tool"), key=lambda s: s.t0)
    report = build_report(build_graph(trace))
    # the second call waited for the bound the whole time the first one ran, and that wait is
    # its start gap on the critical path
    assert second.tool is not None and first.t1 is not None
    assert second.t0 >= first.t1
    assert second.tool.queued_ns == report.critical.get("tool_queue")
    assert report.critical["framework"] < report.critical["tool_queue"]
