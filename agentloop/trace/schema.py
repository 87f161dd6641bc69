"""The trace file's record types, parsed once at load into typed values (schema 1).

A trace is JSONL: a :class:`RunHeader`, then :class:`SpanStart` / :class:`SpanEnd` records (and
:class:`SpanEvent`: a named instant inside a span, written when it happens), and a last
:class:`EndRecord`; :data:`Record` is their union, discriminated by the ``type`` field (``run``,
``span_start``, ``span_end``, ``span_event``, ``end``). A reader that predates ``span_event``
skips those lines with a note, and traces without them load as before. The end attributes of model and tool spans have
their own typed views, :class:`ModelAttrs` and :class:`ToolAttrs`; attribute names come from
:mod:`agentloop.trace.attrs`.

A trace file is untrusted input: every field is checked where it is parsed, and a damaged one
raises :class:`agentloop.errors.TraceFileError` naming the file, the line and the field
(``tier.profile.output_tps``, ``attrs.timing.t_send``, ``after[1]`` ...), never a traceback.
Instants are integer ns on the run's clock, ``0 <= t <= MAX_INSTANT_NS``.

The checks are plain functions rather than pydantic models on purpose: a trace can hold millions
of span records, and pydantic's per-record validation measured 3x the cost of the JSON parse
itself (12 us against 3.7 us per reference record); the header, parsed once, goes through the
same helpers for one set of messages. For the same reason the per-span types are NamedTuples,
built with ``tuple.__new__`` on the fast paths (their generated ``__new__`` and a frozen
dataclass's ``__init__`` cost several times more per instance); the header and the end record,
one each, are frozen dataclasses. The union is discriminated by class (``isinstance``), each
class standing for one value of the ``type`` field.

Speed: the millions of records take fast paths, one combined check of the shape the writer
writes (span records in the reader's loop, :func:`model_attrs` and :func:`tool_attrs` here);
whatever a fast path does not pass, damaged or only unusual, goes to the detailed checks, which
accept a superset with the same values and name the field at fault. A damaged file costs the
detailed checks once, at the line that stops the load.

``SCHEMA_VERSION`` is what the writer writes; ``READABLE_SCHEMAS`` what this reader accepts.
Records are built as dicts for the sinks by :func:`header_record`, :func:`start_record`,
:func:`end_span_record` and :func:`end_record`, so their shape is written down once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple, NoReturn

from agentloop.errors import TraceFileError
from agentloop.speed import SpeedProfile
from agentloop.trace import attrs as A

SCHEMA_VERSION = 1
READABLE_SCHEMAS = frozenset({1})
MAX_INSTANT_NS = 100 * 86_400 * 10**9  # 100 days on the run's clock: later is a damaged file

__all__ = [
    "MAX_INSTANT_NS",
    "READABLE_SCHEMAS",
    "SCHEMA_VERSION",
    "Attempt",
    "EndRecord",
    "ModelAttrs",
    "ModelOutput",
    "OutputToolCall",
    "Profile",
    "Record",
    "RunHeader",
    "SpanEnd",
    "SpanEvent",
    "SpanStart",
    "TaskInfo",
    "TierInfo",
    "Timing",
    "ToolAttrs",
    "ToolInfo",
    "Where",
    "end_record",
    "end_span_record",
    "event_record",
    "header_record",
    "model_attrs",
    "parse_header",
    "parse_record",
    "start_record",
    "tool_attrs",
]


class Where:
    """Where a value sits: file and line, for the error message."""

    __slots__ = ("line", "path")

    def __init__(self, path: object, line: int) -> None:
        self.path, self.line = path, line

    def fail(self, fld: str, msg: str) -> NoReturn:
        raise TraceFileError(f"{self.path}, line {self.line}, field '{fld}': {msg}")


def _kind(v: object) -> str:
    return (
        "null"
        if v is None
        else type(v)
        .__name__.replace("str", "string")
        .replace("dict", "object")
        .replace("list", "array")
    )


def _int(
    w: Where,
    d: Mapping[str, Any],
    key: str,
    fld: str,
    default: int | None = 0,
) -> int:
    v = d.get(key, default)
    if type(v) is not int or v < 0:
        if v is None and default is None:
            w.fail(fld, "missing (an integer >= 0)")
        w.fail(fld, f"must be an integer >= 0, not {_kind(v)} {v!r:.40}")
    return v


def _opt_int(w: Where, d: Mapping[str, Any], key: str, fld: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if type(v) is not int or v < 0:
        w.fail(fld, f"must be an integer >= 0 or null, not {_kind(v)} {v!r:.40}")
    return v


def _instant(w: Where, v: object, fld: str) -> int:
    if type(v) is not int:
        w.fail(fld, f"an instant must be integer ns, not {_kind(v)} {v!r:.40}")
    if not 0 <= v <= MAX_INSTANT_NS:
        w.fail(fld, f"instant {v} ns is outside the run's clock (0 .. {MAX_INSTANT_NS})")
    return v


def _opt_instant(w: Where, d: Mapping[str, Any], key: str, fld: str) -> int | None:
    v = d.get(key)
    return None if v is None else _instant(w, v, fld)


def _str(w: Where, d: Mapping[str, Any], key: str, fld: str, default: str | None = "") -> str:
    v = d.get(key, default)
    if type(v) is not str:
        w.fail(fld, f"must be a string, not {_kind(v)}")
    return v


def _opt_str(w: Where, d: Mapping[str, Any], key: str, fld: str) -> str | None:
    v = d.get(key)
    if v is not None and type(v) is not str:
        w.fail(fld, f"must be a string or null, not {_kind(v)}")
    return v


def _obj(w: Where, d: Mapping[str, Any], key: str, fld: str) -> dict[str, Any]:
    v = d.get(key)
    if v is None:
        return {}
    if type(v) is not dict:
        w.fail(fld, f"must be an object, not {_kind(v)}")
    return v


def _num(w: Where, d: Mapping[str, Any], key: str, fld: str, *, positive: bool = False) -> float:
    v = d.get(key)
    if type(v) not in (int, float):
        w.fail(fld, f"must be a number, not {_kind(v)} {v!r:.40}")
    x = float(v)  # type: ignore[arg-type]  # an int or a float: checked above
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        w.fail(fld, f"must be a finite number {'> 0' if positive else '>= 0'}, not {v!r}")
    return x


# -- the header --------------------------------------------------------------------------------


# The recorded tier's speed profile (the trace header's ``tier.profile``): the speed model's own
# record type, with the optional fields a trace carries only when set.
Profile = SpeedProfile
# its optional fields, each with whether it must be > 0 (a rate) or may be 0 (a slope)
_OPTIONAL_PROFILE = {
    "cached_prefill_tps": True,
    "tpot_ms_per_1k": False,
    "prefill_ms_per_1k": False,
}


@dataclass(frozen=True, slots=True)
class TaskInfo:
    name: str
    prompt: str = ""
    system: str = ""
    source: str | None = None


@dataclass(frozen=True, slots=True)
class TierInfo:
    name: str
    model: str = ""
    base_url: str = ""
    api: str = ""
    profile: Profile | None = None  # None: an old or foreign trace without one


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunHeader:
    """Line 1. ``raw`` keeps every field as written (fields added later ride along there)."""

    type: ClassVar[Literal["run"]] = "run"
    schema: int
    run_id: str
    task: TaskInfo
    tier: TierInfo
    tools: tuple[ToolInfo, ...]
    workspace: str | None
    wall: str
    raw: dict[str, Any]


def parse_header(rec: object, path: object) -> RunHeader:
    """Check and type line 1 of a trace."""
    w = Where(path, 1)
    if type(rec) is not dict or rec.get("type") != "run":
        w.fail("type", "missing the run header (field 'type' must be \"run\")")
    schema = rec.get("schema")
    if schema not in READABLE_SCHEMAS or type(schema) is not int:
        w.fail(
            "schema",
            f"is {schema!r}; this agentloop reads schema "
            f"{', '.join(map(str, sorted(READABLE_SCHEMAS)))}",
        )
    task = _obj(w, rec, "task", "task")
    tier = _obj(w, rec, "tier", "tier")
    prof = tier.get("profile")
    profile = None
    if prof is not None:
        if type(prof) is not dict:
            w.fail("tier.profile", f"must be an object, not {_kind(prof)}")
        profile = Profile(
            _num(w, prof, "base_latency_s", "tier.profile.base_latency_s"),
            _num(w, prof, "prefill_tps", "tier.profile.prefill_tps"),
            _num(w, prof, "output_tps", "tier.profile.output_tps", positive=True),
            **{
                k: _num(w, prof, k, f"tier.profile.{k}", positive=positive)
                for k, positive in _OPTIONAL_PROFILE.items()
                if prof.get(k) is not None
            },
        )
    tools = rec.get("tools") or []
    if type(tools) is not list:
        w.fail("tools", f"must be an array, not {_kind(tools)}")
    infos = []
    for k, t in enumerate(tools):
        if type(t) is not dict:
            w.fail(f"tools[{k}]", f"must be an object, not {_kind(t)}")
        infos.append(
            ToolInfo(
                _str(w, t, "name", f"tools[{k}].name", None),
                _str(w, t, "description", f"tools[{k}].description"),
                _obj(w, t, "parameters", f"tools[{k}].parameters"),
            )
        )
    clock = _obj(w, rec, "clock", "clock")
    return RunHeader(
        schema,
        _str(w, rec, "run_id", "run_id"),
        TaskInfo(
            _str(w, task, "name", "task.name", "?"),
            _str(w, task, "prompt", "task.prompt"),
            _str(w, task, "system", "task.system"),
            _opt_str(w, task, "source", "task.source"),
        ),
        TierInfo(
            _str(w, tier, "name", "tier.name", "?"),
            _str(w, tier, "model", "tier.model"),
            _str(w, tier, "base_url", "tier.base_url"),
            _str(w, tier, "api", "tier.api"),
            profile,
        ),
        tuple(infos),
        _opt_str(w, rec, "workspace", "workspace"),
        _str(w, clock, "wall", "clock.wall"),
        rec,
    )


def header_record(**fields: Any) -> dict[str, Any]:
    """The run header as written (``schema`` and ``type`` filled in)."""
    return {"type": "run", "schema": SCHEMA_VERSION, **fields}


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


def end_record(status: str, t: int, **fields: Any) -> dict[str, Any]:
    return {"type": "end", "status": status, "t": t, **fields}


def event_record(span_id: str, t: int, name: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "span_event", "span": span_id, "t": t, "name": name, "attrs": dict(attrs)}


_is_str = str.__instancecheck__


def _after(w: Where, v: object) -> list[str]:
    if not v:
        return []
    if type(v) is not list:
        w.fail("after", f"must be an array of span ids, not {_kind(v)}")
    if not all(map(_is_str, v)):  # the check in C; the loop only to name the culprit
        for k, a in enumerate(v):
            if type(a) is not str:
                w.fail(f"after[{k}]", f"must be a span id (string), not {_kind(a)}")
    return v


def parse_record(rec: object, w: Where) -> SpanStart | SpanEnd | SpanEvent | EndRecord | None:
    """Type one record after line 1, naming the field at fault; None for a record type this
    reader does not know.

    The reader types span records, the millions of a big trace, with its own combined check in
    its loop (a call per record costs more than the check) and comes here for anything that
    check does not pass: what it accepts is a subset of what this accepts, with the same values.
    """
    if type(rec) is not dict:
        w.fail("type", f"a record must be a JSON object, not {_kind(rec)}")
    typ = rec.get("type")
    if typ == "span_start":
        sid, parent, kind, name = rec.get("id"), rec.get("parent"), rec.get("kind"), rec.get("name")
        if type(sid) is not str or not sid:
            w.fail("id", f"must be a span id (non-empty string), not {_kind(sid)}")
        if parent is not None and type(parent) is not str:
            w.fail("parent", f"must be a span id or null, not {_kind(parent)}")
        if type(kind) is not str:
            w.fail("kind", f"must be a string, not {_kind(kind)}")
        if type(name) is not str:
            w.fail("name", f"must be a string, not {_kind(name)}")
        return SpanStart(
            sid,
            parent,
            kind,
            name,
            _instant(w, rec.get("t"), "t"),
            _after(w, rec.get("after")),
            _obj(w, rec, "attrs", "attrs"),
        )
    if typ == "span_end":
        sid, status = rec.get("id"), rec.get("status", "ok")
        if type(sid) is not str:
            w.fail("id", f"must be a span id (string), not {_kind(sid)}")
        if type(status) is not str:
            w.fail("status", f"must be a string, not {_kind(status)}")
        return SpanEnd(sid, _instant(w, rec.get("t"), "t"), status, _obj(w, rec, "attrs", "attrs"))
    if typ == "end":
        success = rec.get("success")
        if success is not None and type(success) is not dict:
            w.fail("success", f"must be an object or null, not {_kind(success)}")
        return EndRecord(
            _str(w, rec, "status", "status", None),
            _instant(w, rec.get("t"), "t"),
            _str(w, rec, "reason", "reason"),
            _int(w, rec, "steps", "steps"),
            _obj(w, rec, "totals", "totals"),
            success,
            rec,
        )
    if typ == "span_event":
        sid, name = rec.get("span"), rec.get("name")
        if type(sid) is not str or not sid:
            w.fail("span", f"must be a span id (non-empty string), not {_kind(sid)}")
        if type(name) is not str:
            w.fail("name", f"must be a string, not {_kind(name)}")
        return SpanEvent(sid, _instant(w, rec.get("t"), "t"), name, _obj(w, rec, "attrs", "attrs"))
    if type(typ) is not str:
        w.fail("type", f"must be a record type (string), not {_kind(typ)}")
    return None


# -- typed span attributes -------------------------------------------------------------------


class Timing(NamedTuple):
    """Run-clock ns of a model call's successful attempt (``attrs.timing``)."""

    t_send: int
    t_hdr: int | None
    t_first: int | None
    t_first_visible: int | None
    t_last: int | None
    t_end: int | None
    chunks: int
    build_ns: int


