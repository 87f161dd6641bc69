"""THE speed model: how long a model call takes on a tier, used by the simulator's pacing and by what-if.

A call with ``N`` input tokens (``C`` of them served from the server's prompt cache), ``R`` hidden
reasoning tokens and ``V`` visible output tokens takes

- ``base = base_latency_s + (N - C) / prefill_tps + C / cached_prefill_tps`` until the first
  output token (queue, network, prefill; a ``prefill_tps`` of 0 means prefill is not measured
  apart from the base; no ``cached_prefill_tps``: cached input costs nothing);
- then one time per output token, ``tpot(ctx) = 1 / output_tps + tpot_ms_per_1k * ctx / 1e6``
  for a token generated with ``ctx`` tokens already in context: llama.cpp's decode slows
  linearly as the context grows (attention reads every cached key), OpenAI-style endpoints
  show a slope of about 0 (the default, which makes ``output_tps`` the one speed of old profiles);
- hidden reasoning is the first ``R`` of those tokens (contexts ``N .. N + R - 1``); the first
  visible token ends the wait, and the measured decode spans the ``V - 1`` intervals after it
  (contexts ``N + R .. N + R + V - 2``).

Sums of ``tpot`` over consecutive contexts are closed-form (:func:`SpeedProfile.decode_s`), so
pacing and re-timing cost O(1) per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class CallParts(NamedTuple):
    """A call's predicted time split in seconds: until the first token, hidden reasoning, the
    ``V - 1`` intervals of visible decode."""

    base_s: float
    reasoning_s: float
    decode_s: float


@dataclass(frozen=True, slots=True)
class SpeedProfile:
    """How fast a tier answers (see the module docstring for the formula)."""

    base_latency_s: float
    prefill_tps: float
    output_tps: float  # at context 0 when tpot_ms_per_1k > 0
    cached_prefill_tps: float | None = None  # None: cached input tokens cost nothing
    tpot_ms_per_1k: float = 0.0  # time per output token grows this many ms per 1,000 context

    def prefill_s(self, input_tokens: int, cached_tokens: int = 0) -> float:
        """Prefill time: uncached input at ``prefill_tps``, cached input at its own rate."""
        cached = min(max(0, cached_tokens), max(0, input_tokens))
        fresh = max(0, input_tokens) - cached
        out = fresh / self.prefill_tps if self.prefill_tps > 0 else 0.0
        if cached and self.cached_prefill_tps:
            out += cached / self.cached_prefill_tps
        return out

    def first_token_s(self, input_tokens: int, cached_tokens: int = 0) -> float:
        """``base``: the wait before the first output token (hidden or visible)."""
        return self.base_latency_s + self.prefill_s(input_tokens, cached_tokens)

    def tpot_s(self, context: float) -> float:
        """Time per output token generated with ``context`` tokens in context."""
        return 1.0 / self.output_tps + self.tpot_ms_per_1k * max(0.0, context) / 1e6

    def decode_s(self, context: int, n: int) -> float:
        """Time of ``n`` output tokens generated one after another from ``context`` on:
        ``sum(tpot(context + i) for i in range(n))``, closed-form."""
        if n <= 0:
            return 0.0
        k = self.tpot_ms_per_1k / 1e6
        return n / self.output_tps + k * (n * max(0, context) + n * (n - 1) / 2)

    def parts(
        self, input_tokens: int, reasoning_tokens: int, visible_tokens: int, cached_tokens: int = 0
    ) -> CallParts:
        """The call's base, reasoning and visible decode (``V - 1`` intervals), in seconds."""
        r = max(0, reasoning_tokens)
        return CallParts(
            self.first_token_s(input_tokens, cached_tokens),
            self.decode_s(input_tokens, r),
            self.decode_s(input_tokens + r, max(0, visible_tokens - 1)),
        )

    def call_seconds(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """Whole call, first token to last: base plus ``output_tokens`` token times."""
        return self.first_token_s(input_tokens, cached_tokens) + self.decode_s(
            input_tokens, output_tokens
        )

    def tps_at(self, context: float) -> float:
        """Output tokens per second at ``context`` tokens of context."""
        return 1.0 / self.tpot_s(context)


def fit_decode(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(output_tps at context 0, tpot_ms_per_1k)`` from measured ``(context, output_tps)``
    pairs: a least-squares line through ``tpot = 1 / tps`` against context, its slope clamped
    at 0 (noise must not make a long context look faster). One point: that speed, no slope."""
    pts = [(c, 1.0 / t) for c, t in points if t > 0 and t == t]
    if not pts:
        raise ValueError("fit_decode needs at least one measured speed")
    n = len(pts)
    mc = sum(c for c, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    var = sum((c - mc) ** 2 for c, _ in pts)
    slope = max(0.0, sum((c - mc) * (t - mt) for c, t in pts) / var) if var > 0 else 0.0
    tpot0 = mt - slope * mc
    if tpot0 <= 0:  # a steep fit through noisy points: keep the mean, drop the slope
        tpot0, slope = mt, 0.0
    return 1.0 / tpot0, slope * 1e6
