"""The Responses API shapes: a turn as a planned SSE event stream, or as one JSON response.

Event order (what the SDK's typed stream and its ``responses.stream()`` accumulator expect):
``response.created``, ``response.in_progress``; for hidden reasoning an output item of type
``reasoning`` (added when reasoning starts, done just before the first visible token); for text
``output_item.added`` (message), ``content_part.added``, ``output_text.delta``*,
``output_text.done``, ``content_part.done``, ``output_item.done``; for each tool call
``output_item.added`` (function_call), ``function_call_arguments.delta``*,
``function_call_arguments.done``, ``output_item.done``; then ``response.completed`` with usage
(``response.incomplete``, reason ``max_output_tokens``, when the request's limit cut the turn).
Every event carries ``sequence_number``.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentloop.sim._stream import Segment, StreamPlan, Tpl
from agentloop.sim.conversation import Call


def _event(kind: str, payload: dict[str, Any]) -> Tpl:
    body = orjson.dumps({"type": kind, **payload})
    return (b"event: %b\ndata: %b,\"sequence_number\":" % (kind.encode(), body[:-1]), b"}\n\n")


def usage(call: Call) -> dict[str, Any]:
    reasoning = call.plan.turn.reasoning_tokens
    out = reasoning + call.plan.visible_tokens
    return {"input_tokens": call.input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": call.input_tokens + out}


def _ids(call: Call) -> tuple[str, str, str]:
    n = call.number
    return f"resp_sim{n:06d}", f"rs_sim{n:06d}", f"msg_sim{n:06d}"


def _items(call: Call) -> list[dict[str, Any]]:
    """The finished output items, in output order."""
    _, rs_id, msg_id = _ids(call)
    turn = call.plan.turn
    items: list[dict[str, Any]] = []
    if turn.reasoning_tokens:
        items.append({"id": rs_id, "type": "reasoning", "summary": [], "status": "completed"})
    if turn.text or not turn.tool_calls:
        items.append({"id": msg_id, "type": "message", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": turn.text, "annotations": [],
                                   "logprobs": []}]})
    for k, c in enumerate(turn.tool_calls):
        items.append({"id": f"fc_sim{call.number:06d}_{k}", "type": "function_call",
                      "call_id": call.plan.call_id(k), "name": c.name, "arguments": c.arguments,
                      "status": "completed"})
    if call.plan.truncated and items:
        items[-1]["status"] = "incomplete"
    return items


def response_object(call: Call, req: dict[str, Any], status: str,
                    output: list[dict[str, Any]], with_usage: bool) -> dict[str, Any]:
    resp_id, _, _ = _ids(call)
    return {
        "id": resp_id, "object": "response", "created_at": call.created, "status": status,
        "completed_at": call.created if status == "completed" else None,
        "model": call.model, "output": output, "error": None,
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                               else None),
        "instructions": req.get("instructions"), "metadata": req.get("metadata") or {},
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "temperature": req.get("temperature"), "top_p": req.get("top_p"),
        "tool_choice": req.get("tool_choice", "auto"), "tools": req.get("tools") or [],
        "max_output_tokens": req.get("max_output_tokens"),
        "previous_response_id": req.get("previous_response_id"),
        "reasoning": req.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": call.service_tier, "store": req.get("store", False),
        "text": req.get("text") or {"format": {"type": "text"}}, "truncation": "disabled",
        "usage": usage(call) if with_usage else None,
    }


def final_json(call: Call, req: dict[str, Any]) -> bytes:
    """The non-streaming response body."""
    return orjson.dumps(response_object(call, req, _final_status(call), _items(call), True))


def _final_status(call: Call) -> str:
    return "incomplete" if call.plan.truncated else "completed"


def stream_plan(call: Call, req: dict[str, Any]) -> StreamPlan:
    """The streamed events of ``call`` as templates around its token deltas."""
    items = _items(call)
    turn = call.plan.turn
    head = [_event("response.created",
                   {"response": response_object(call, req, "in_progress", [], False)}),
            _event("response.in_progress",
                   {"response": response_object(call, req, "in_progress", [], False)})]
    reasoning: list[Tpl] = []
    pre: list[Tpl] = []  # closes the reasoning item just before the first visible token
    idx = 0
    if turn.reasoning_tokens:
        item = items[0]
        reasoning = [_event("response.output_item.added", {
            "output_index": 0, "item": {**item, "status": "in_progress"}})]
        pre = [_event("response.output_item.done", {"output_index": 0, "item": item})]
        idx = 1
    segments: list[Segment] = []
    if turn.text or not turn.tool_calls:
        item = items[idx]
        msg_id = item["id"]
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        where = {"item_id": msg_id, "output_index": idx, "content_index": 0}
        opened = [*pre,
                  _event("response.output_item.added", {"output_index": idx, "item": {
                      **item, "status": "in_progress", "content": []}}),
                  _event("response.content_part.added", {**where, "part": part})]
        pre = []
        delta = (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                 b'"item_id":"%b","output_index":%d,"content_index":0,"logprobs":[],'
                 b'"sequence_number":' % (msg_id.encode(), idx), b',"delta":', b"}\n\n")
        closed = [_event("response.output_text.done", {**where, "text": turn.text,
                                                       "logprobs": []}),
                  _event("response.content_part.done", {**where, "part": {
                      **part, "text": turn.text}}),
                  _event("response.output_item.done", {"output_index": idx, "item": item})]
        segments.append(Segment(opened, call.plan.text_tokens, delta, closed))
        idx += 1
    for k, tokens in enumerate(call.plan.arg_tokens):
        item = items[idx]
        fc_id = item["id"]
        opened = [*pre, _event("response.output_item.added", {"output_index": idx, "item": {
            **item, "arguments": "", "status": "in_progress"}})]
        pre = []
        delta = (b'event: response.function_call_arguments.delta\ndata: {"type":'
                 b'"response.function_call_arguments.delta","item_id":"%b","output_index":%d,'
                 b'"sequence_number":' % (fc_id.encode(), idx), b',"delta":', b"}\n\n")
        closed = [_event("response.function_call_arguments.done", {
                      "item_id": fc_id, "output_index": idx, "name": item["name"],
                      "arguments": turn.tool_calls[k].arguments}),
                  _event("response.output_item.done", {"output_index": idx, "item": item})]
        segments.append(Segment(opened, tokens, delta, closed))
        idx += 1
    status = _final_status(call)
    tail = [_event(f"response.{status}",
                   {"response": response_object(call, req, status, items, True)})]
    return StreamPlan(True, head, reasoning, segments, tail)