class Attempt(NamedTuple):
    """One try of a model call, run-clock ns (``attrs.attempts[i]``)."""

    t_start: int | None
    t_end: int | None
    error: str | None
    status: int | None
    wait_ns: int


class OutputToolCall(NamedTuple):
    id: str
    name: str
    arguments: str  # JSON text


class ModelOutput(NamedTuple):
    """What the model said (``attrs.output``): enough to replay the turn."""

    text: str
    reasoning_tokens: int
    tool_calls: tuple[OutputToolCall, ...]


class ModelAttrs(NamedTuple):
    """A finished model span's end attributes, typed."""

    step: int | None
    input_tokens: int
    output_tokens: int  # includes reasoning
    reasoning_tokens: int
    cached_input_tokens: int
    timing: Timing | None  # None: no attempt succeeded (or a cut-short trace)
    attempts: tuple[Attempt, ...]
    wait_ns: int
    output: ModelOutput | None

    @property
    def visible_tokens(self) -> int:
        return max(0, self.output_tokens - self.reasoning_tokens)


def _timing(w: Where, v: object) -> Timing | None:
    if v is None:
        return None
    if type(v) is not dict:
        w.fail(f"attrs.{A.TIMING}", f"must be an object, not {_kind(v)}")
    f = f"attrs.{A.TIMING}."
    t_send = _opt_instant(w, v, "t_send", f + "t_send")
    if t_send is None:
        return None
    return Timing(
        t_send,
        _opt_instant(w, v, "t_hdr", f + "t_hdr"),
        _opt_instant(w, v, "t_first", f + "t_first"),
        _opt_instant(w, v, "t_first_visible", f + "t_first_visible"),
        _opt_instant(w, v, "t_last", f + "t_last"),
        _opt_instant(w, v, "t_end", f + "t_end"),
        _int(w, v, "chunks", f + "chunks"),
        _int(w, v, "build_ns", f + "build_ns"),
    )


