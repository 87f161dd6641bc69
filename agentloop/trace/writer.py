"""Trace sinks and the pipeline that redacts records and hands them to the sinks, off the loop.

The JSONL sink writes one record per line, flushed as written; the memory sink keeps a list; the
pipeline runs on the trace writer thread (:mod:`agentloop.trace._thread`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from agentloop.log import get_logger
from agentloop.redact import Processor
from agentloop.trace import _thread


class JsonlSink:
    """Writes each record as one JSON line and flushes it at once, so a killed run leaves a
    loadable trace with everything up to the record in flight."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # unbuffered binary file: one write(2) per record, nothing held back in user space
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        os.write(self._fd, orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS) + b"\n")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class MemorySink:
    """Keeps records in a list: for tests and for embedding callers that want them in memory."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def close(self) -> None:
        pass


class Pipeline:
    """Runs processors over each record, then hands it to every sink. A sink that fails is logged
    once and dropped; it never fails the run.

    ``background`` (the default): the processors and sinks run on the process's trace writer
    thread (:mod:`agentloop.trace._thread`), off the event loop that times the streams; the
    record is frozen as it is given, written in order, and :meth:`close` returns once every
    record given before it is written and the sinks are closed. Off: all of it happens in
    :meth:`write` itself (for a caller without an event loop to protect, and the benchmarks of
    the processors' own cost).
    """

    def __init__(
        self,
        sinks: list[Any],
        processors: list[Processor] | None = None,
        *,
        background: bool = True,
    ) -> None:
        self.sinks = list(sinks)
        self.processors = list(processors or [])
        self.background = background
        self._closed = False

    def write(self, record: dict[str, Any]) -> None:
        if self.background:
            _thread.submit(self._write_frozen, _thread.snapshot(record))
        else:
            self._write_now(record)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.background:
            _thread.submit(lambda _: self._close_now(), None)
            _thread.wait_written()
        else:
            self._close_now()

    def _write_frozen(self, item: bytes | dict[str, Any]) -> None:
        self._write_now(_thread.thaw(item))

    def _write_now(self, record: dict[str, Any]) -> None:
        try:
            for proc in self.processors:
                record = proc(record)
        except Exception as exc:  # a record the processors cannot take is dropped, said once
            _log().error("trace processor failed; record dropped", error=str(exc))
            return
        for sink in list(self.sinks):
            try:
                sink.write(record)
            except Exception as exc:  # a broken sink must not end the run
                _log().error(
                    "trace sink failed; dropping it", sink=type(sink).__name__, error=str(exc)
                )
                self.sinks.remove(sink)

    def _close_now(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                _log().error("trace sink failed to close", sink=type(sink).__name__, error=str(exc))


def _log() -> Any:
    return get_logger("agentloop.trace")
