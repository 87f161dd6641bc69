"""Keeping every request under the tier's context window by trimming the oldest tool outputs.

A tier's ``context_window`` (tokens per request; for a self-started local tier its ``ctx_size``)
bounds what one request may hold: the conversation, the tool definitions and room for the answer
(the tier's ``max_output_tokens``, else :data:`DEFAULT_RESERVE`). Before each model call the
runner asks :meth:`Window.fit`: while the request is estimated over budget, the oldest tool
output still whole is replaced by a one-line placeholder saying how many tokens were dropped;
each such trim is recorded on that call's model span, as a ``context.trim`` event written when
it is made (message index, call id, tool, tokens dropped) and in the span's end attribute
``context.trimmed`` (the same list), and the trimmed conversation is kept, so later requests repeat the same
prefix (a prompt cache stays valid). When nothing is left to trim and the request is still too
big, the run ends with status ``budget``, limit ``context``.

Token counts are estimates (the simulator's tokenizer, :mod:`agentloop.model.tokens`), scaled by
what the server reported: after each call the ratio of its ``input_tokens`` to the estimate of
the request sent is remembered (never below 1), so a model whose tokenizer splits finer than
ours is not overfilled twice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import orjson

from agentloop.model.tokens import MESSAGE_OVERHEAD, count_tokens
from agentloop.trace import attrs as A
from agentloop.types import Message, ToolSpec

if TYPE_CHECKING:
    from agentloop.config.tiers import Tier
    from agentloop.trace.reader import Trace

DEFAULT_RESERVE = 1024  # output tokens kept free when the tier sets no max_output_tokens
PLACEHOLDER = "[tool output dropped to fit the context window: {tokens} tokens]"


@dataclass(frozen=True, slots=True)
class Trim:
    """One tool output replaced by the placeholder."""

    index: int  # position in the conversation
    call_id: str | None
    tool: str | None
    tokens: int  # estimated tokens dropped

    def as_dict(self) -> dict[str, object]:
        """The trim as trace attributes (``attrs.TRIM_KEYS``)."""
        return dict(
            zip(A.TRIM_KEYS, (self.index, self.call_id, self.tool, self.tokens), strict=True)
        )


@dataclass(frozen=True, slots=True)
class Fit:
    """The outcome of fitting one request: the trims made, the estimate after them, the budget."""

    trims: tuple[Trim, ...]
    estimated: int
    budget: int

    @property
    def fits(self) -> bool:
        return self.estimated <= self.budget


def message_tokens(m: Message) -> int:
    """Estimated input tokens of one message (its text, tool calls' names and arguments)."""
    n = MESSAGE_OVERHEAD + count_tokens(m.content)
    for c in m.tool_calls:
        n += count_tokens(c.name) + count_tokens(c.arguments)
    return n


def specs_tokens(specs: tuple[ToolSpec, ...]) -> int:
    """Estimated tokens of the tool definitions a request carries."""
    return sum(
        count_tokens(
            orjson.dumps(
                {"name": s.name, "description": s.description, "parameters": s.parameters}
            ).decode()
        )
        for s in specs
    )


def window_of(tier: Tier) -> int | None:
    """The tier's context window: its own field, else a local tier's ``ctx_size``."""
    if tier.context_window:
        return tier.context_window
    return tier.local.ctx_size if tier.local is not None else None


class Window:
    """The context budget of one run: estimates requests, trims them, learns the ratio."""

    def __init__(self, window: int, reserve: int, specs: tuple[ToolSpec, ...]) -> None:
        self.window, self.reserve = window, reserve
        self.fixed = specs_tokens(specs)
        self.ratio = 1.0  # server-reported input tokens / our estimate, from the last call
        self._last_estimate = 0

    @classmethod
    def for_tier(cls, tier: Tier, specs: tuple[ToolSpec, ...]) -> Window | None:
        window = window_of(tier)
        if window is None:
            return None
        reserve = int(tier.options.get("max_output_tokens") or DEFAULT_RESERVE)
        return cls(window, min(reserve, window // 2), specs)

    @property
    def budget(self) -> int:
        return self.window - self.reserve

    def estimate(self, messages: list[Message]) -> int:
        """The request's estimated input tokens, scaled by the learned ratio."""
        raw = self.fixed + sum(map(message_tokens, messages))
        return round(raw * self.ratio)

    def fit(self, messages: list[Message]) -> Fit:
        """Trim ``messages`` in place, oldest tool output first, until the request fits."""
        sizes = [message_tokens(m) for m in messages]
        raw = self.fixed + sum(sizes)
        trims: list[Trim] = []
        for i, m in enumerate(messages):
            if round(raw * self.ratio) <= self.budget:
                break
            if m.role != "tool" or m.content.startswith(PLACEHOLDER[:22]):
                continue
            dropped = sizes[i] - MESSAGE_OVERHEAD
            new = replace(m, content=PLACEHOLDER.format(tokens=round(dropped * self.ratio)))
            messages[i] = new
            raw += message_tokens(new) - sizes[i]
            trims.append(Trim(i, m.tool_call_id, m.name, round(dropped * self.ratio)))
        self._last_estimate = raw
        return Fit(tuple(trims), round(raw * self.ratio), self.budget)

    def observe(self, input_tokens: int) -> None:
        """Learn from the server's count of the request last fitted (ratio never below 1)."""
        if input_tokens > 0 and self._last_estimate > 0:
            self.ratio = max(1.0, input_tokens / self._last_estimate)


def recorded_trims(trace: Trace) -> list[dict[str, Any]]:
    """The trims a loaded trace recorded, in order: ``step`` plus ``attrs.TRIM_KEYS`` each.

    From the ``context.trim`` events; a trace written before those events existed has the same
    list in its model spans' ``context.trimmed`` attribute.
    """
    spans = trace.spans
    found = [
        {A.STEP: spans[ev.span].step, **ev.attrs}
        for ev in trace.events
        if ev.name == A.EVENT_CONTEXT_TRIM and ev.span in spans
    ]
    if found or not trace.spans:
        return found
    for s in trace.of_kind("model"):
        trimmed = s.attrs.get(A.CONTEXT_TRIMMED)
        if isinstance(trimmed, list):
            found += [{A.STEP: s.step, **t} for t in trimmed if isinstance(t, dict)]
    return found