def _attempts(w: Where, v: object) -> tuple[Attempt, ...]:
    if not v:
        return ()
    if type(v) is not list:
        w.fail(f"attrs.{A.ATTEMPTS}", f"must be an array, not {_kind(v)}")
    out = []
    for k, a in enumerate(v):
        f = f"attrs.{A.ATTEMPTS}[{k}]"
        if type(a) is not dict:
            w.fail(f, f"must be an object, not {_kind(a)}")
        t0, t1 = (
            _opt_instant(w, a, "t_start", f + ".t_start"),
            _opt_instant(w, a, "t_end", f + ".t_end"),
        )
        if t0 is not None and t1 is not None and t1 < t0:
            w.fail(f + ".t_end", f"ends ({t1}) before it starts ({t0})")
        out.append(
            Attempt(
                t0,
                t1,
                _opt_str(w, a, "error", f + ".error"),
                _opt_int(w, a, "status", f + ".status"),
                _int(w, a, "wait_ns", f + ".wait_ns"),
            )
        )
    return tuple(out)


def _output(w: Where, v: object) -> ModelOutput | None:
    if v is None:
        return None
    f = f"attrs.{A.OUTPUT}"
    if type(v) is not dict:
        w.fail(f, f"must be an object, not {_kind(v)}")
    calls = v.get("tool_calls") or []
    if type(calls) is not list:
        w.fail(f + ".tool_calls", f"must be an array, not {_kind(calls)}")
    out = []
    for k, c in enumerate(calls):
        fc = f"{f}.tool_calls[{k}]"
        if type(c) is not dict:
            w.fail(fc, f"must be an object, not {_kind(c)}")
        args = c.get("arguments", "")
        if type(args) is not str:
            w.fail(fc + ".arguments", f"must be JSON text (a string), not {_kind(args)}")
        out.append(
            OutputToolCall(
                _str(w, c, "id", fc + ".id"), _str(w, c, "name", fc + ".name", None), args
            )
        )
    return ModelOutput(
        _str(w, v, "text", f + ".text"),
        _int(w, v, "reasoning_tokens", f + ".reasoning_tokens"),
        tuple(out),
    )


