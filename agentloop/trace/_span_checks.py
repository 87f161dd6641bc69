"""The detailed checks of span end attributes: slower than the fast paths, they name the field at fault.

:mod:`agentloop.trace.span_attrs` sends here whatever its fast paths do not pass, damaged or
only unusual; these accept a superset of the writer's shape with the same values.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from agentloop.trace import attrs as A
from agentloop.trace.fields import (
    MAX_COUNT,
    Where,
    int_,
    json_kind,
    num,
    obj,
    opt_instant,
    opt_int,
    opt_str,
    str_,
    too_large,
)
from agentloop.trace.span_types import (
    Attempt,
    ModelAttrs,
    ModelOutput,
    OutputToolCall,
    Timing,
    ToolAttrs,
)


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


def _lateness_checked(attrs: Mapping[str, Any], w: Where) -> tuple[float | None, bool]:
    bound = None
    if attrs.get(A.TIMING_ERROR_S) is not None:
        bound = num(w, attrs, A.TIMING_ERROR_S, f"attrs.{A.TIMING_ERROR_S}")
    late = attrs.get(A.TIMING_UNDER_LOAD, False)
    if late is not None and type(late) is not bool:
        w.fail(f"attrs.{A.TIMING_UNDER_LOAD}", f"must be true or false, not {json_kind(late)}")
    return bound, late is True


def model_attrs_checked(attrs: Mapping[str, Any], w: Where) -> ModelAttrs:
    step = attrs.get(A.STEP)
    if step is not None and type(step) is not int:
        w.fail(f"attrs.{A.STEP}", f"must be an integer, not {json_kind(step)}")
    if step is not None and abs(step) > MAX_COUNT:
        too_large(w, f"attrs.{A.STEP}", step)
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


def tool_attrs_checked(attrs: Mapping[str, Any], span_name: str, w: Where) -> ToolAttrs:
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
