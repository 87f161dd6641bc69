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
failed attempts as ``retry``/``wait`` and the rest as ``overhead``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

MODEL_PARTS = ("base", "reasoning", "decode", "tail", "wait", "retry", "overhead")
FRAMEWORK = "framework"  # run time on the critical path outside model and tool spans
IN_FLIGHT = "in_flight"  # spans still open when a killed run's trace stops


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

    @property
    def total(self) -> int:
        return (self.base + self.reasoning + self.decode + self.tail + self.wait + self.retry
                + self.overhead)

    def as_dict(self) -> dict[str, int]:
        return {"base": self.base, "reasoning": self.reasoning, "decode": self.decode,
                "tail": self.tail, "wait": self.wait, "retry": self.retry,
                "overhead": self.overhead}


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int | float) else 0


def model_parts(attrs: dict[str, Any], duration_ns: int, fallback_tps: float,
                failed: bool = False) -> ModelParts:
    """Attribute a finished model span of ``duration_ns`` from its end attributes.

    ``failed``: the span ended in error; without a successful attempt's timing its time (less
    any recorded back-off) is booked as ``retry``, the service time of failed attempts.
    """
    get = attrs.get
    n_in = _int(get("gen_ai.usage.input_tokens"))
    n_r = _int(get("gen_ai.usage.reasoning.output_tokens"))
    n_v = max(0, _int(get("gen_ai.usage.output_tokens")) - n_r)
    wait = retry = 0
    attempts = get("attempts")
    if attempts:
        for a in attempts:
            wait += a.get("wait_ns") or 0
            if a.get("error") is not None and a.get("t_end") is not None:
                retry += a["t_end"] - (a.get("t_start") or 0)
    else:
        wait = _int(get("wait_ns"))
    tm = get("timing") or {}
    t_send = tm.get("t_send")
    base = reasoning = decode = tail = 0
    tps = fallback_tps
    if t_send is not None:
        t_last, t_end = tm.get("t_last"), tm.get("t_end")
        first_vis = tm.get("t_first_visible")
        if first_vis is None:  # no visible output: everything up to the last event is pre-output
            first_vis = t_last if t_last is not None else t_end
        if first_vis is not None:
            ttv = max(0, first_vis - t_send)
            if t_last is not None:
                decode = max(0, t_last - first_vis)
            if n_v >= 2 and decode > 0:
                tps = (n_v - 1) * 1e9 / decode
            reasoning = min(ttv, round(n_r * 1e9 / tps)) if tps > 0 else 0
            base = ttv - reasoning
            if t_end is not None:
                tail = max(0, t_end - (t_last if t_last is not None else first_vis))
    if failed and t_send is None and retry == 0:
        retry = duration_ns - wait
    overhead = duration_ns - (base + reasoning + decode + tail + wait + retry)
    return ModelParts(base, reasoning, decode, tail, wait, retry, overhead, n_in, n_r, n_v, tps,
                      t_send is not None)


def tool_category(name: str, attrs: dict[str, Any]) -> str:
    """The category a tool span's time is booked under: ``tool:<name>``."""
    tool = attrs.get("gen_ai.tool.name")
    if not tool:
        tool = name.removeprefix("execute_tool ").strip() or "?"
    return f"tool:{tool}"
