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

Reasoning items follow OpenAI's contract for stateless (``store: false``) callers: the item has an
``rs_`` id; its ``summary`` holds one ``summary_text`` part only when the request asked for one
(``reasoning.summary``), streamed as ``reasoning_summary_part.added``,
``reasoning_summary_text.delta``, ``reasoning_summary_text.done``, ``reasoning_summary_part.done``
before the item is done; ``encrypted_content`` is present only when ``include`` asks for
``reasoning.encrypted_content``. It is an HMAC-signed token naming the turn, so the simulator can
check statelessly that a later request passed the item back unchanged (:func:`check_reasoning`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentloop.sim._stream import Segment, StreamPlan, Tpl
from agentloop.sim.conversation import Call, PriorTurn, TurnPlan

ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
_MAC_KEY = b"agentloop-sim-reasoning"  # not a secret: it only lets the sim recognise its own items


def _event(kind: str, payload: dict[str, Any]) -> Tpl:
    body = orjson.dumps({"type": kind, **payload})
    return (b'event: %b\ndata: %b,"sequence_number":' % (kind.encode(), body[:-1]), b"}\n\n")


def usage(call: Call) -> dict[str, Any]:
    reasoning = call.plan.turn.reasoning_tokens
    out = reasoning + call.plan.visible_tokens
    return {
        "input_tokens": call.input_tokens,
        "input_tokens_details": {"cached_tokens": call.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": call.input_tokens + out,
    }


def _ids(call: Call) -> tuple[str, str, str]:
    n = call.number
    return f"resp_sim{n:06d}", f"rs_sim{n:06d}", f"msg_sim{n:06d}"


def _wants_summary(req: dict[str, Any]) -> bool:
    reasoning = req.get("reasoning")
    return isinstance(reasoning, dict) and reasoning.get("summary") not in (None, "none")


def _wants_encrypted(req: dict[str, Any]) -> bool:
    include = req.get("include")
    return isinstance(include, list) and ENCRYPTED_INCLUDE in include


def summary_text(call: Call) -> str:
    """The reasoning summary the simulator gives for ``call``'s turn (deterministic)."""
    turn = call.plan.turn
    return (
        f"**Planning turn {call.plan.index + 1}**\n\nWorked through "
        f"{turn.reasoning_tokens} reasoning tokens before answering."
    )


def encrypt(turn_index: int, rs_id: str) -> str:
    """The opaque ``encrypted_content`` of a reasoning item: the turn it belongs to, signed."""
    payload = orjson.dumps({"turn": turn_index, "id": rs_id})
    mac = hmac.new(_MAC_KEY, payload, hashlib.sha256).digest()[:16]
    return "gAAAAB" + base64.urlsafe_b64encode(payload + mac).decode()


def decrypt(token: object) -> dict[str, Any] | None:
    """The payload of an ``encrypted_content`` the simulator made, or ``None`` if it is not one."""
    if not isinstance(token, str) or not token.startswith("gAAAAB"):
        return None
    try:
        raw = base64.urlsafe_b64decode(token[6:].encode())
        payload, mac = raw[:-16], raw[-16:]
        if not hmac.compare_digest(mac, hmac.new(_MAC_KEY, payload, hashlib.sha256).digest()[:16]):
            return None
        out = orjson.loads(payload)
    except (ValueError, orjson.JSONDecodeError):
        return None
    return out if isinstance(out, dict) else None


def _reasoning_item(call: Call, req: dict[str, Any]) -> dict[str, Any]:
    _, rs_id, _ = _ids(call)
    item: dict[str, Any] = {"id": rs_id, "type": "reasoning", "summary": []}
    if _wants_summary(req):
        item["summary"] = [{"type": "summary_text", "text": summary_text(call)}]
    if _wants_encrypted(req):
        item["encrypted_content"] = encrypt(call.plan.index, rs_id)
    item["status"] = "completed"
    return item


@dataclass(frozen=True, slots=True)
class ReasoningCheck:
    """What a request's input did with earlier reasoning items.

    ``received``: reasoning items passed back and recognised; ``missing``: earlier turns with
    hidden reasoning whose item is absent; ``error``: ``(status, message, code)`` to refuse with.
    """

    received: int = 0
    missing: tuple[int, ...] = ()
    error: tuple[int, str, str | None] | None = None


def check_reasoning(
    priors: Sequence[PriorTurn], store: object, plans: Sequence[TurnPlan] | None, require: bool
) -> ReasoningCheck:
    """Check the reasoning items of a request's earlier model turns, as OpenAI's API would.

    With ``store`` false an item without ``encrypted_content`` cannot be resolved (the real API's
    404 "Item ... not found"); a tampered or foreign ``encrypted_content`` is a 400. ``require``
    (the simulator's strict mode) also refuses a request that drops the item of a scripted turn
    that reasoned.
    """
    received = 0
    missing: list[int] = []
    for j, prior in enumerate(priors):
        for item in prior.reasoning:
            rs_id = str(item.get("id") or "")
            token = item.get("encrypted_content")
            if token is None:
                if store is False:
                    return ReasoningCheck(received, tuple(missing), _not_found(rs_id))
                continue
            payload = decrypt(token)
            if payload is None or payload.get("id") != rs_id or payload.get("turn") != j:
                return ReasoningCheck(received, tuple(missing), _unverified(rs_id, j))
            received += 1
        reasoned = plans is not None and j < len(plans) and plans[j].turn.reasoning_tokens > 0
        if reasoned and not prior.reasoning:
            missing.append(j)
    if require and missing:
        return ReasoningCheck(received, tuple(missing), _dropped(missing))
    return ReasoningCheck(received, tuple(missing))


def _not_found(rs_id: str) -> tuple[int, str, str | None]:
    return (
        404,
        f"Item with id '{rs_id}' not found. Items are not persisted when `store` is set to false. "
        "Try again with `store` set to true, or remove this item from your input.",
        None,
    )


def _unverified(rs_id: str, j: int) -> tuple[int, str, str | None]:
    return (
        400,
        f"The encrypted content for item '{rs_id}' could not be verified (it does not belong to "
        f"model turn {j} of this conversation).",
        "invalid_encrypted_content",
    )


def _dropped(missing: list[int]) -> tuple[int, str, str | None]:
    return (
        400,
        f"agentloop sim (require_reasoning): model turn(s) {list(missing)} reasoned, but this "
        "request does not pass their reasoning items back; with store=false send every "
        "reasoning item (id, encrypted_content, summary) the model returned, ask for them "
        f"with include=['{ENCRYPTED_INCLUDE}']",
        "reasoning_items_missing",
    )


def _items(call: Call, req: dict[str, Any]) -> list[dict[str, Any]]:
    """The finished output items, in output order."""
    _, _, msg_id = _ids(call)
    turn = call.plan.turn
    items: list[dict[str, Any]] = []
    if turn.reasoning_tokens:
        items.append(_reasoning_item(call, req))
    if turn.text or not turn.tool_calls:
        items.append(
            {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}
                ],
            }
        )
    for k, c in enumerate(turn.tool_calls):
        items.append(
            {
                "id": f"fc_sim{call.number:06d}_{k}",
                "type": "function_call",
                "call_id": call.plan.call_id(k),
                "name": c.name,
                "arguments": c.arguments,
                "status": "completed",
            }
        )
    if call.plan.truncated and items:
        items[-1]["status"] = "incomplete"
    return items


