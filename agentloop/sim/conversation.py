"""Which scripted turn answers a request: prior model turns read from the body, checked against the script.

Turn ``i`` of a script answers the request whose conversation already holds ``i`` model turns.
Chat Completions: each ``assistant`` message is one model turn. Responses: each run of consecutive
model-output input items (assistant ``message``, ``function_call``, ``reasoning``) is one turn.
The model turns already in the conversation must agree with the script's first turns (same tool
names in the same order, same arguments as JSON values); otherwise the request gets a 400 that
names the turn and what differed, never a silently wrong answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from agentloop.model.tokens import split_tokens
from agentloop.script import ScriptToolCall, ScriptTurn


class ScriptMismatch(Exception):
    """The request's conversation does not fit the script; the message says where and how."""


@dataclass(frozen=True, slots=True)
class PriorTurn:
    """A model turn already in the conversation: its tool calls as ``(name, arguments)``."""

    text: str
    calls: tuple[tuple[str, str], ...]
    reasoning: tuple[dict[str, Any], ...] = ()  # Responses: the turn's reasoning items, as sent


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """A turn ready to stream: the script turn with its text and arguments split into tokens."""

    index: int
    turn: ScriptTurn
    text_tokens: tuple[str, ...]
    arg_tokens: tuple[tuple[str, ...], ...]
    truncated: bool = False  # cut short by the request's output-token limit

    @property
    def visible_tokens(self) -> int:
        return len(self.text_tokens) + sum(len(a) for a in self.arg_tokens)

    def call_id(self, k: int) -> str:
        return f"call_{self.index}_{k}"


def plan_turn(index: int, turn: ScriptTurn) -> TurnPlan:
    """Split a script turn into the tokens the simulator will stream."""
    return TurnPlan(
        index,
        turn,
        tuple(split_tokens(turn.text)),
        tuple(tuple(split_tokens(c.arguments)) for c in turn.tool_calls),
    )


def truncate(plan: TurnPlan, limit: int | None) -> TurnPlan:
    """``plan`` cut to ``limit`` output tokens as a real endpoint would: reasoning first, then
    text, then tool-call arguments in order; calls the budget never reached are dropped."""
    reasoning = plan.turn.reasoning_tokens
    if limit is None or limit <= 0 or reasoning + plan.visible_tokens <= limit:
        return plan
    budget = max(0, limit - reasoning)
    text = plan.text_tokens[:budget]
    budget -= len(text)
    args: list[tuple[str, ...]] = []
    calls: list[ScriptToolCall] = []
    for call, tokens in zip(plan.turn.tool_calls, plan.arg_tokens, strict=True):
        if budget <= 0:
            break
        kept = tokens[:budget]
        budget -= len(kept)
        args.append(kept)
        calls.append(ScriptToolCall(call.name, "".join(kept)))
    turn = ScriptTurn(
        text="".join(text), reasoning_tokens=min(reasoning, limit), tool_calls=tuple(calls)
    )
    return TurnPlan(plan.index, turn, text, tuple(args), truncated=True)


_WORDS = (
    "the",
    "model",
    "reads",
    "a",
    "file",
    "and",
    "then",
    "writes",
    "tests",
    "for",
    "each",
    "step",
    "of",
    "plan",
    "it",
    "checks",
    "output",
    "before",
    "next",
    "tool",
    "call",
)


def filler_turn(n_tokens: int, seed: int = 0) -> ScriptTurn:
    """A text turn of exactly ``n_tokens`` tokens of deterministic filler prose."""
    rng = random.Random(seed)
    pieces: list[str] = []
    start = True
    while len(pieces) < n_tokens:
        left = n_tokens - len(pieces)
        if not start and left > 1 and rng.random() < 0.08:
            pieces.append(".")
            start = True
            continue
        word = rng.choice(_WORDS)
        pieces.append(
            word.capitalize()
            if start and not pieces
            else " " + (word.capitalize() if start else word)
        )
        start = False
    return ScriptTurn(text="".join(pieces))


def chat_priors(messages: list[dict[str, Any]]) -> list[PriorTurn]:
    """The model turns of a Chat Completions conversation (its assistant messages)."""
    out = []
    for m in messages:
        if m.get("role") == "assistant":
            calls = tuple(
                (
                    (c.get("function") or {}).get("name") or "",
                    (c.get("function") or {}).get("arguments") or "",
                )
                for c in m.get("tool_calls") or ()
            )
            content = m.get("content")
            out.append(PriorTurn(content if isinstance(content, str) else "", calls))
    return out


def responses_priors(items: str | list[dict[str, Any]]) -> list[PriorTurn]:
    """The model turns of a Responses input: runs of consecutive model-output items."""
    if isinstance(items, str):
        return []
    out: list[PriorTurn] = []
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    reasoning: list[dict[str, Any]] = []
    in_turn = False
    for it in items:
        kind = it.get("type", "message")
        is_model = kind in ("function_call", "reasoning") or (
            kind == "message" and it.get("role") == "assistant"
        )
        if is_model:
            in_turn = True
            if kind == "function_call":
                calls.append((it.get("name") or "", it.get("arguments") or ""))
            elif kind == "reasoning":
                reasoning.append(it)
            elif kind == "message":
                content = it.get("content")
                if isinstance(content, str):
                    texts.append(content)
                else:
                    texts += [p.get("text", "") for p in content or () if isinstance(p, dict)]
        elif in_turn:
            out.append(PriorTurn("".join(texts), tuple(calls), tuple(reasoning)))
            texts, calls, reasoning, in_turn = [], [], [], False
    if in_turn:
        out.append(PriorTurn("".join(texts), tuple(calls), tuple(reasoning)))
    return out


def _same_args(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return bool(orjson.loads(a or "{}") == orjson.loads(b or "{}"))
    except orjson.JSONDecodeError:
        return False


def _names(calls: tuple[ScriptToolCall, ...] | tuple[tuple[str, str], ...]) -> list[str]:
    return [c.name if isinstance(c, ScriptToolCall) else c[0] for c in calls]


def pick_turn(plans: list[TurnPlan], priors: list[PriorTurn]) -> TurnPlan:
    """The plan answering a conversation with ``priors``; ScriptMismatch if it does not fit."""
    n = len(priors)
    if n >= len(plans):
        raise ScriptMismatch(
            f"the conversation already holds {n} model turn(s) but the script has only "
            f"{len(plans)} turn(s) (turns 0..{len(plans) - 1}): nothing scripted for turn {n}"
        )
    for j, prior in enumerate(priors):
        want = plans[j].turn
        got_names, want_names = _names(prior.calls), _names(want.tool_calls)
        if got_names != want_names:
            raise ScriptMismatch(
                f"model turn {j} in the conversation does not match script turn {j}: it calls "
                f"tools {got_names}, the script calls {want_names}"
            )
        for k, ((name, args), call) in enumerate(zip(prior.calls, want.tool_calls, strict=True)):
            if not _same_args(args, call.arguments):
                raise ScriptMismatch(
                    f"model turn {j} in the conversation does not match script turn {j}: tool "
                    f"call {k} ({name}) has arguments {args!r}, the script has "
                    f"{call.arguments!r}"
                )
    return plans[n]


@dataclass(frozen=True, slots=True)
class Call:
    """What one request is answered with, API-neutral."""

    number: int  # request number, 1-based
    model: str
    service_tier: str | None
    plan: TurnPlan
    input_tokens: int
    created: int  # unix seconds
    cached_tokens: int = 0  # input tokens of a prefix sent before (agentloop.sim.cache)
