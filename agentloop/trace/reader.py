"""Loads a JSONL trace (complete or cut short by a killed run) and rebuilds its spans."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentloop.errors import TraceFileError
from agentloop.trace.attrs import STEP
from agentloop.trace.schema import (
    EndRecord,
    ModelAttrs,
    RunHeader,
    SpanEnd,
    SpanStart,
    ToolAttrs,
    Where,
    model_attrs,
    parse_header,
    parse_record,
    tool_attrs,
)


@dataclass(slots=True)
class SpanRecord:
    """A span rebuilt from its begin/end records; ``t1`` is None while it was still in flight.

    ``model`` / ``tool``: the typed end attributes of a finished model or tool span
    (:mod:`agentloop.trace.schema`); ``attrs`` keeps them as written.
    """

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
    model: ModelAttrs | None = None
    tool: ToolAttrs | None = None

    @property
    def duration_ns(self) -> int | None:
        return None if self.t1 is None else self.t1 - self.t0

    @property
    def step(self) -> int | None:
        """The step number the span was opened under (start attrs), if any."""
        v = self.start_attrs.get(STEP)
        return v if type(v) is int else None


@dataclass
class Trace:
    """A loaded trace. ``complete`` is False when the end record is missing (the process died).

    ``run`` and ``end_record`` are the typed header and end record; ``header`` and ``end`` the
    same records as written (fields a later agentloop added ride along there).
    """

    path: Path | None
    run: RunHeader
    spans: dict[str, SpanRecord]
    end_record: EndRecord | None
    problems: list[str] = field(default_factory=list)

    @property
    def header(self) -> dict[str, Any]:
        return self.run.raw

    @property
    def end(self) -> dict[str, Any] | None:
        return None if self.end_record is None else self.end_record.raw

    @property
    def complete(self) -> bool:
        return self.end_record is not None

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
        if self.end_record is not None:
            return self.end_record.t
        last = 0
        for s in self.spans.values():
            last = max(last, s.t0, s.t1 or 0)
        return last


def parse_lines(lines: list[bytes], path: object = "<trace>") -> Trace:
    """Rebuild a trace from its raw lines. A last line cut mid-write is dropped with a note;
    any other damage is a :class:`TraceFileError` naming the file, line and field."""
    if not lines or not lines[0].strip():
        raise TraceFileError(f"{path}: empty file, not an agentloop trace")
    try:
        first = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        raise TraceFileError(
            f"{path}, line 1: not JSON; an agentloop trace starts with a run header"
        ) from None
    header = parse_header(first, path)
    spans: dict[str, SpanRecord] = {}
    end: EndRecord | None = None
    end_line = 0
    problems: list[str] = []
    loads = orjson.loads
    last = len(lines)
    where = Where(path, 0)
    for lineno, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        where.line = lineno
        try:
            rec = parse_record(loads(raw), where)
        except orjson.JSONDecodeError:
            if lineno == last:
                problems.append(f"line {lineno}: last record cut short (run was killed mid-write)")
                continue
            raise TraceFileError(f"{path}, line {lineno}: not JSON") from None
        if type(rec) is SpanStart:
            if rec.id in spans:
                where.fail("id", f"span {rec.id} started twice")
            spans[rec.id] = SpanRecord(
                rec.id, rec.parent, rec.kind, rec.name, rec.t, rec.after, start_attrs=rec.attrs
            )
        elif type(rec) is SpanEnd:
            s = spans.get(rec.id)
            if s is None:
                where.fail("id", f"span_end names span {rec.id!r}, which never started")
            if s.t1 is not None:
                where.fail("id", f"span {rec.id} ended twice")
            if rec.t < s.t0:
                where.fail("t", f"span {rec.id} ends at {rec.t} ns, before it started ({s.t0} ns)")
            s.t1, s.status, s.attrs = rec.t, rec.status, rec.attrs
            if s.kind == "model":
                s.model = model_attrs(rec.attrs, where)
            elif s.kind == "tool":
                s.tool = tool_attrs(rec.attrs, s.name, where)
        elif type(rec) is EndRecord:
            end = rec
            end_line = lineno
        else:
            problems.append(f"line {lineno}: unknown record type skipped")
    if end is None:
        problems.append("no end record: the run did not finish (killed or still running)")
    else:
        started = min((s.t0 for s in spans.values() if s.parent is None), default=0)
        if end.t < started:
            where.line = end_line
            where.fail(
                "t", f"the run ends at {end.t} ns, before its run span started ({started} ns)"
            )
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
