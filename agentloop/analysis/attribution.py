"""Splits one model span's time into base, reasoning, decode, tail, wait, retry and overhead.

The formulas are those of docs/design.md, in integer nanoseconds so that the parts of a span add
up exactly to its duration:

- ``reasoning = R / output_tps`` (hidden reasoning elapses before the first visible token),
  clamped to ``ttft_visible``; ``output_tps`` is the span's own ``(V - 1) / decode`` when it
  streamed at least two visible tokens, else the tier profile's ``output_tps`` from the trace
  header (``fallback_tps``);
- ``base = ttft_visible - reasoning`` (queue + network + prefill: reasoning is never booked here);
- ``decode = t_last - t_first_visible``; ``tail = t_end - t_last``;
- ``wait`` = back-off sleeps between attempts; ``retry`` = service time of failed attempts;
- ``overhead`` = the rest of the span (request building, client bookkeeping).

A span without timing (the call failed for good, or the trace was cut inside it) books its
failed attempts as ``retry``/``wait`` and the rest as ``overhead``. The split of a timed call
is :func:`agentloop.model.timing.split_ns`; this module books its parts.

Tool time is booked as ``tool:<name>``; the wait for the ``max_parallel_tools`` bound before a
tool span opens (its ``queued_ns``) as ``tool_queue``, not as framework time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from agentloop.model.timing import split_ns
from agentloop.trace.attrs import GEN_AI_TOOL_NAME
from agentloop.trace.fields import Where
from agentloop.trace.span_attrs import ModelAttrs, ToolAttrs, model_attrs

MODEL_PARTS = ("base", "reasoning", "decode", "tail", "wait", "retry", "overhead")
FRAMEWORK = "framework"  # run time on the critical path outside model and tool spans
TOOL_QUEUE = "tool_queue"  # a tool call waiting for the max_parallel_tools bound (queued_ns)
IN_FLIGHT = "in_flight"  # spans still open when a killed run's trace stops
_UNTYPED = Where("<span attributes>", 0)


class ModelParts(NamedTuple):
    """One model span's time split (ns) and the token counts the what-if formulas need.

    A NamedTuple rather than a frozen dataclass: a big trace makes hundreds of thousands of
    these and a frozen dataclass's ``__init__`` costs several times more per instance.
    """

    base: int
    reasoning: int
    decode: int
    tail: int
    wait: int
    retry: int
    overhead: int
    input_tokens: int
    reasoning_tokens: int
    visible_tokens: int
    output_tps: float  # measured, or the fallback when fewer than two visible tokens
    timed: bool  # a successful attempt's timing was recorded (else nothing to re-time)
    cached_tokens: int = 0  # input tokens the server served from its prompt cache

    @property
    def total(self) -> int:
        return (
            self.base
            + self.reasoning
            + self.decode
            + self.tail
            + self.wait
            + self.retry
            + self.overhead
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "base": self.base,
            "reasoning": self.reasoning,
            "decode": self.decode,
            "tail": self.tail,
            "wait": self.wait,
            "retry": self.retry,
            "overhead": self.overhead,
        }


def model_parts(
    m: ModelAttrs | Mapping[str, Any] | None,
    duration_ns: int,
    fallback_tps: float,
    failed: bool = False,
) -> ModelParts:
    """Attribute a finished model span of ``duration_ns`` from its typed end attributes
    (``SpanRecord.model``; raw attributes are typed first).

    ``failed``: the span ended in error; without a successful attempt's timing its time (less
    the recorded back-off, booked as ``wait``) is the ``retry`` service time of failed attempts.
    """
    if m is None:
        m = model_attrs({}, _UNTYPED)
    elif not isinstance(m, ModelAttrs):
        m = model_attrs(m, _UNTYPED)
    wait = retry = 0
    if m.attempts:
        for a in m.attempts:
            wait += a.wait_ns
            if a.error is not None and a.t_end is not None:
                retry += a.t_end - (a.t_start or 0)
    else:
        wait = m.wait_ns
    n_r, n_v = m.reasoning_tokens, m.visible_tokens
    tm = m.timing
    if tm is not None:
        base, reasoning, decode, tail, tps = split_ns(
            tm.t_send, tm.t_first_visible, tm.t_last, tm.t_end, n_r, n_v, fallback_tps
        )
    else:
        base = reasoning = decode = tail = 0
        tps = fallback_tps
        if failed and retry == 0:
            retry = duration_ns - wait
    overhead = duration_ns - (base + reasoning + decode + tail + wait + retry)
    return ModelParts(
        base,
        reasoning,
        decode,
        tail,
        wait,
        retry,
        overhead,
        m.input_tokens,
        n_r,
        n_v,
        tps,
        tm is not None,
        m.cached_input_tokens,
    )


def tool_category(name: str, tool: ToolAttrs | Mapping[str, Any] | None) -> str:
    """The category a tool span's time is booked under: ``tool:<name>``."""
    if isinstance(tool, ToolAttrs):
        return f"tool:{tool.name}"
    label = (tool or {}).get(GEN_AI_TOOL_NAME)
    if not label or type(label) is not str:
        label = name.removeprefix("execute_tool ").strip() or "?"
    return f"tool:{label}"