_new = tuple.__new__  # a NamedTuple built from a tuple in C: its generated __new__ costs 2x
_INT_OR_NONE = frozenset({int, type(None)})
_IN, _OUT = A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS
_REASON, _CACHED = A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, A.GEN_AI_USAGE_CACHED_INPUT_TOKENS


def _ordered(s: int, h: object, f: object, fv: object, la: object, e: object) -> int | None:
    """The last instant of a timing with some instants unknown (None), if its known ones are
    integers on one clock in order (``t_hdr`` only in range); None when something is off."""
    if not (set(map(type, (h, f, fv, la, e))) <= _INT_OR_NONE):
        return None
    prev = s
    for v in (f, fv, la, e):
        if v is not None:
            if v < prev:  # type: ignore[operator]  # an int: checked above
                return None
            prev = v  # type: ignore[assignment]
    if h is not None and not 0 <= h <= MAX_INSTANT_NS:  # type: ignore[operator]
        return None
    return prev


def model_attrs(attrs: Mapping[str, Any], w: Where) -> ModelAttrs:
    """Type a model span's end attributes; a damaged one names ``attrs.<key>``.

    The fast path takes the shape the runner writes (every key present, a successful attempt)
    in one combined check; anything else, damaged or only unusual (a failed call, an old trace
    without some key), goes to the detailed checks, which accept a superset with the same values.
    """
    try:
        typed = _model_attrs_fast(attrs)
    except (KeyError, TypeError):  # a key missing, or a non-object where an object belongs
        typed = None
    return _model_attrs_checked(attrs, w) if typed is None else typed


