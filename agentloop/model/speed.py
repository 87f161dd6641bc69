"""THE speed model: how long a model call takes on a tier, used by the simulator's pacing and by what-if.

A call with ``N`` input tokens (``C`` of them served from the server's prompt cache), ``R`` hidden
reasoning tokens and ``V`` visible output tokens takes

- ``base = base_latency_s + prefill(F, C)`` until the first output token (queue, network,
  prefill), where the ``F = N - C`` uncached tokens are prefilled after the ``C`` cached ones:
  ``prefill(F, C) = F / prefill_tps + prefill_ms_per_1k * F * (C + F / 2) / 1e6``; each fresh
  token's cost grows with the context it attends to, like a decoded token's (a ``prefill_tps``
  of 0 means prefill is not measured apart from the base). Cached tokens cost nothing of their
  own (llama.cpp keeps their keys; they only make the fresh tokens' context longer), unless the
  profile gives ``cached_prefill_tps`` (then ``C / cached_prefill_tps`` more);
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
    prefill_ms_per_1k: float = 0.0  # time per prefilled token grows this many ms per 1,000 context

    def prefill_s(self, input_tokens: int, cached_tokens: int = 0) -> float:
        """Prefill time of the uncached input after the cached prefix (module docstring)."""
        cached = min(max(0, cached_tokens), max(0, input_tokens))
        fresh = max(0, input_tokens) - cached
        out = fresh / self.prefill_tps if self.prefill_tps > 0 else 0.0
        if self.prefill_ms_per_1k:
            out += self.prefill_ms_per_1k * fresh * (cached + fresh / 2) / 1e6
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


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def _nnls(rows: list[list[float]], y: list[float]) -> list[float]:
    """Least squares with every coefficient >= 0, for a handful of columns: the best fit over
    the subsets of columns whose unconstrained solution is non-negative."""
    k = len(rows[0])
    best: tuple[float, list[float]] = (sum(v * v for v in y), [0.0] * k)
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        ata = [[sum(r[i] * r[j] for r in rows) for j in cols] for i in cols]
        aty = [sum(r[i] * v for r, v in zip(rows, y, strict=True)) for i in cols]
        sol = _solve(ata, aty)
        if sol is None or any(c < 0 for c in sol):
            continue
        coef = [0.0] * k
        for j, c in zip(cols, sol, strict=True):
            coef[j] = c
        res = sum(
            (v - sum(c * x for c, x in zip(coef, r, strict=True))) ** 2
            for r, v in zip(rows, y, strict=True)
        )
        if res < best[0] - 1e-15:
            best = (res, coef)
    return best[1]


def fit_prefill(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """``(base_latency_s, prefill_tps, prefill_ms_per_1k)`` from measured ``(fresh, cached,
    seconds before the first token)`` triples: non-negative least squares of
    ``seconds = base + fresh / prefill_tps + prefill_ms_per_1k * fresh * (cached + fresh / 2)
    / 1e6``. Prompts of two sizes and one behind a cached prefix determine all three; a
    ``prefill_tps`` of 0 means the input's size did not show in the wait."""
    if not points:
        raise ValueError("fit_prefill needs at least one measured wait")
    rows = [[1.0, f, f * (c + f / 2) / 1e6] for f, c, _ in points]
    base, per_token, slope = _nnls(rows, [s for _, _, s in points])
    return base, (1.0 / per_token if per_token > 0 else 0.0), slope
