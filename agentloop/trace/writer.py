"""Append-only JSONL trace sink: one record per line, flushed to the OS as it is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from agentloop.log import get_logger
from agentloop.redact import Processor


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
    once and dropped; it never fails the run."""

    def __init__(self, sinks: list[Any], processors: list[Processor] | None = None) -> None:
        self.sinks = list(sinks)
        self.processors = list(processors or [])

    def write(self, record: dict[str, Any]) -> None:
        for proc in self.processors:
            record = proc(record)
        for sink in list(self.sinks):
            try:
                sink.write(record)
            except Exception as exc:  # a broken sink must not end the run
                get_logger("agentloop.trace").error(
                    "trace sink failed; dropping it", sink=type(sink).__name__, error=str(exc)
                )
                self.sinks.remove(sink)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                get_logger("agentloop.trace").error(
                    "trace sink failed to close", sink=type(sink).__name__, error=str(exc)
                )
