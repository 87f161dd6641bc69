"""The Chat Completions shapes: a turn as a planned SSE chunk stream, or as one JSON completion.

Stream: a first chunk with ``delta.role = "assistant"`` and empty content (sent with the headers,
so it never counts as a token), content deltas, ``tool_calls`` deltas (the first of each call
carries index, id, type and function name with empty arguments, then argument pieces), a finish
chunk (``finish_reason`` "tool_calls" or "stop"), a usage chunk with empty ``choices`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``.

A ``dialect`` reproduces what real OpenAI-compatible servers do differently (flags, or a preset
naming several): ``reasoning_content`` (hidden reasoning streamed as ``delta.reasoning_content``
text, paced over the reasoning time: llama.cpp, vLLM, DeepSeek), ``usage_without_reasoning``
(usage has no ``completion_tokens_details``: llama.cpp), ``no_usage`` (no usage chunk even when
asked), ``no_done`` (no ``[DONE]``: the stream ends with the finish chunk and the body's end),
``whole_tool_args`` (each tool call in one chunk, arguments whole, when its last token is due),
``timings`` (llama.cpp's own ``timings`` object on the finish chunk).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from agentloop.errors import ConfigError
from agentloop.model.tokens import split_tokens
from agentloop.sim._stream import Segment, StreamPlan, Tpl
from agentloop.sim.conversation import Call, filler_turn

DIALECT_FLAGS = frozenset(
    {
        "reasoning_content",
        "usage_without_reasoning",
        "no_usage",
        "no_done",
        "whole_tool_args",
        "timings",
    }
)
DIALECTS: dict[str, frozenset[str]] = {
    "openai": frozenset(),
    "llama.cpp": frozenset(
        {"reasoning_content", "usage_without_reasoning", "whole_tool_args", "timings"}
    ),
    "vllm": frozenset({"reasoning_content"}),
    "deepseek": frozenset({"reasoning_content"}),
    "bare": frozenset({"no_usage", "no_done"}),
}


def parse_dialect(value: str | Iterable[str]) -> frozenset[str]:
    """Flags of a dialect given as a preset name, flag names, or both (comma-separated)."""
    names = value.split(",") if isinstance(value, str) else list(value)
    flags: set[str] = set()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in DIALECTS:
            flags |= DIALECTS[name]
        elif name in DIALECT_FLAGS:
            flags.add(name)
        else:
            known = ", ".join([*DIALECTS, *sorted(DIALECT_FLAGS)])
            raise ConfigError(f"unknown simulator dialect {name!r} (known: {known})")
    return frozenset(flags)


def llama_timings(
    prompt_n: int, cache_n: int, prompt_s: float, predicted_n: int, predicted_s: float
) -> dict[str, Any]:
    """A ``timings`` object shaped like llama-server's."""

    def rate(n: int, s: float) -> float:
        return n / s if s > 0 else 0.0

    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n - cache_n,
        "prompt_ms": prompt_s * 1e3,
        "prompt_per_token_ms": prompt_s * 1e3 / max(1, prompt_n - cache_n),
        "prompt_per_second": rate(prompt_n - cache_n, prompt_s),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_s * 1e3,
        "predicted_per_token_ms": predicted_s * 1e3 / max(1, predicted_n),
        "predicted_per_second": rate(predicted_n, predicted_s),
    }


def usage(call: Call) -> dict[str, Any]:
    reasoning = call.plan.turn.reasoning_tokens
    out = reasoning + call.plan.visible_tokens
    return {
        "prompt_tokens": call.input_tokens,
        "completion_tokens": out,
        "total_tokens": call.input_tokens + out,
        "prompt_tokens_details": {"cached_tokens": call.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _base(call: Call, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-sim{call.number:06d}",
        "object": obj,
        "created": call.created,
        "model": call.model,
        "service_tier": call.service_tier,
        "system_fingerprint": "fp_agentloop_sim",
    }


def _finish(call: Call) -> str:
    if call.plan.truncated:
        return "length"
    return "tool_calls" if call.plan.turn.tool_calls else "stop"


def _tool_calls(call: Call) -> list[dict[str, Any]]:
    return [
        {
            "id": call.plan.call_id(k),
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments},
        }
        for k, c in enumerate(call.plan.turn.tool_calls)
    ]


def final_json(call: Call, req: dict[str, Any]) -> bytes:
    """The non-streaming completion body."""
    turn = call.plan.turn
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.text or None,
        "refusal": None,
        "annotations": [],
    }
    if turn.tool_calls:
        message["tool_calls"] = _tool_calls(call)
    return orjson.dumps(
        {
            **_base(call, "chat.completion"),
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(call)}
            ],
            "usage": usage(call),
        }
    )


