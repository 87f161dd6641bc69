"""Every timing formula of a model call, in one place (docs/design.md, "Timing definitions").

From a call's instants (``t_send``, ``t_hdr``, ``t_first``, ``t_first_visible``, ``t_last``,
``t_end``) and the server's usage (``R`` reasoning tokens, ``V`` visible tokens):

- ``ttfb = t_hdr - t_send``; ``ttft = t_first - t_send`` (first event with a payload, hidden
  reasoning included); ``ttft_visible = t_first_visible - t_send``;
- ``decode = t_last - t_first_visible``; ``tpot = decode / (V - 1)`` for V >= 2;
  ``output_tps = 1 / tpot``; ``call = t_end - t_send``;
- the split of time to the first visible token: ``reasoning = R / output_tps`` (clamped to
  ``ttft_visible``), ``base = ttft_visible - reasoning`` (queue + network + prefill).

The runner writes :func:`call_metrics` into model spans, attribution splits spans with
:func:`split_ns`, the timeline draws them with :func:`phase_bounds`, the probe reports :func:`call_metrics` and :func:`base_seconds`. Nothing else
computes these: a metric has one name and one formula everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from agentloop.types import CallTiming, Usage


def seconds(start_ns: int | None, end_ns: int | None) -> float | None:
    """``end - start`` in seconds; None when either instant is missing."""
    return None if start_ns is None or end_ns is None else (end_ns - start_ns) / 1e9


def tpot_seconds(decode_s: float | None, visible_tokens: int) -> float | None:
    """Time per output token, ``decode / (V - 1)``: None without two visible tokens or decode."""
    if decode_s is None or decode_s <= 0 or visible_tokens < 2:
        return None
    return decode_s / (visible_tokens - 1)


def base_seconds(ttft_visible_s: float, reasoning_tokens: int, output_tps: float | None) -> float:
    """``ttft_visible - R / output_tps``: what is left of the wait for visible output once hidden
    reasoning (paced at the output speed) is taken out; no speed known: all of it."""
    if not output_tps or output_tps <= 0 or output_tps != output_tps:
        return ttft_visible_s
    return ttft_visible_s - min(ttft_visible_s, reasoning_tokens / output_tps)


@dataclass(frozen=True, slots=True)
class CallMetrics:
    """A call's derived figures in seconds (and tokens/s), each None where its instants are."""

    ttfb_s: float | None
    ttft_s: float | None
    ttft_visible_s: float | None
    decode_s: float | None
    tpot_s: float | None
    output_tps: float | None
    call_s: float | None
    tokens_per_chunk: float | None

    def as_dict(self) -> dict[str, float | None]:
        return asdict(self)


def call_metrics(t: CallTiming, u: Usage) -> CallMetrics:
    """The derived figures of one call from its instants and its usage."""
    decode = seconds(t.t_first_visible, t.t_last)
    tpot = tpot_seconds(decode, u.visible_tokens)
    return CallMetrics(
        ttfb_s=seconds(t.t_send, t.t_hdr),
        ttft_s=seconds(t.t_send, t.t_first),
        ttft_visible_s=seconds(t.t_send, t.t_first_visible),
        decode_s=decode,
        tpot_s=tpot,
        output_tps=(1 / tpot) if tpot else None,
        call_s=seconds(t.t_send, t.t_end),
        tokens_per_chunk=(u.output_tokens / t.chunks) if t.chunks else None,
    )


# a call is "measured under load" when its timing error bound (the client's own lateness,
# agentloop.clients._lag) passes this fraction of its decode time (of the whole call when it
# streamed fewer than two visible tokens): its output_tps may then be off by more than that
LATE_FRACTION = 0.02


def under_load(error_bound_s: float, decode_s: float | None, call_s: float | None) -> bool:
    """Whether a call's timing error bound passes :data:`LATE_FRACTION` of what it measures."""
    span = decode_s if decode_s else call_s
    return bool(span) and error_bound_s > LATE_FRACTION * span  # type: ignore[operator]


def late_fraction(error_bound_s: float, decode_s: float | None, call_s: float | None) -> float:
    """The bound as a fraction of what :func:`under_load` compares it to (0 when unknown)."""
    span = decode_s if decode_s else call_s
    return error_bound_s / span if span else 0.0


class SplitNs(NamedTuple):
    """The successful attempt's time split in integer ns (they add up to ``t_end - t_send``
    when every instant is there), and the output speed the split used."""

    base: int
    reasoning: int
    decode: int
    tail: int
    output_tps: float


def split_ns(
    t_send: int,
    t_first_visible: int | None,
    t_last: int | None,
    t_end: int | None,
    reasoning_tokens: int,
    visible_tokens: int,
    fallback_tps: float,
) -> SplitNs:
    """Split one timed call into base, reasoning, decode and tail (integer ns).

    ``output_tps`` is the call's own ``(V - 1) / decode`` when it streamed two visible tokens,
    else ``fallback_tps`` (the tier profile's). A call without visible output counts everything
    up to its last event as before output.
    """
    first_vis = t_first_visible
    if first_vis is None:
        first_vis = t_last if t_last is not None else t_end
    if first_vis is None:
        return SplitNs(0, 0, 0, 0, fallback_tps)
    ttv = max(0, first_vis - t_send)
    decode = max(0, t_last - first_vis) if t_last is not None else 0
    tps = (
        (visible_tokens - 1) * 1e9 / decode if visible_tokens >= 2 and decode > 0 else fallback_tps
    )
    reasoning = min(ttv, round(reasoning_tokens * 1e9 / tps)) if tps > 0 else 0
    tail = max(0, t_end - (t_last if t_last is not None else first_vis)) if t_end is not None else 0
    return SplitNs(ttv - reasoning, reasoning, decode, tail, tps)


PHASES = ("base", "reasoning", "decode", "tail")  # a timed call's stretches, in time order


def phase_bounds(
    t_send: int,
    t_first_visible: int | None,
    t_last: int | None,
    t_end: int | None,
    reasoning_tokens: int,
    visible_tokens: int,
    fallback_tps: float,
) -> tuple[tuple[str, int, int], ...]:
    """The split of :func:`split_ns` laid on the call's clock: ``(phase, start, end)`` for each of
    :data:`PHASES`, back to back from ``t_send`` (reasoning the stretch just before the first
    visible token, base the rest of the wait for it)."""
    s = split_ns(
        t_send, t_first_visible, t_last, t_end, reasoning_tokens, visible_tokens, fallback_tps
    )
    out, t = [], t_send
    for name, ns in zip(PHASES, s[:4], strict=True):
        out.append((name, t, t + ns))
        t += ns
    return tuple(out)
