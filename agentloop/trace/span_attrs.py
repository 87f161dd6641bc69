"""Types a model or tool span's end attributes (:func:`model_attrs`, :func:`tool_attrs`), fast.

The types are :mod:`agentloop.trace.span_types` (re-exported here). Attribute names come from
:mod:`agentloop.trace.attrs`; every field is checked with the checks of
:mod:`agentloop.trace.fields`, a damaged one naming ``attrs.<key>``.

Speed: the millions of records take fast paths, one combined check of the shape the writer
writes (span records in the reader's loop, :func:`model_attrs` and :func:`tool_attrs` here);
whatever a fast path does not pass, damaged or only unusual, goes to the detailed checks
(:mod:`agentloop.trace._span_checks`), which accept a superset with the same values and name the
field at fault. A damaged file costs the detailed checks once, at the line that stops the load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentloop.trace import attrs as A
from agentloop.trace._span_checks import model_attrs_checked, tool_attrs_checked
from agentloop.trace.fields import MAX_COUNT, MAX_INSTANT_NS, Where
from agentloop.trace.span_types import (
    Attempt,
    ModelAttrs,
    ModelOutput,
    OutputToolCall,
    Timing,
    ToolAttrs,
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
    return model_attrs_checked(attrs, w) if typed is None else typed


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
        and (step is None or (type(step) is int and abs(step) <= MAX_COUNT))
        and type(s) is int
        and type(chunks) is int
        and type(build) is int
        and type(text) is str
        and type(rt) is int
        and type(calls) is list
        and type(att) is list
        # none negative, none past int64: the bitwise or of counts in range stays in range
        and 0 <= n_in | n_out | n_r | n_c | wait | s | chunks | build | rt <= MAX_COUNT
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
            and (status is None or (type(status) is int and 0 <= status <= MAX_COUNT))
            and type(wt) is int
            and 0 <= wt <= MAX_COUNT
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
        and 0 <= queued <= MAX_COUNT
    ):
        return _new(ToolAttrs, (name, cid, args, ok, out, {} if data is None else data, queued))
    return tool_attrs_checked(attrs, span_name, w)
