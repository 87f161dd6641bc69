"""From an assembled stream turn to what a ModelResponse carries: its usage, reasoning, timing.

Usage is the server's, completed by agentloop's tokenizer (:mod:`agentloop.model.tokens`) where
the server said nothing; reasoning items are kept verbatim for the next requests; the timing is
the stream's own instants with their error bound (:mod:`agentloop.clients._rx` where the stream
was stamped by its reader thread, else the loop's lag, :mod:`agentloop.clients._lag`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from agentloop.clients._lag import Watch
from agentloop.clients._rx import StampedStream, stamped_bound
from agentloop.clients._stream import Turn
from agentloop.model.tokens import chat_input_tokens, count_tokens, responses_input_tokens
from agentloop.types import CallTiming, ReasoningItem, Usage


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


def timing_of(
    turn: Turn,
    t_send: int,
    t_hdr: int,
    build_ns: int,
    watch: Watch,
    rx: StampedStream | None,
    server_on_loop: bool = False,
) -> CallTiming:
    """The call's instants and their error bound. A stream stamped by its reader thread gives
    its own: the request went out at the socket write, and the bound is its instants'; else the
    loop's lag while the call ran bounds them all. ``server_on_loop``: the server writes on this
    loop (the embedded simulator), so a block of the loop made its bytes late too, stamped truly
    as they arrived: the loop's lag bounds the instants as the model would have sent them."""
    sent, bound = stamped_bound(
        rx, (t_hdr, turn.t_first, turn.t_first_visible, turn.t_last, turn.t_end)
    )
    if bound is not None and server_on_loop:
        bound = max(bound, watch.bound_ns)
    return CallTiming(
        t_send=sent or t_send,
        t_hdr=t_hdr,
        t_first=turn.t_first,
        t_first_visible=turn.t_first_visible,
        t_last=turn.t_last,
        t_end=turn.t_end,
        chunks=turn.chunks,
        build_ns=build_ns,
        lag_max_ns=watch.max_ns,
        error_bound_ns=watch.bound_ns if bound is None else bound,
    )
