"""The trace pipeline writes off the event loop, in order, each record as it was given (issue 28)."""

from __future__ import annotations

import threading
from typing import Any

from agentloop.redact import redactor
from agentloop.trace import _thread
from agentloop.trace.reader import load_trace
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import JsonlSink, Pipeline


class ThreadNotingSink:
    """Keeps each record with the thread that wrote it."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, Any], threading.Thread]] = []
        self.closed_on: threading.Thread | None = None

    def write(self, record: dict[str, Any]) -> None:
        self.seen.append((record, threading.current_thread()))

    def close(self) -> None:
        self.closed_on = threading.current_thread()


async def test_records_are_redacted_and_written_off_the_loop_thread_in_order() -> None:
    """Processors and sinks run on the writer thread, never the loop's; order is kept."""
    loop_thread = threading.current_thread()
    ran_on: list[threading.Thread] = []

    def noting(record: dict[str, Any]) -> dict[str, Any]:
        ran_on.append(threading.current_thread())
        return record

    sink = ThreadNotingSink()
    pipe = Pipeline([sink], [noting, redactor(["hunter2-secret"])])
    for i in range(200):
        pipe.write({"type": "span_event", "i": i, "text": f"pw hunter2-secret {i}"})
    pipe.close()
    assert [r["i"] for r, _ in sink.seen] == list(range(200))
    assert {t for _, t in sink.seen} == {_thread.writer_thread()}
    assert loop_thread not in {*ran_on, *(t for _, t in sink.seen), sink.closed_on}
    assert all("hunter2" not in r["text"] for r, _ in sink.seen)


async def test_a_record_changed_after_it_was_written_is_traced_as_given() -> None:
    """The pipeline freezes a record when it is given: a later change does not reach the trace."""
    sink = ThreadNotingSink()
    pipe = Pipeline([sink])
    attrs = {"messages": ["first"]}
    pipe.write({"type": "span_end", "attrs": attrs})
    attrs["messages"].append("later")
    pipe.close()
    assert [{"type": "span_end", "attrs": {"messages": ["first"]}}] == [r for r, _ in sink.seen]


async def test_a_traced_run_through_the_thread_loads_whole_once_closed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A tracer writing through the background pipeline leaves a complete trace at close."""
    path = tmp_path / "t.jsonl"
    pipe = Pipeline([JsonlSink(path)], [redactor([])])
    tracer = Tracer(pipe)
    tracer.header(run_id="r1", task={"name": "t"})
    async with tracer.span("run", "run"):
        for i in range(50):
            async with tracer.span("tool", f"step{i}") as s:
                s.set(output="x" * 10_000)
    tracer.end("ok")
    pipe.close()
    trace = load_trace(path)
    assert 51 == len(trace.spans)
    assert trace.complete


def test_a_failing_processor_drops_its_record_not_the_run() -> None:
    """A processor that raises loses that record only; the next ones are written."""
    sink = ThreadNotingSink()

    def picky(record: dict[str, Any]) -> dict[str, Any]:
        if record.get("bad"):
            raise ValueError("no")
        return record

    pipe = Pipeline([sink], [picky])
    pipe.write({"n": 1})
    pipe.write({"n": 2, "bad": True})
    pipe.write({"n": 3})
    pipe.close()
    assert [1, 3] == [r["n"] for r, _ in sink.seen]
