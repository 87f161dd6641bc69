"""The run handle: events in order with ids, live token progress, cancel with a result, history."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import agentloop
from agentloop.trace.reader import load_trace
from tests.conftest import instant_tier

TWO_STEPS = """\
name: handle-demo
prompt: Look around, then finish.
tools: [list_files, think]
script:
  - text: Looking.
    tool_calls:
      - {name: list_files, arguments: {}}
      - {name: think, arguments: {thought: nothing to do}}
  - text: Done.
    tool_calls:
      - {name: finish, arguments: {summary: looked around}}
"""

SLOW_TOOL = """\
name: handle-cancel
prompt: Wait a long time.
tools: [run]
script:
  - tool_calls:
      - {name: run, arguments: {command: "sleep 30"}}
  - text: never reached
"""

# one visible turn of ~200 tokens: about 3.4 s at sim-standard's 60 tok/s
LONG_TURN = f"""\
name: handle-progress
prompt: Say a lot.
script:
  - text: "{("word " * 200).strip()}"
"""


def _task(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    return path


async def test_events_arrive_in_order_with_run_step_and_span_ids(tmp_path: Path) -> None:
    """A two-step run emits start/end of run, steps, model calls and tools in order, with ids."""
    handle = await agentloop.start_run(
        _task(tmp_path, TWO_STEPS), tier=instant_tier(), trace_dir=tmp_path / "traces"
    )
    seen = [e async for e in handle.events()]
    result = await handle
    kinds = [e.kind for e in seen if e.kind != "model_progress"]
    assert [
        "run_start",
        "step_start",
        "model_start",
        "model_end",
        "tool",
        "tool",
        "tool",
        "tool",
        "step_end",
        "step_start",
        "model_start",
        "model_end",
        "tool",
        "tool",
        "step_end",
        "run_end",
    ] == ["tool" if k.startswith("tool_") else k for k in kinds]
    tools = [(e.kind, e.span_id) for e in seen if e.kind.startswith("tool_")]
    assert all(
        tools.index(("tool_start", sid)) < tools.index(("tool_end", sid)) for _, sid in tools
    )
    assert {handle.run_id} == {e.run_id for e in seen}
    assert "ok" == result.status and str(handle.trace_path) == result.trace_path
    trace = load_trace(handle.trace_path)
    kind_of = {s.id: s.kind for s in trace.spans.values()}
    expected_kind = {
        "run_start": "run",
        "step_start": "step",
        "step_end": "step",
        "model_start": "model",
        "model_end": "model",
        "tool_start": "tool",
        "tool_end": "tool",
    }
    assert all(expected_kind[e.kind] == kind_of[e.span_id] for e in seen if e.kind in expected_kind)
    assert [None, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, None] == [
        e.step for e in seen if e.kind != "model_progress"
    ]
    assert sorted(e.t_s for e in seen) == [e.t_s for e in seen]
    assert "ok" == seen[-1].data["status"] and 2 == seen[-1].data["steps"]


async def test_a_late_subscriber_gets_the_whole_history(tmp_path: Path) -> None:
    """Subscribing after the run ended replays every event, the same as a live subscriber saw."""
    live: list[agentloop.RunEvent] = []
    handle = await agentloop.start_run(
        _task(tmp_path, TWO_STEPS), tier=instant_tier(), trace_dir=tmp_path, events=live.append
    )
    await handle
    assert live == [e async for e in handle.events()]


async def test_cancel_gives_a_cancelled_result_with_its_trace(tmp_path: Path) -> None:
    """cancel() during a tool ends the run: a cancelled RunResult (no exception), trace closed."""
    handle = await agentloop.start_run(
        _task(tmp_path, SLOW_TOOL), tier=instant_tier(), trace_dir=tmp_path
    )
    async for event in handle.events():
        if event.kind == "tool_start":
            handle.cancel()
    result = await handle
    assert ("cancelled", handle.run_id) == (result.status, result.run_id)
    assert str(handle.trace_path) == result.trace_path
    trace = load_trace(result.trace_path)
    assert trace.complete and "cancelled" == trace.end["status"]
    assert 1 == result.steps


@pytest.mark.slow
async def test_a_long_model_call_streams_token_progress(tmp_path: Path) -> None:
    """During a ~3 s streamed call, model_progress events report growing token counts and time."""
    handle = await agentloop.start_run(
        _task(tmp_path, LONG_TURN), tier="sim-standard", trace_dir=tmp_path
    )
    seen = [e async for e in handle.events()]
    await handle
    model_end = next(i for i, e in enumerate(seen) if e.kind == "model_end")
    progress = [e for e in seen[:model_end] if e.kind == "model_progress"]
    tokens = [e.data["output_tokens"] for e in progress]
    elapsed = [e.data["elapsed_s"] for e in progress]
    assert len(progress) >= 8  # every 0.25 s over ~3.4 s
    assert sorted(tokens) == tokens and sorted(elapsed) == elapsed
    assert 0 < tokens[len(tokens) // 2] < 200
    assert seen[model_end].span_id == progress[0].span_id


async def test_the_observer_callback_sees_the_same_events(tmp_path: Path) -> None:
    """run_task's observer(kind, data) is fed from the same event stream, with span ids."""
    calls: list[tuple[str, dict[str, Any]]] = []
    result = await agentloop.run_task(
        _task(tmp_path, TWO_STEPS),
        tier=instant_tier(),
        trace_dir=tmp_path,
        observer=lambda k, d: calls.append((k, d)),
    )
    assert "ok" == result.status
    ends = [d for k, d in calls if k == "tool_end"]
    assert [("finish", 2), ("list_files", 1), ("think", 1)] == sorted(
        (d["name"], d["step"]) for d in ends
    )
    assert all(d["span_id"] for d in ends)
    assert "run_end" == calls[-1][0]


