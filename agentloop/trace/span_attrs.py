"""The end attributes of model and tool spans, typed: :class:`ModelAttrs` and :class:`ToolAttrs`.

Attribute names come from :mod:`agentloop.trace.attrs`; every field is checked with the checks
of :mod:`agentloop.trace.fields`, a damaged one naming ``attrs.<key>``.

Speed: the millions of records take fast paths, one combined check of the shape the writer
writes (span records in the reader's loop, :func:`model_attrs` and :func:`tool_attrs` here);
whatever a fast path does not pass, damaged or only unusual, goes to the detailed checks, which
accept a superset with the same values and name the field at fault. A damaged file costs the
detailed checks once, at the line that stops the load.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, NamedTuple

from agentloop.trace import attrs as A
from agentloop.trace.fields import (
    MAX_INSTANT_NS,
    Where,
    int_,
    json_kind,
    num,
    obj,
    opt_instant,
    opt_int,
    opt_str,
    str_,
)

__all__ = [
    "Attempt",
    "ModelAttrs",
    "ModelOutput",
    "OutputToolCall",
    "Timing",
    "ToolAttrs",
    "model_attrs",
    "tool_attrs",
]


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
    # the client's own lateness (issue 28): None / False in a trace that did not measure it
    timing_error_s: float | None = None
    under_load: bool = False

    @property
    def visible_tokens(self) -> int:
        return max(0, self.output_tokens - self.reasoning_tokens)


def _timing(w: Where, v: object) -> Timing | None:
    if v is None:
        return None
    if type(v) is not dict:
        w.fail(f"attrs.{A.TIMING}", f"must be an object, not {json_kind(v)}")
    f = f"attrs.{A.TIMING}."
    t_send = opt_instant(w, v, "t_send", f + "t_send")
    if t_send is None:
        return None
    return Timing(
        t_send,
        opt_instant(w, v, "t_hdr", f + "t_hdr"),
        opt_instant(w, v, "t_first", f + "t_first"),
        opt_instant(w, v, "t_first_visible", f + "t_first_visible"),
        opt_instant(w, v, "t_last", f + "t_last"),
        opt_instant(w, v, "t_end", f + "t_end"),
        int_(w, v, "chunks", f + "chunks"),
        int_(w, v, "build_ns", f + "build_ns"),
    )


def _attempts(w: Where, v: object) -> tuple[Attempt, ...]:
    if not v:
        return ()
    if type(v) is not list:
        w.fail(f"attrs.{A.ATTEMPTS}", f"must be an array, not {json_kind(v)}")
    out = []
    for k, a in enumerate(v):
        f = f"attrs.{A.ATTEMPTS}[{k}]"
        if type(a) is not dict:
            w.fail(f, f"must be an object, not {json_kind(a)}")
        t0, t1 = (
            opt_instant(w, a, "t_start", f + ".t_start"),
            opt_instant(w, a, "t_end", f + ".t_end"),
        )
        if t0 is not None and t1 is not None and t1 < t0:
            w.fail(f + ".t_end", f"ends ({t1}) before it starts ({t0})")
        out.append(
            Attempt(
                t0,
                t1,
                opt_str(w, a, "error", f + ".error"),
                opt_int(w, a, "status", f + ".status"),
                int_(w, a, "wait_ns", f + ".wait_ns"),
            )
        )
    return tuple(out)


def _output(w: Where, v: object) -> ModelOutput | None:
    if v is None:
        return None
    f = f"attrs.{A.OUTPUT}"
    if type(v) is not dict:
        w.fail(f, f"must be an object, not {json_kind(v)}")
    calls = v.get("tool_calls") or []
    if type(calls) is not list:
        w.fail(f + ".tool_calls", f"must be an array, not {json_kind(calls)}")
    out = []
    for k, c in enumerate(calls):
        fc = f"{f}.tool_calls[{k}]"
        if type(c) is not dict:
            w.fail(fc, f"must be an object, not {json_kind(c)}")
        args = c.get("arguments", "")
        if type(args) is not str:
            w.fail(fc + ".arguments", f"must be JSON text (a string), not {json_kind(args)}")
        out.append(
            OutputToolCall(
                str_(w, c, "id", fc + ".id"), str_(w, c, "name", fc + ".name", None), args
            )
        )
    return ModelOutput(
        str_(w, v, "text", f + ".text"),
        int_(w, v, "reasoning_tokens", f + ".reasoning_tokens"),
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
    """The runner's shape typed in one check (None: not that shape). Long on purpose: a hot
    loop, once per model span of every trace loaded (millions), with no call per field."""
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
            *_lateness_fast(attrs),
        ),
    )


_NUM = frozenset({int, float})


def _lateness_fast(attrs: Mapping[str, Any]) -> tuple[float | None, bool]:
    """``(timing_error_s, under_load)`` of the writer's shape; TypeError (so: the detailed
    checks) on anything else."""
    bound, late = attrs.get(A.TIMING_ERROR_S), attrs.get(A.TIMING_UNDER_LOAD, False)
    if bound is None:
        return None, late is True
    if type(bound) not in _NUM or not 0 <= bound < float("inf") or type(late) is not bool:
        raise TypeError(A.TIMING_ERROR_S)
    return float(bound), late


def _lateness_checked(attrs: Mapping[str, Any], w: Where) -> tuple[float | None, bool]:
    bound = None
    if attrs.get(A.TIMING_ERROR_S) is not None:
        bound = num(w, attrs, A.TIMING_ERROR_S, f"attrs.{A.TIMING_ERROR_S}")
    late = attrs.get(A.TIMING_UNDER_LOAD, False)
    if late is not None and type(late) is not bool:
        w.fail(f"attrs.{A.TIMING_UNDER_LOAD}", f"must be true or false, not {json_kind(late)}")
    return bound, late is True


def _model_attrs_checked(attrs: Mapping[str, Any], w: Where) -> ModelAttrs:
    step = attrs.get(A.STEP)
    if step is not None and type(step) is not int:
        w.fail(f"attrs.{A.STEP}", f"must be an integer, not {json_kind(step)}")
    n_out = int_(w, attrs, A.GEN_AI_USAGE_OUTPUT_TOKENS, f"attrs.{A.GEN_AI_USAGE_OUTPUT_TOKENS}")
    n_r = int_(
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
        int_(w, attrs, A.GEN_AI_USAGE_INPUT_TOKENS, f"attrs.{A.GEN_AI_USAGE_INPUT_TOKENS}"),
        n_out,
        n_r,
        int_(
            w,
            attrs,
            A.GEN_AI_USAGE_CACHED_INPUT_TOKENS,
            f"attrs.{A.GEN_AI_USAGE_CACHED_INPUT_TOKENS}",
        ),
        timing,
        _attempts(w, attrs.get(A.ATTEMPTS)),
        int_(w, attrs, A.WAIT_NS, f"attrs.{A.WAIT_NS}"),
        _output(w, attrs.get(A.OUTPUT)),
        *_lateness_checked(attrs, w),
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
        w.fail(f"attrs.{A.GEN_AI_TOOL_NAME}", f"must be a string, not {json_kind(name)}")
    ok = attrs.get(A.OK, False)
    if type(ok) is not bool:
        w.fail(f"attrs.{A.OK}", f"must be true or false, not {json_kind(ok)}")
    args = attrs.get(A.ARGUMENTS, "")
    if type(args) is not str:
        w.fail(f"attrs.{A.ARGUMENTS}", f"must be JSON text (a string), not {json_kind(args)}")
    return ToolAttrs(
        name,
        str_(w, attrs, A.GEN_AI_TOOL_CALL_ID, f"attrs.{A.GEN_AI_TOOL_CALL_ID}"),
        args,
        ok,
        str_(w, attrs, A.OUTPUT, f"attrs.{A.OUTPUT}"),
        obj(w, attrs, A.DATA, f"attrs.{A.DATA}"),
        int_(w, attrs, A.QUEUED_NS, f"attrs.{A.QUEUED_NS}"),
    )
