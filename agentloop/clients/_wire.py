"""Request bodies for the Responses and Chat Completions APIs, built as JSON bytes with orjson.

The SDK's typed ``create()`` walks the whole conversation through its parameter transform on
every call (milliseconds for a long agent run); here each message is encoded once and the
encoded prefix of the previous request is reused, so a step costs the new messages plus a join.

OpenAI's reasoning contract (Responses, ``store: false``): with reasoning on, every request asks
for ``include: ["reasoning.encrypted_content"]``, and an assistant turn is re-sent with the
reasoning items the model returned for it, verbatim and first (the order the model produced
them); an item without encrypted content cannot be resolved statelessly and is not re-sent.
A tier's ``extra_body`` is merged last into the per-tier part of every request.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from agentloop.config.tiers import RESERVED_BODY_KEYS
from agentloop.types import Message, ToolSpec

Api = Literal["responses", "chat"]


ENCRYPTED_REASONING = "reasoning.encrypted_content"


def responses_items(m: Message) -> list[dict[str, Any]]:
    """One neutral message as Responses API input items (stateless: full history each call)."""
    if m.role == "tool":
        return [
            {"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.content}
        ]
    if m.role == "assistant":
        items: list[dict[str, Any]] = [orjson.loads(r.raw) for r in m.reasoning if r.encrypted]
        if m.content or not m.tool_calls:
            items.append({"role": "assistant", "content": m.content})
        items.extend(
            {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
            for c in m.tool_calls
        )
        return items
    return [{"role": m.role, "content": m.content}]


def chat_items(m: Message) -> list[dict[str, Any]]:
    """One neutral message as Chat Completions messages."""
    if m.role == "tool":
        return [{"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}]
    if m.role == "assistant" and m.tool_calls:
        return [
            {
                "role": "assistant",
                "content": m.content or None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in m.tool_calls
                ],
            }
        ]
    return [{"role": m.role, "content": m.content}]


def tools_json(api: Api, tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    if api == "responses":
        return [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in tools
        ]
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def static_params(api: Api, model: str, options: dict[str, Any]) -> dict[str, Any]:
    """The per-tier part of every request: model, streaming, and the tier's options mapped."""
    body: dict[str, Any] = {"model": model, "stream": True}
    effort = options.get("reasoning_effort")
    if api == "responses":
        body["store"] = False
        if effort is not None:
            body["reasoning"] = {"effort": effort}
            if options.get("reasoning_summary") is not None:
                body["reasoning"]["summary"] = options["reasoning_summary"]
            if effort != "none":  # stateless reasoning: ask for the items to pass back
                body["include"] = [ENCRYPTED_REASONING]
        if options.get("max_output_tokens") is not None:
            body["max_output_tokens"] = options["max_output_tokens"]
    else:
        body["stream_options"] = {"include_usage": True}
        if effort is not None:
            body["reasoning_effort"] = effort
        if options.get("max_output_tokens") is not None:
            body["max_completion_tokens"] = options["max_output_tokens"]
    for key in ("service_tier", "temperature"):
        if options.get(key) is not None:
            body[key] = options[key]
    for key, value in (options.get("extra_body") or {}).items():
        if key not in RESERVED_BODY_KEYS:  # the tier file refuses these; never clobber them
            body[key] = value
    return body


class BodyBuilder:
    """Builds one tier's request bodies, reusing the encoding of an unchanged conversation prefix.

    Not thread-safe, but safe under asyncio: :meth:`build` never awaits.
    """

    def __init__(self, api: Api, model: str, options: dict[str, Any]) -> None:
        self.api: Api = api
        self._encode = responses_items if api == "responses" else chat_items
        self._key = b'"input":[' if api == "responses" else b'"messages":['
        self._static = static_params(api, model, options)
        self._head = orjson.dumps(self._static)[:-1] + b","  # '{...,' ready for more keys
        self._tools: tuple[ToolSpec, ...] | None = None
        self._tools_part = b""
        self._msgs: list[Message] = []
        self._parts: list[bytes] = []  # encoded items of self._msgs[i], b","-joined later

    def params(self) -> dict[str, Any]:
        """The static request parameters (for logs and probes; never holds a secret)."""
        return dict(self._static)

    def build(self, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> bytes:
        if tools is not self._tools and tools != self._tools:
            self._tools = tools
            self._tools_part = (
                b'"tools":' + orjson.dumps(tools_json(self.api, tools)) + b"," if tools else b""
            )
        old, parts = self._msgs, self._parts
        n = min(len(old), len(messages))
        i = 0
        while i < n and messages[i] is old[i]:
            i += 1
        del old[i:], parts[i:]
        encode = self._encode
        for m in messages[i:]:
            old.append(m)
            parts.append(b",".join(orjson.dumps(item) for item in encode(m)))
        return b"".join(
            (self._head, self._tools_part, self._key, b",".join(p for p in parts if p), b"]}")
        )