async def test_start_run_refuses_a_zero_step_limit(tmp_path: Path) -> None:
    """Bad limits are refused when the run is started, not silently replaced by the task's."""
    try:
        await agentloop.start_run(_task(tmp_path, TWO_STEPS), max_steps=0)
    except agentloop.ConfigError as exc:
        message = exc.message
    assert "max_steps must be at least 1 (got 0)" == message


@pytest.mark.slow
async def test_a_subscriber_that_gives_up_does_not_break_the_others(tmp_path: Path) -> None:
    """Cancelling one subscriber mid-wait leaves the live one and a later one whole."""
    handle = await agentloop.start_run(
        _task(tmp_path, LONG_TURN), tier="sim-standard", trace_dir=tmp_path
    )

    async def until(kind: str) -> None:
        async for event in handle.events():
            if event.kind == kind:
                return

    live = asyncio.create_task(until("run_end"))
    quitter = asyncio.create_task(until("run_end"))
    await until("model_progress")
    await asyncio.sleep(0.1)  # both wait for the next event now (progress comes every 0.25 s)
    quitter.cancel()
    await asyncio.wait([quitter])
    late = [e.kind async for e in handle.events()]
    await live
    assert (True, "run_end") == (quitter.cancelled(), late[-1])
    assert "ok" == (await handle).status


class _AllKinds:
    """A sink that says it takes only some kinds, and records whatever it is given."""

    def __init__(self, kinds: set[str]) -> None:
        self.kinds = frozenset(kinds)
        self.seen: list[str] = []

    def __call__(self, event: agentloop.RunEvent) -> None:
        self.seen.append(event.kind)


@pytest.mark.slow
async def test_a_sink_that_takes_no_progress_costs_no_progress_ticker(tmp_path: Path) -> None:
    """An ``Only`` sink without model_progress (the suite's) is never given one, and the run
    makes none (no ticker per call): a sink that names its kinds but records all sees none;
    beside it, a sink taking every kind sees progress from the same kind of ~3 s call."""
    from agentloop.events import Only, fan_out

    ends: list[str] = []
    narrow = _AllKinds({"model_end", "run_end"})
    wide: list[str] = []
    task = _task(tmp_path, LONG_TURN)
    await asyncio.gather(  # the two ~3 s calls at once: each run has its own sinks
        agentloop.run_task(
            task,
            tier="sim-standard",
            trace_dir=tmp_path,
            events=fan_out(narrow, Only({"model_end"}, lambda e: ends.append(e.kind))),
        ),
        agentloop.run_task(
            task,
            tier="sim-standard",
            trace_dir=tmp_path,
            events=fan_out(_AllKinds({"model_end", "run_end"}), lambda e: wide.append(e.kind)),
        ),
    )
    assert "model_progress" not in narrow.seen and "model_end" in narrow.seen
    assert ends == ["model_end"]
    assert wide.count("model_progress") >= 8