def _model_attrs_fast(attrs: Mapping[str, Any]) -> ModelAttrs | None:
    step, n_in, n_out, n_r, n_c, wait = (
        attrs[A.STEP],
        attrs[_IN],
        attrs[_OUT],
        attrs[_REASON],
        attrs[_CACHED],
        attrs[A.WAIT_NS],
    )
    tm, att, out = attrs[A.TIMING], attrs[A.ATTEMPTS], attrs[A.OUTPUT]
    s, h, f, fv, la, e, chunks, build = (
        tm["t_send"],
        tm["t_hdr"],
        tm["t_first"],
        tm["t_first_visible"],
        tm["t_last"],
        tm["t_end"],
        tm["chunks"],
        tm["build_ns"],
    )
    text, rt, calls = out["text"], out["reasoning_tokens"], out["tool_calls"]
    if not (
        type(n_in) is int
        and type(n_out) is int
        and type(n_r) is int
        and type(n_c) is int
        and type(wait) is int
        and (step is None or type(step) is int)
        and type(s) is int
        and type(chunks) is int
        and type(build) is int
        and type(text) is str
        and type(rt) is int
        and type(calls) is list
        and type(att) is list
        and n_in | n_out | n_r | n_c | wait | s | chunks | build | rt >= 0  # none negative
    ):
        return None
    if type(f) is int and type(fv) is int and type(la) is int and type(e) is int:
        if not (
            s <= f <= fv <= la <= e <= MAX_INSTANT_NS
            and (h is None or (type(h) is int and 0 <= h <= MAX_INSTANT_NS))
        ):
            return None
    else:
        last = _ordered(s, h, f, fv, la, e)
        if last is None or last > MAX_INSTANT_NS:
            return None
    attempts = []
    for a in att:
        t0, t1, err, status, wt = a["t_start"], a["t_end"], a["error"], a["status"], a["wait_ns"]
        if not (
            type(t0) is int
            and type(t1) is int
            and 0 <= t0 <= t1 <= MAX_INSTANT_NS
            and (err is None or type(err) is str)
            and (status is None or (type(status) is int and status >= 0))
            and type(wt) is int
            and wt >= 0
        ):
            return None
        attempts.append(_new(Attempt, (t0, t1, err, status, wt)))
    tcs = []
    for c in calls:
        cid, name, args = c["id"], c["name"], c["arguments"]
        if not (type(cid) is str and type(name) is str and type(args) is str):
            return None
        tcs.append(_new(OutputToolCall, (cid, name, args)))
    return _new(
        ModelAttrs,
        (
            step,
            n_in,
            n_out,
            n_r,
            n_c,
            _new(Timing, (s, h, f, fv, la, e, chunks, build)),
            tuple(attempts),
            wait,
            _new(ModelOutput, (text, rt, tuple(tcs))),
        ),
    )


