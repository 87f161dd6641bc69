"""Loads a JSONL trace (complete or cut short by a killed run) and rebuilds its spans."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentloop.errors import TraceFileError
from agentloop.trace.attrs import STEP
from agentloop.trace.fields import MAX_INSTANT_NS, Where
from agentloop.trace.schema import (
    EndRecord,
    RunHeader,
    SpanEnd,
    SpanEvent,
    SpanStart,
    parse_header,
    parse_record,
)
from agentloop.trace.span_attrs import ModelAttrs, ToolAttrs, model_attrs, tool_attrs

_EMPTY: dict[str, Any] = {}  # a start record without attrs; each span gets its own empty dict
NO_END = "no end record: the run did not finish (killed or still running)"  # a trace's note


@dataclass(slots=True)
class SpanRecord:
    """A span rebuilt from its begin/end records; ``t1`` is None while it was still in flight.

    ``model`` / ``tool``: the typed end attributes of a finished model or tool span
    (:mod:`agentloop.trace.span_attrs`); ``attrs`` keeps them as written.
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


# kinds of the root spans that time the run's wall outside the agent (issue 24): the set-up runs
# before the run span and the success check after it, so the what-if's agent time leaves them
# out (with their parts, the spans under them)
OUTSIDE_KINDS = frozenset({"setup", "check"})


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
    events: list[SpanEvent] = field(default_factory=list)  # span_event records, in order
    # root spans of the run's wall time outside the agent's (OUTSIDE_KINDS: the success check),
    # kept out of ``spans`` so the analysis and the what-if see the agent's time only
    outside: dict[str, SpanRecord] = field(default_factory=dict)

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
    any other damage is a :class:`TraceFileError` naming the file, line and field.

    Long on purpose: this is the hot loop over every record of a trace (millions in a suite's
    or a fleet's traces), so the span records' checks and the span bookkeeping are inline, one
    pass with local names and no call per record (a call costs more than the check); anything
    the inline check does not pass goes to :func:`~agentloop.trace.schema.parse_record`, which
    names the field at fault. Split it only with a benchmark beside
    (``tests/benchmarks/``) showing the load time does not grow.
    """
    if not lines or not lines[0].strip():
        raise TraceFileError(f"{path}: empty file, not an agentloop trace")
    try:
        first = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        raise TraceFileError(
            f"{path}, line 1: not JSON; an agentloop trace starts with a run header"
        ) from None
    header = parse_header(first, path)
    # an open span is held as its start's values (a tuple) in its place in start order, and
    # becomes a SpanRecord, built once with every field, when it ends (or after the last line)
    spans: dict[str, Any] = {}
    end: EndRecord | None = None
    end_line = 0
    problems: list[str] = []
    events: list[SpanEvent] = []
    loads, new, limit, is_str = orjson.loads, SpanRecord, MAX_INSTANT_NS, str.__instancecheck__
    last = len(lines)
    where = Where(path, 0)
    for lineno, raw in enumerate(lines[1:], start=2):
        try:
            rec = loads(raw)
        except orjson.JSONDecodeError:
            if not raw.strip():
                continue
            if lineno == last:
                problems.append(f"line {lineno}: last record cut short (run was killed mid-write)")
                continue
            raise TraceFileError(f"{path}, line {lineno}: not JSON") from None
        # the fast path: a span record as the writer writes it passes one combined check;
        # anything else goes to schema.parse_record, which types it the same way or names the
        # field at fault (and types the end record)
        try:
            typ = rec["type"]
            if typ == "span_end":
                sid, t, status, attrs = rec["id"], rec["t"], rec["status"], rec["attrs"]
                fast = (
                    type(sid) is str
                    and type(t) is int
                    and 0 <= t <= limit
                    and type(status) is str
                    and type(attrs) is dict
                )
            elif typ == "span_start":
                sid, t, parent, kind, name, after = (
                    rec["id"],
                    rec["t"],
                    rec["parent"],
                    rec["kind"],
                    rec["name"],
                    rec["after"],
                )
                attrs = rec.get("attrs", _EMPTY)
                fast = (
                    type(sid) is str
                    and sid != ""
                    and type(t) is int
                    and 0 <= t <= limit
                    and (parent is None or type(parent) is str)
                    and type(kind) is str
                    and type(name) is str
                    and type(after) is list
                    and type(attrs) is dict
                    and (
                        not after
                        or (len(after) == 1 and type(after[0]) is str)
                        or all(map(is_str, after))
                    )
                )
            else:
                fast = False
        except (KeyError, TypeError):  # a key missing, or the record is not an object
            fast = False
        if not fast:
            where.line = lineno
            r = parse_record(rec, where)
            if type(r) is SpanEnd:
                typ, (sid, t, status, attrs) = "span_end", r
            elif type(r) is SpanStart:
                typ, (sid, parent, kind, name, t, after, attrs) = "span_start", r
            elif type(r) is EndRecord:
                end, end_line = r, lineno
                continue
            elif type(r) is SpanEvent:
                if r.span not in spans:
                    where.fail("span", f"span_event names span {r.span!r}, which never started")
                events.append(r)
                continue
            else:
                problems.append(f"line {lineno}: unknown record type skipped")
                continue
        if typ == "span_end":
            st = spans.get(sid)
            if type(st) is not tuple:
                where.line = lineno
                if st is None:
                    where.fail("id", f"span_end names span {sid!r}, which never started")
                where.fail("id", f"span {sid} ended twice")
            sid, parent, kind, name, t0, after, start_attrs = st
            if t < t0:
                where.line = lineno
                where.fail("t", f"span {sid} ends at {t} ns, before it started ({t0} ns)")
            if kind == "model":
                where.line = lineno
                model, tool = model_attrs(attrs, where), None
            elif kind == "tool":
                where.line = lineno
                model, tool = None, tool_attrs(attrs, name, where)
            else:
                model = tool = None
            spans[sid] = new(
                sid, parent, kind, name, t0, after, t, status, attrs, start_attrs, model, tool
            )
        else:
            if sid in spans:
                where.line = lineno
                where.fail("id", f"span {sid} started twice")
            spans[sid] = (sid, parent, kind, name, t, after, attrs if attrs is not _EMPTY else {})
    for st in spans.values():  # still in flight at the last line
        if type(st) is tuple:
            sid, parent, kind, name, t0, after, start_attrs = st
            spans[sid] = new(sid, parent, kind, name, t0, after, None, "in_flight", {}, start_attrs)
    outside = {
        sid: sp
        for sid, sp in spans.items()
        if sp.kind in OUTSIDE_KINDS and sp.parent is None and not sp.after
    }
    if outside:
        for sid, sp in spans.items():  # the set-up's parts: spans under an outside span
            if sp.parent in outside:
                outside[sid] = sp
        for sid in outside:
            del spans[sid]
        header = late_header(header, outside, path)
    if end is None:
        problems.append(NO_END)
    else:
        started = min((s.t0 for s in spans.values() if s.parent is None), default=0)
        if end.t < started:
            where.line = end_line
            where.fail(
                "t", f"the run ends at {end.t} ns, before its run span started ({started} ns)"
            )
    events = [e for e in events if e.span not in outside] if outside else events
    return Trace(
        path if isinstance(path, Path) else None, header, spans, end, problems, events, outside
    )


def late_header(header: RunHeader, outside: dict[str, SpanRecord], path: object) -> RunHeader:
    """The header with what the set-up learnt (``workspace``, ``sandbox``, ``mcp_servers``): a
    trace opened before its set-up (issue 24) records them on its setup span, not in line 1.
    The span's ``tools`` (a run with MCP servers: the tools as offered, theirs listed) replace
    line 1's, which were those known before the servers started."""
    raw = header.raw
    late = {
        k: v
        for sp in outside.values()
        if sp.kind == "setup" and sp.parent is None
        for k, v in sp.attrs.items()
        if (k in ("workspace", "sandbox", "mcp_servers") and k not in raw) or k == "tools"
    }
    return parse_header({**raw, **late}, path) if late else header


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
