"""The typed end attributes of model and tool spans: :class:`ModelAttrs`, :class:`ToolAttrs`, their parts.

Values only: :mod:`agentloop.trace.span_attrs` builds them from a record's attributes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Attempt", "ModelAttrs", "ModelOutput", "OutputToolCall", "Timing", "ToolAttrs"]


class Timing(NamedTuple):
    """Run-clock ns of a model call's successful attempt (``attrs.timing``)."""

    t_send: int
    t_hdr: int | None
    t_first: int | None
    t_first_visible: int | None
    t_last: int | None
    t_end: int | None
    chunks: int
    build_ns: int


class Attempt(NamedTuple):
    """One try of a model call, run-clock ns (``attrs.attempts[i]``)."""

    t_start: int | None
    t_end: int | None
    error: str | None
    status: int | None
    wait_ns: int


class OutputToolCall(NamedTuple):
    id: str
    name: str
    arguments: str  # JSON text


class ModelOutput(NamedTuple):
    """What the model said (``attrs.output``): enough to replay the turn."""

    text: str
    reasoning_tokens: int
    tool_calls: tuple[OutputToolCall, ...]


class ModelAttrs(NamedTuple):
    """A finished model span's end attributes, typed."""

    step: int | None
    input_tokens: int
    output_tokens: int  # includes reasoning
    reasoning_tokens: int
    cached_input_tokens: int
    timing: Timing | None  # None: no attempt succeeded (or a cut-short trace)
    attempts: tuple[Attempt, ...]
    wait_ns: int
    output: ModelOutput | None
    # the client's own lateness (issue 28): None / False in a trace that did not measure it
    timing_error_s: float | None = None
    under_load: bool = False

    @property
    def visible_tokens(self) -> int:
        return max(0, self.output_tokens - self.reasoning_tokens)


class ToolAttrs(NamedTuple):
    """A finished tool span's end attributes, typed."""

    name: str
    call_id: str
    arguments: str
    ok: bool
    output: str
    data: dict[str, Any]
    queued_ns: int  # waited for the max_parallel_tools bound before the span opened
