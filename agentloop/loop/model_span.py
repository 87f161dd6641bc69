"""A model span's end attributes from a client's response, and the turn as later requests repeat it.

The attribute names are :mod:`agentloop.trace.attrs`'s; docs/design.md lists what each holds.
The runner opens the span and sets these; nothing here writes to a trace.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from agentloop.config.tiers import Tier
from agentloop.errors import ModelError
from agentloop.model import prices
from agentloop.model.timing import CallMetrics, call_metrics, seconds, under_load
from agentloop.trace import attrs as A
from agentloop.trace.tracer import Tracer
from agentloop.types import Attempt, Message, ModelResponse

INVALID_ARGUMENTS = "invalid_arguments"  # key of a replayed call's broken argument text

__all__ = ["INVALID_ARGUMENTS", "failed_model_attrs", "model_attrs", "replayable"]


def attempts_attrs(attempts: tuple[Attempt, ...], tracer: Tracer) -> dict[str, Any]:
    """A model span's ``attempts`` (run-clock ns) and their total back-off ``wait_ns``."""
    rel = tracer.rel
    return {
        A.ATTEMPTS: [
            dict(
                zip(
                    A.ATTEMPT_KEYS,
                    (rel(a.t_start), rel(a.t_end), a.error, a.status, a.wait_ns),
                    strict=True,
                )
            )
            for a in attempts
        ],
        A.WAIT_NS: sum(a.wait_ns for a in attempts),
    }


def failed_model_attrs(exc: ModelError, tracer: Tracer, tier: Tier, step: int) -> dict[str, Any]:
    """The end attributes of a model span whose call failed for good: every attempt made and the
    back-off slept between them (booked as ``wait``, not as retry service time)."""
    return {
        A.STEP: step,
        A.TIER: tier.name,
        A.GEN_AI_REQUEST_MODEL: tier.model,
        A.ERROR: exc.message,
        **attempts_attrs(exc.attempts, tracer),
    }


def reasoning_output(resp: ModelResponse) -> dict[str, Any]:
    """Model-span ``output`` keys for reasoning, present only when the model reasoned visibly:
    ``reasoning`` (Responses items: id, summary texts, whether encrypted content came back; the
    encrypted content itself is not traced) and ``reasoning_text`` (Chat reasoning_content)."""
    out: dict[str, Any] = {}
    if resp.reasoning:
        out[A.OUTPUT_REASONING] = [
            dict(zip(A.REASONING_KEYS, (r.id, list(r.summary), r.encrypted), strict=True))
            for r in resp.reasoning
        ]
    if resp.reasoning_text:
        out[A.OUTPUT_REASONING_TEXT] = resp.reasoning_text
    return out


def dialect_attrs(resp: ModelResponse) -> dict[str, Any]:
    """Model-span keys only some servers cause: ``usage_estimated`` (agentloop counted tokens the
    server did not report) and ``server_timings`` (the server's own, e.g. llama.cpp's)."""
    out: dict[str, Any] = {}
    if resp.usage.estimated:
        out[A.USAGE_ESTIMATED] = True
    if resp.server_timings:
        out[A.SERVER_TIMINGS] = resp.server_timings
    return out


def lateness_attrs(resp: ModelResponse, m: CallMetrics) -> dict[str, Any]:
    """Model-span keys of the client's own lateness while the call ran (``timing_error_s``,
    ``loop_lag_max_s``, ``timing_under_load``): present only when the client measured it."""
    t = resp.timing
    if t.error_bound_ns is None:
        return {}
    bound = t.error_bound_ns / 1e9
    return {
        A.TIMING_ERROR_S: bound,
        A.LOOP_LAG_MAX_S: (t.lag_max_ns or 0) / 1e9,
        A.TIMING_UNDER_LOAD: under_load(bound, m.decode_s, m.call_s),
    }


def model_attrs(resp: ModelResponse, tracer: Tracer, tier: Tier, step: int) -> dict[str, Any]:
    """The end attributes of a model span (docs/design.md), from a client's response."""
    t, u = resp.timing, resp.usage
    rel = tracer.rel
    metrics = call_metrics(t, u)
    return {
        A.STEP: step,
        A.TIER: tier.name,
        A.GEN_AI_REQUEST_MODEL: tier.model,
        A.GEN_AI_RESPONSE_MODEL: resp.model,
        A.GEN_AI_USAGE_INPUT_TOKENS: u.input_tokens,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: u.output_tokens,
        A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: u.reasoning_tokens,
        A.GEN_AI_USAGE_CACHED_INPUT_TOKENS: u.cached_input_tokens,
        A.COST_USD: prices.call_cost(
            tier.prices, u.input_tokens, u.cached_input_tokens, u.output_tokens
        ),
        A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: seconds(t.t_send, t.t_first),
        A.GEN_AI_RESPONSE_FINISH_REASONS: [resp.finish_reason] if resp.finish_reason else [],
        A.SERVICE_TIER: resp.service_tier,
        A.TIMING: dict(
            zip(
                A.TIMING_KEYS,
                (
                    rel(t.t_send),
                    rel(t.t_hdr),
                    rel(t.t_first),
                    rel(t.t_first_visible),
                    rel(t.t_last),
                    rel(t.t_end),
                    t.chunks,
                    t.build_ns,
                ),
                strict=True,
            )
        ),
        **metrics.as_dict(),  # ttfb_s, ttft_s, ... (agentloop.model.timing)
        **lateness_attrs(resp, metrics),
        **attempts_attrs(resp.attempts, tracer),
        A.OUTPUT: {
            A.OUTPUT_TEXT: resp.text,
            A.OUTPUT_REASONING_TOKENS: u.reasoning_tokens,
            A.OUTPUT_TOOL_CALLS: [
                dict(zip(A.TOOL_CALL_KEYS, (c.id, c.name, c.arguments), strict=True))
                for c in resp.tool_calls
            ],
            **reasoning_output(resp),
        },
        **dialect_attrs(resp),
    }


def replayable(msg: Message) -> Message:
    """The model's turn as later requests repeat it: a call whose arguments are not JSON (cut
    at the token limit, or just malformed) is sent back as ``{"invalid_arguments": TEXT}``.
    Servers parse the history: llama-server answers HTTP 500 ("Failed to parse tool call
    arguments as JSON") to every later request that repeats the broken text. The trace keeps
    what the model wrote; the tool result tells the model what was wrong."""
    fixed, changed = [], False
    for c in msg.tool_calls:
        try:
            orjson.loads(c.arguments or "{}")
        except orjson.JSONDecodeError:
            c = dataclasses.replace(
                c, arguments=orjson.dumps({INVALID_ARGUMENTS: c.arguments}).decode()
            )
            changed = True
        fixed.append(c)
    return dataclasses.replace(msg, tool_calls=tuple(fixed)) if changed else msg