def _model_attrs_checked(attrs: Mapping[str, Any], w: Where) -> ModelAttrs:
    step = attrs.get(A.STEP)
    if step is not None and type(step) is not int:
        w.fail(f"attrs.{A.STEP}", f"must be an integer, not {_kind(step)}")
    n_out = _int(w, attrs, A.GEN_AI_USAGE_OUTPUT_TOKENS, f"attrs.{A.GEN_AI_USAGE_OUTPUT_TOKENS}")
    n_r = _int(
        w,
        attrs,
        A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        f"attrs.{A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS}",
    )
    timing = _timing(w, attrs.get(A.TIMING))
    if timing is not None:
        # one clock: send <= first payload <= first visible <= last <= terminal event
        t = timing
        if not (
            t.t_send
            <= (t.t_first or t.t_send)
            <= (t.t_first_visible or t.t_send)
            <= (t.t_last or t.t_send)
            <= (t.t_end or t.t_send)
        ):
            seq = [(k, getattr(t, k)) for k in A.TIMING_KEYS[:6] if k != "t_hdr"]
            known = [(k, v) for k, v in seq if v is not None]
            for (k0, a), (k1, b) in itertools.pairwise(known):
                if b < a:
                    w.fail(f"attrs.{A.TIMING}.{k1}", f"({b}) is before {k0} ({a})")
    return ModelAttrs(
        step,
        _int(w, attrs, A.GEN_AI_USAGE_INPUT_TOKENS, f"attrs.{A.GEN_AI_USAGE_INPUT_TOKENS}"),
        n_out,
        n_r,
        _int(
            w,
            attrs,
            A.GEN_AI_USAGE_CACHED_INPUT_TOKENS,
            f"attrs.{A.GEN_AI_USAGE_CACHED_INPUT_TOKENS}",
        ),
        timing,
        _attempts(w, attrs.get(A.ATTEMPTS)),
        _int(w, attrs, A.WAIT_NS, f"attrs.{A.WAIT_NS}"),
        _output(w, attrs.get(A.OUTPUT)),
    )


