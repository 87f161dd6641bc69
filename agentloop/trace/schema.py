"""The trace file's record types, parsed once at load into typed values (schema 1).

A trace is JSONL: a :class:`RunHeader`, then :class:`SpanStart` / :class:`SpanEnd` records (and
:class:`SpanEvent`: a named instant inside a span, written when it happens), and a last
:class:`EndRecord`; :data:`Record` is their union, discriminated by the ``type`` field (``run``,
``span_start``, ``span_end``, ``span_event``, ``end``). A reader that predates ``span_event``
skips those lines with a note, and traces without them load as before. The end attributes of
model and tool spans have their own typed views, :class:`~agentloop.trace.span_attrs.ModelAttrs`
and :class:`~agentloop.trace.span_attrs.ToolAttrs` (:mod:`agentloop.trace.span_attrs`); attribute
names come from :mod:`agentloop.trace.attrs`. Every field is checked where it is parsed, with the
checks of :mod:`agentloop.trace.fields`.

For the same reason the checks are plain functions (a trace can hold millions of span records),
the per-span types are NamedTuples, built with ``tuple.__new__`` on the fast paths (their
generated ``__new__`` and a frozen dataclass's ``__init__`` cost several times more per
instance); the header and the end record, one each, are frozen dataclasses. The union is
discriminated by class (``isinstance``), each class standing for one value of the ``type`` field.

``SCHEMA_VERSION`` is what the writer writes; ``READABLE_SCHEMAS`` what this reader accepts.
Records are built as dicts for the sinks by :func:`header_record`, :func:`start_record`,
:func:`end_span_record` and :func:`end_record`, so their shape is written down once; the header's
and the end record's fields are typed (:class:`~agentloop.trace.header.HeaderFields`,
:class:`EndFields`), so a writer cannot drop or misname one. The header lives in
:mod:`agentloop.trace.header` (as written) and :mod:`agentloop.trace.run_header` (as read), and
is re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, TypedDict, Unpack

from agentloop.trace.fields import Where, instant, int_, json_kind, obj, str_
from agentloop.trace.header import READABLE_SCHEMAS, SCHEMA_VERSION, HeaderFields, header_record
from agentloop.trace.run_header import (
    LimitsInfo,
    Profile,
    RunHeader,
    SandboxInfo,
    TaskInfo,
    TierInfo,
    ToolInfo,
    parse_header,
)

__all__ = [
    "READABLE_SCHEMAS",
    "SCHEMA_VERSION",
    "EndFields",
    "EndRecord",
    "HeaderFields",
    "LimitsInfo",
    "Profile",
    "Record",
    "RunHeader",
    "SandboxInfo",
    "SpanEnd",
    "SpanEvent",
    "SpanStart",
    "TaskInfo",
    "TierInfo",
    "ToolInfo",
    "end_record",
    "end_span_record",
    "event_record",
    "header_record",
    "parse_header",
    "parse_record",
    "start_record",
]


# -- span records --------------------------------------------------------------------------


class SpanStart(NamedTuple):
    """A span opens (``type: "span_start"``)."""

    id: str
    parent: str | None
    kind: str
    name: str
    t: int
    after: list[str]
    attrs: dict[str, Any]


class SpanEnd(NamedTuple):
    """A span closes (``type: "span_end"``)."""

    id: str
    t: int
    status: str
    attrs: dict[str, Any]


class SpanEvent(NamedTuple):
    """A named instant inside a span (``type: "span_event"``), e.g. a context trim; ``attrs``
    by event name in :mod:`agentloop.trace.attrs` (``EVENT_*``)."""

    span: str
    t: int
    name: str
    attrs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EndRecord:
    """The last line: how the run ended. ``raw`` keeps every field as written."""

    type: ClassVar[Literal["end"]] = "end"
    status: str
    t: int
    reason: str
    steps: int
    totals: dict[str, Any]
    success: dict[str, Any] | None
    raw: dict[str, Any]


Record = RunHeader | SpanStart | SpanEnd | SpanEvent | EndRecord


def start_record(
    span_id: str,
    parent: str | None,
    kind: str,
    name: str,
    t: int,
    after: list[str] | tuple[str, ...],
    attrs: Mapping[str, Any],
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "type": "span_start",
        "id": span_id,
        "parent": parent,
        "kind": kind,
        "name": name,
        "t": t,
        "after": list(after),
    }
    if attrs:
        rec["attrs"] = dict(attrs)
    return rec


def end_span_record(span_id: str, t: int, status: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "span_end", "id": span_id, "t": t, "status": status, "attrs": attrs}


class EndFields(TypedDict):
    """What a writer gives :func:`end_record` besides the status and the instant."""

    reason: str
    steps: int
    totals: dict[str, Any]  # output_tokens, elapsed_s
    success: dict[str, Any] | None  # the success check's verdict; None: no check ran


def end_record(status: str, t: int, **fields: Unpack[EndFields]) -> dict[str, Any]:
    return {"type": "end", "status": status, "t": t, **fields}


def event_record(span_id: str, t: int, name: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "span_event", "span": span_id, "t": t, "name": name, "attrs": dict(attrs)}


_is_str = str.__instancecheck__


def _after(w: Where, v: object) -> list[str]:
    if not v:
        return []
    if type(v) is not list:
        w.fail("after", f"must be an array of span ids, not {json_kind(v)}")
    if not all(map(_is_str, v)):  # the check in C; the loop only to name the culprit
        for k, a in enumerate(v):
            if type(a) is not str:
                w.fail(f"after[{k}]", f"must be a span id (string), not {json_kind(a)}")
    return v


def parse_record(rec: object, w: Where) -> SpanStart | SpanEnd | SpanEvent | EndRecord | None:
    """Type one record after line 1, naming the field at fault; None for a record type this
    reader does not know.

    The reader types span records, the millions of a big trace, with its own combined check in
    its loop (a call per record costs more than the check) and comes here for anything that
    check does not pass: what it accepts is a subset of what this accepts, with the same values.
    """
    if type(rec) is not dict:
        w.fail("type", f"a record must be a JSON object, not {json_kind(rec)}")
    typ = rec.get("type")
    if typ == "span_start":
        sid, parent, kind, name = rec.get("id"), rec.get("parent"), rec.get("kind"), rec.get("name")
        if type(sid) is not str or not sid:
            w.fail("id", f"must be a span id (non-empty string), not {json_kind(sid)}")
        if parent is not None and type(parent) is not str:
            w.fail("parent", f"must be a span id or null, not {json_kind(parent)}")
        if type(kind) is not str:
            w.fail("kind", f"must be a string, not {json_kind(kind)}")
        if type(name) is not str:
            w.fail("name", f"must be a string, not {json_kind(name)}")
        return SpanStart(
            sid,
            parent,
            kind,
            name,
            instant(w, rec.get("t"), "t"),
            _after(w, rec.get("after")),
            obj(w, rec, "attrs", "attrs"),
        )
    if typ == "span_end":
        sid, status = rec.get("id"), rec.get("status", "ok")
        if type(sid) is not str:
            w.fail("id", f"must be a span id (string), not {json_kind(sid)}")
        if type(status) is not str:
            w.fail("status", f"must be a string, not {json_kind(status)}")
        return SpanEnd(sid, instant(w, rec.get("t"), "t"), status, obj(w, rec, "attrs", "attrs"))
    if typ == "end":
        success = rec.get("success")
        if success is not None and type(success) is not dict:
            w.fail("success", f"must be an object or null, not {json_kind(success)}")
        return EndRecord(
            str_(w, rec, "status", "status", None),
            instant(w, rec.get("t"), "t"),
            str_(w, rec, "reason", "reason"),
            int_(w, rec, "steps", "steps"),
            obj(w, rec, "totals", "totals"),
            success,
            rec,
        )
    if typ == "span_event":
        sid, name = rec.get("span"), rec.get("name")
        if type(sid) is not str or not sid:
            w.fail("span", f"must be a span id (non-empty string), not {json_kind(sid)}")
        if type(name) is not str:
            w.fail("name", f"must be a string, not {json_kind(name)}")
        return SpanEvent(sid, instant(w, rec.get("t"), "t"), name, obj(w, rec, "attrs", "attrs"))
    if type(typ) is not str:
        w.fail("type", f"must be a record type (string), not {json_kind(typ)}")
    return None