def _chunk(call: Call, choices: list[dict[str, Any]], **extra: Any) -> Tpl:
    body = orjson.dumps({**_base(call, "chat.completion.chunk"), "choices": choices, **extra})
    return (b"data: " + body + b"\n\n", b"")


def _choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]


def _delta_tpl(call: Call, delta_before: bytes, delta_after: bytes) -> tuple[bytes, bytes, bytes]:
    """A chunk template whose content goes between ``delta_before`` and ``delta_after``."""
    marker = "\x00SIM\x00"
    body = orjson.dumps({**_base(call, "chat.completion.chunk"), "choices": _choice({"x": marker})})
    before, after = body.split(orjson.dumps({"x": marker}))
    return (b"data: " + before + delta_before, b"", delta_after + after + b"\n\n")


def stream_plan(
    call: Call,
    req: dict[str, Any],
    dialect: frozenset[str] = frozenset(),
    timings: dict[str, Any] | None = None,
) -> StreamPlan:
    """The streamed chunks of ``call`` as templates around its token deltas, in ``dialect``."""
    turn = call.plan.turn
    head = [_chunk(call, _choice({"role": "assistant", "content": "", "refusal": None}))]
    thinking = None
    if "reasoning_content" in dialect and turn.reasoning_tokens:
        text = filler_turn(turn.reasoning_tokens, call.plan.index + 1).text
        thinking = Segment(
            [], tuple(split_tokens(text)), _delta_tpl(call, b'{"reasoning_content":', b"}"), []
        )
    segments: list[Segment] = []
    if turn.text or not turn.tool_calls:
        segments.append(
            Segment([], call.plan.text_tokens, _delta_tpl(call, b'{"content":', b"}"), [])
        )
    whole = "whole_tool_args" in dialect
    segments += [_call_segment(call, k, whole) for k in range(len(turn.tool_calls))]
    return StreamPlan(
        False, head, [], segments, _tail(call, req, dialect, timings), thinking=thinking
    )


def _call_segment(call: Call, k: int, whole: bool) -> Segment:
    """Tool call ``k``: a first chunk with its id and name, then argument pieces; ``whole``: id,
    name and all the arguments in one chunk."""
    c = call.plan.turn.tool_calls[k]
    if whole:
        head = orjson.dumps(
            {
                "index": k,
                "id": call.plan.call_id(k),
                "type": "function",
                "function": {"name": c.name},
            }
        )[:-2]
        delta = _delta_tpl(call, b'{"tool_calls":[' + head + b',"arguments":', b"}}]}")
        return Segment([], call.plan.arg_tokens[k], delta, [], whole=True)
    first = {
        "index": k,
        "id": call.plan.call_id(k),
        "type": "function",
        "function": {"name": c.name, "arguments": ""},
    }
    opened = [_chunk(call, _choice({"tool_calls": [first]}))]
    delta = _delta_tpl(call, b'{"tool_calls":[{"index":%d,"function":{"arguments":' % k, b"}}]}")
    return Segment(opened, call.plan.arg_tokens[k], delta, [])


def _tail(
    call: Call, req: dict[str, Any], dialect: frozenset[str], timings: dict[str, Any] | None
) -> list[Tpl]:
    """The finish chunk, the usage chunk (when asked for) and ``[DONE]``, as ``dialect`` has
    them."""
    extra: dict[str, Any] = {"timings": timings} if timings is not None else {}
    tail = [_chunk(call, _choice({}, _finish(call)), **extra)]
    options = req.get("stream_options") or {}
    if options.get("include_usage") and "no_usage" not in dialect:
        u = usage(call)
        if "usage_without_reasoning" in dialect:
            del u["completion_tokens_details"]
        tail.append(_chunk(call, [], usage=u))
    if "no_done" not in dialect:
        tail.append((b"data: [DONE]\n\n", b""))
    return tail