class ToolAttrs(NamedTuple):
    """A finished tool span's end attributes, typed."""

    name: str
    call_id: str
    arguments: str
    ok: bool
    output: str
    data: dict[str, Any]
    queued_ns: int  # waited for the max_parallel_tools bound before the span opened


def tool_attrs(attrs: Mapping[str, Any], span_name: str, w: Where) -> ToolAttrs:
    """Type a tool span's end attributes; the tool's name falls back to the span's name."""
    g = attrs.get
    name, ok, args, cid = (
        g(A.GEN_AI_TOOL_NAME),
        g(A.OK, False),
        g(A.ARGUMENTS, ""),
        g(A.GEN_AI_TOOL_CALL_ID, ""),
    )
    out, data, queued = g(A.OUTPUT, ""), g(A.DATA), g(A.QUEUED_NS, 0)
    if (
        type(name) is str
        and name
        and type(ok) is bool
        and type(args) is str
        and type(cid) is str
        and type(out) is str
        and (data is None or type(data) is dict)
        and type(queued) is int
        and queued >= 0
    ):
        return _new(ToolAttrs, (name, cid, args, ok, out, {} if data is None else data, queued))
    return _tool_attrs_checked(attrs, span_name, w)


def _tool_attrs_checked(attrs: Mapping[str, Any], span_name: str, w: Where) -> ToolAttrs:
    name = attrs.get(A.GEN_AI_TOOL_NAME) or span_name.removeprefix("execute_tool ").strip() or "?"
    if type(name) is not str:
        w.fail(f"attrs.{A.GEN_AI_TOOL_NAME}", f"must be a string, not {_kind(name)}")
    ok = attrs.get(A.OK, False)
    if type(ok) is not bool:
        w.fail(f"attrs.{A.OK}", f"must be true or false, not {_kind(ok)}")
    args = attrs.get(A.ARGUMENTS, "")
    if type(args) is not str:
        w.fail(f"attrs.{A.ARGUMENTS}", f"must be JSON text (a string), not {_kind(args)}")
    return ToolAttrs(
        name,
        _str(w, attrs, A.GEN_AI_TOOL_CALL_ID, f"attrs.{A.GEN_AI_TOOL_CALL_ID}"),
        args,
        ok,
        _str(w, attrs, A.OUTPUT, f"attrs.{A.OUTPUT}"),
        _obj(w, attrs, A.DATA, f"attrs.{A.DATA}"),
        _int(w, attrs, A.QUEUED_NS, f"attrs.{A.QUEUED_NS}"),
    )
