"""Small statistics for suite reports: quantiles, medians, and bootstrap confidence intervals."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

BOOTSTRAP_ROUNDS = 2000
BOOTSTRAP_SEED = 14  # fixed: the same folders give the same intervals


def quantile(xs: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) with linear interpolation between order statistics."""
    if not xs:
        return None
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread(xs: Sequence[float]) -> dict[str, float | None]:
    """Median and p10 / p90 of ``xs`` (None when empty)."""
    return {"median": quantile(xs, 0.5), "p10": quantile(xs, 0.1), "p90": quantile(xs, 0.9)}


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def bootstrap_ci(
    stat: Callable[[list[int]], float], n: int, level: float = 0.95, rounds: int = BOOTSTRAP_ROUNDS
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over ``n`` items (``stat`` gets the resampled
    indices); one item gives a zero-width interval at its value."""
    rng = random.Random(BOOTSTRAP_SEED)
    if n <= 1:
        v = stat(list(range(n)))
        return v, v
    vals = [stat([rng.randrange(n) for _ in range(n)]) for _ in range(rounds)]
    a = (1 - level) / 2
    lo, hi = quantile(vals, a), quantile(vals, 1 - a)
    assert lo is not None and hi is not None
    return lo, hi
