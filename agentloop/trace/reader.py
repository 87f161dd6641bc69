"""Loads a JSONL trace (complete or cut short by a killed run) and rebuilds its spans."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentloop.errors import TraceFileError
from agentloop.trace.tracer import SCHEMA_VERSION


@dataclass(slots=True)
class SpanRecord:
    """A span rebuilt from its begin/end records; ``t1`` is None while it was still in flight."""

    id: str
    parent: str | None
    kind: str
    name: str
    t0: int
    after: list[str]
    t1: int | None = None
    status: str = "in_flight"
    attrs: dict[str, Any] = field(default_factory=dict)
    start_attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int | None:
        return None if self.t1 is None else self.t1 - self.t0


@dataclass
class Trace:
    """A loaded trace. ``complete`` is False when the end record is missing (the process died)."""

    path: Path | None
    header: dict[str, Any]
    spans: dict[str, SpanRecord]
    end: dict[str, Any] | None
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.end is not None

    @property
    def in_flight(self) -> list[SpanRecord]:
        return [s for s in self.spans.values() if s.t1 is None]

    def of_kind(self, kind: str) -> list[SpanRecord]:
        return [s for s in self.spans.values() if s.kind == kind]

    def children(self, span_id: str) -> list[SpanRecord]:
        return [s for s in self.spans.values() if s.parent == span_id]

    @property
    def end_ns(self) -> int:
        """The run's end instant: the end record's, else the last instant seen in any record."""
        if self.end is not None:
            return int(self.end["t"])
        last = 0
        for s in self.spans.values():
            last = max(last, s.t0, s.t1 or 0)
        return last


def _fail(path: object, lineno: int, msg: str) -> TraceFileError:
    return TraceFileError(f"{path}, line {lineno}: {msg}")


def parse_lines(lines: list[bytes], path: object = "<trace>") -> Trace:
    """Rebuild a trace from its raw lines. A last line cut mid-write is dropped with a note."""
    if not lines or not lines[0].strip():
        raise TraceFileError(f"{path}: empty file, not an agentloop trace")
    try:
        header = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        raise _fail(path, 1, "not JSON; an agentloop trace starts with a run header") from None
    if not isinstance(header, dict) or header.get("type") != "run":
        raise _fail(path, 1, "missing the run header (field 'type' must be \"run\")")
    if header.get("schema") != SCHEMA_VERSION:
        raise _fail(path, 1, f"field 'schema' is {header.get('schema')!r}; this agentloop "
                             f"reads schema {SCHEMA_VERSION}")
    spans: dict[str, SpanRecord] = {}
    end: dict[str, Any] | None = None
    problems: list[str] = []
    loads = orjson.loads
    last = len(lines)
    for lineno, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        try:
            rec = loads(raw)
            typ = rec["type"]
            if typ == "span_start":
                spans[rec["id"]] = SpanRecord(rec["id"], rec.get("parent"), rec["kind"],
                                              rec["name"], rec["t"], rec.get("after") or [],
                                              start_attrs=rec.get("attrs") or {})
            elif typ == "span_end":
                s = spans[rec["id"]]
                s.t1 = rec["t"]
                s.status = rec.get("status", "ok")
                s.attrs = rec.get("attrs") or {}
            elif typ == "end":
                end = rec
            else:
                problems.append(f"line {lineno}: unknown record type {typ!r} skipped")
        except orjson.JSONDecodeError:
            if lineno == last:
                problems.append(f"line {lineno}: last record cut short (run was killed mid-write)")
                continue
            raise _fail(path, lineno, "not JSON") from None
        except KeyError as exc:
            raise _fail(path, lineno, f"record lacks field {exc.args[0]!r} or names an "
                                      f"unknown span") from None
        except TypeError:
            raise _fail(path, lineno, "record is not a JSON object with the expected fields") from None
    if end is None:
        problems.append("no end record: the run did not finish (killed or still running)")
    return Trace(path if isinstance(path, Path) else None, header, spans, end, problems)


def load_trace(path: str | Path) -> Trace:
    """Read and rebuild a trace file; a non-trace gets a TraceFileError naming file and line."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TraceFileError(f"{p}: cannot read: {exc.strerror}") from None
    # Rebuilding allocates millions of objects and no cycles: with the cyclic collector running,
    # each automatic collection rescans everything loaded so far (3x slower at a million spans).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parse_lines(data.splitlines(), p)
    finally:
        if collecting:
            gc.enable()
