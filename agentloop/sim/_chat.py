"""The Chat Completions shapes: a turn as a planned SSE chunk stream, or as one JSON completion.

Stream: a first chunk with ``delta.role = "assistant"`` and empty content (sent with the headers,
so it never counts as a token), content deltas, ``tool_calls`` deltas (the first of each call
carries index, id, type and function name with empty arguments, then argument pieces), a finish
chunk (``finish_reason`` "tool_calls" or "stop"), a usage chunk with empty ``choices`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentloop.sim._stream import Segment, StreamPlan, Tpl
from agentloop.sim.conversation import Call


def usage(call: Call) -> dict[str, Any]:
    reasoning = call.plan.turn.reasoning_tokens
    out = reasoning + call.plan.visible_tokens
    return {"prompt_tokens": call.input_tokens, "completion_tokens": out,
            "total_tokens": call.input_tokens + out,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def _base(call: Call, obj: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-sim{call.number:06d}", "object": obj, "created": call.created,
            "model": call.model, "service_tier": call.service_tier,
            "system_fingerprint": "fp_agentloop_sim"}


def _finish(call: Call) -> str:
    if call.plan.truncated:
        return "length"
    return "tool_calls" if call.plan.turn.tool_calls else "stop"


def _tool_calls(call: Call) -> list[dict[str, Any]]:
    return [{"id": call.plan.call_id(k), "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for k, c in enumerate(call.plan.turn.tool_calls)]


def final_json(call: Call, req: dict[str, Any]) -> bytes:
    """The non-streaming completion body."""
    turn = call.plan.turn
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None,
                               "refusal": None, "annotations": []}
    if turn.tool_calls:
        message["tool_calls"] = _tool_calls(call)
    return orjson.dumps({**_base(call, "chat.completion"),
                         "choices": [{"index": 0, "message": message, "logprobs": None,
                                      "finish_reason": _finish(call)}],
                         "usage": usage(call)})


def _chunk(call: Call, choices: list[dict[str, Any]], **extra: Any) -> Tpl:
    body = orjson.dumps({**_base(call, "chat.completion.chunk"), "choices": choices, **extra})
    return (b"data: " + body + b"\n\n", b"")


def _choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]


def _delta_tpl(call: Call, delta_before: bytes, delta_after: bytes) -> tuple[bytes, bytes, bytes]:
    """A chunk template whose content goes between ``delta_before`` and ``delta_after``."""
    marker = "\x00SIM\x00"
    body = orjson.dumps({**_base(call, "chat.completion.chunk"),
                         "choices": _choice({"x": marker})})
    before, after = body.split(orjson.dumps({"x": marker}))
    return (b"data: " + before + delta_before, b"", delta_after + after + b"\n\n")


def stream_plan(call: Call, req: dict[str, Any]) -> StreamPlan:
    """The streamed chunks of ``call`` as templates around its token deltas."""
    turn = call.plan.turn
    head = [_chunk(call, _choice({"role": "assistant", "content": "", "refusal": None}))]
    segments: list[Segment] = []
    if turn.text or not turn.tool_calls:
        segments.append(Segment([], call.plan.text_tokens,
                                _delta_tpl(call, b'{"content":', b"}"), []))
    for k, c in enumerate(turn.tool_calls):
        opened = [_chunk(call, _choice({"tool_calls": [{
            "index": k, "id": call.plan.call_id(k), "type": "function",
            "function": {"name": c.name, "arguments": ""}}]}))]
        delta = _delta_tpl(call, b'{"tool_calls":[{"index":%d,"function":{"arguments":' % k,
                           b"}}]}")
        segments.append(Segment(opened, call.plan.arg_tokens[k], delta, []))
    tail = [_chunk(call, _choice({}, _finish(call)))]
    options = req.get("stream_options") or {}
    if options.get("include_usage"):
        tail.append(_chunk(call, [], usage=usage(call)))
    tail.append((b"data: [DONE]\n\n", b""))
    return StreamPlan(False, head, [], segments, tail)