def response_object(
    call: Call, req: dict[str, Any], status: str, output: list[dict[str, Any]], with_usage: bool
) -> dict[str, Any]:
    resp_id, _, _ = _ids(call)
    return {
        "id": resp_id,
        "object": "response",
        "created_at": call.created,
        "status": status,
        "completed_at": call.created if status == "completed" else None,
        "model": call.model,
        "output": output,
        "error": None,
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete" else None),
        "instructions": req.get("instructions"),
        "metadata": req.get("metadata") or {},
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "temperature": req.get("temperature"),
        "top_p": req.get("top_p"),
        "tool_choice": req.get("tool_choice", "auto"),
        "tools": req.get("tools") or [],
        "max_output_tokens": req.get("max_output_tokens"),
        "previous_response_id": req.get("previous_response_id"),
        "reasoning": req.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": call.service_tier,
        "store": req.get("store", False),
        "text": req.get("text") or {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": usage(call) if with_usage else None,
    }


def final_json(call: Call, req: dict[str, Any]) -> bytes:
    """The non-streaming response body."""
    return orjson.dumps(response_object(call, req, _final_status(call), _items(call, req), True))


def _final_status(call: Call) -> str:
    return "incomplete" if call.plan.truncated else "completed"


def stream_plan(call: Call, req: dict[str, Any]) -> StreamPlan:
    """The streamed events of ``call`` as templates around its token deltas."""
    items = _items(call, req)
    turn = call.plan.turn
    created = response_object(call, req, "in_progress", [], False)
    head = [
        _event("response.created", {"response": created}),
        _event("response.in_progress", {"response": created}),
    ]
    reasoning: list[Tpl] = []
    pre: list[Tpl] = []  # closes the reasoning item just before the first visible token
    idx = 0
    if turn.reasoning_tokens:
        reasoning, pre = _reasoning_events(items[0])
        idx = 1
    segments: list[Segment] = []
    if turn.text or not turn.tool_calls:
        segments.append(_text_segment(call, items[idx], idx, pre))
        pre = []
        idx += 1
    for k, tokens in enumerate(call.plan.arg_tokens):
        segments.append(_call_segment(items[idx], idx, pre, tokens, turn.tool_calls[k].arguments))
        pre = []
        idx += 1
    status = _final_status(call)
    tail = [
        _event(f"response.{status}", {"response": response_object(call, req, status, items, True)})
    ]
    return StreamPlan(True, head, reasoning, segments, tail)


def _reasoning_events(item: dict[str, Any]) -> tuple[list[Tpl], list[Tpl]]:
    """The reasoning item's events: added when reasoning starts; its summary and done just
    before the first visible token."""
    added = {k: v for k, v in item.items() if k != "encrypted_content"}  # not final yet
    start = _event(
        "response.output_item.added",
        {"output_index": 0, "item": {**added, "summary": [], "status": "in_progress"}},
    )
    done = [
        *_summary_events(item),
        _event("response.output_item.done", {"output_index": 0, "item": item}),
    ]
    return [start], done


def _text_segment(call: Call, item: dict[str, Any], idx: int, pre: list[Tpl]) -> Segment:
    """The message item at output ``idx``: its opening events, text deltas, closing events."""
    text = call.plan.turn.text
    msg_id = item["id"]
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    where = {"item_id": msg_id, "output_index": idx, "content_index": 0}
    opened = [
        *pre,
        _event(
            "response.output_item.added",
            {"output_index": idx, "item": {**item, "status": "in_progress", "content": []}},
        ),
        _event("response.content_part.added", {**where, "part": part}),
    ]
    delta = (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"item_id":"%b","output_index":%d,"content_index":0,"logprobs":[],'
        b'"sequence_number":' % (msg_id.encode(), idx),
        b',"delta":',
        b"}\n\n",
    )
    closed = [
        _event("response.output_text.done", {**where, "text": text, "logprobs": []}),
        _event("response.content_part.done", {**where, "part": {**part, "text": text}}),
        _event("response.output_item.done", {"output_index": idx, "item": item}),
    ]
    return Segment(opened, call.plan.text_tokens, delta, closed)


def _call_segment(
    item: dict[str, Any], idx: int, pre: list[Tpl], tokens: tuple[str, ...], arguments: str
) -> Segment:
    """The function_call item at output ``idx``: added, argument deltas, done."""
    fc_id = item["id"]
    opened = [
        *pre,
        _event(
            "response.output_item.added",
            {"output_index": idx, "item": {**item, "arguments": "", "status": "in_progress"}},
        ),
    ]
    delta = (
        b'event: response.function_call_arguments.delta\ndata: {"type":'
        b'"response.function_call_arguments.delta","item_id":"%b","output_index":%d,'
        b'"sequence_number":' % (fc_id.encode(), idx),
        b',"delta":',
        b"}\n\n",
    )
    done = {"item_id": fc_id, "output_index": idx, "name": item["name"], "arguments": arguments}
    closed = [
        _event("response.function_call_arguments.done", done),
        _event("response.output_item.done", {"output_index": idx, "item": item}),
    ]
    return Segment(opened, tokens, delta, closed)


def _summary_events(item: dict[str, Any]) -> list[Tpl]:
    """The streamed summary of a reasoning item (none unless the request asked for one)."""
    out: list[Tpl] = []
    for k, part in enumerate(item["summary"]):
        where = {"item_id": item["id"], "output_index": 0, "summary_index": k}
        text = part["text"]
        out += [
            _event(
                "response.reasoning_summary_part.added",
                {**where, "part": {"type": "summary_text", "text": ""}},
            ),
            _event("response.reasoning_summary_text.delta", {**where, "delta": text}),
            _event("response.reasoning_summary_text.done", {**where, "text": text}),
            _event(
                "response.reasoning_summary_part.done",
                {**where, "part": {"type": "summary_text", "text": text}},
            ),
        ]
    return out
