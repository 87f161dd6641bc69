"""From an assembled stream turn to what a ModelResponse carries: its usage and reasoning items.

Usage is the server's, completed by agentloop's tokenizer (:mod:`agentloop.model.tokens`) where
the server said nothing; reasoning items are kept verbatim for the next requests.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from agentloop.clients._stream import Turn
from agentloop.model.tokens import chat_input_tokens, count_tokens, responses_input_tokens
from agentloop.types import ReasoningItem, Usage


def reasoning_items(raw: list[dict[str, Any]]) -> tuple[ReasoningItem, ...]:
    """Reasoning items as received, kept verbatim (their JSON) for the next requests."""
    out = []
    for item in raw:
        summary = tuple(
            str(p.get("text") or "") for p in item.get("summary") or () if isinstance(p, dict)
        )
        out.append(
            ReasoningItem(
                id=str(item.get("id") or ""),
                raw=orjson.dumps(item).decode(),
                summary=summary,
                encrypted=bool(item.get("encrypted_content")),
            )
        )
    return tuple(out)


def usage_of(turn: Turn, body: bytes, text: str, calls: tuple[Any, ...], thought: str) -> Usage:
    """The server's usage, completed by agentloop's tokenizer (``agentloop.model.tokens``) where the
    server said nothing: no usage at all, or reasoning text without a reasoning count. Estimated
    counts are flagged (``Usage.estimated``), never passed off as the server's."""
    u = turn.usage
    if turn.usage_seen and (u.reasoning_tokens or not thought):
        return u
    reasoning = count_tokens(thought)
    if turn.usage_seen:  # reported output (it includes reasoning), reasoning not itemised
        return replace(u, reasoning_tokens=min(reasoning, u.output_tokens), estimated=True)
    req = orjson.loads(body)
    if turn.api == "chat":
        inputs = chat_input_tokens(req.get("messages") or [], count_tokens)
    else:
        inputs = responses_input_tokens(
            req.get("instructions"), req.get("input") or [], count_tokens
        )
    visible = count_tokens(text) + sum(count_tokens(c.arguments) for c in calls)
    return Usage(
        input_tokens=inputs,
        output_tokens=reasoning + visible,
        reasoning_tokens=reasoning,
        estimated=True,
    )
