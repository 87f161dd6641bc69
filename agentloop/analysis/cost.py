"""A recorded run's cost: its model spans at the recorded tier's prices, by category and step.

The formula is :mod:`agentloop.model.prices`; this is its tally over a trace, and how a report
prints it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentloop.model.prices import CATEGORIES, PER, Prices, cost_parts
from agentloop.trace.reader import Trace
from agentloop.trace.span_attrs import ModelAttrs


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """A run's (or a suite's) cost: total, by category, by step; ``priced`` False: no prices."""

    total_usd: float
    by_category: dict[str, float]
    by_step: dict[int, float]
    priced: bool
    placeholder: bool


def breakdown(model_attrs: Iterable[ModelAttrs | None], prices: Prices | None) -> CostBreakdown:
    """Cost of a run's model spans (their typed end attributes, ``SpanRecord.model``; None for
    a span still in flight) at ``prices``, by category and step."""
    cats = dict.fromkeys(CATEGORIES, 0.0)
    steps: dict[int, float] = {}
    if prices is None:
        return CostBreakdown(0.0, cats, steps, False, False)
    for a in model_attrs:
        if a is None:
            continue
        parts = cost_parts(
            prices, a.input_tokens, a.cached_input_tokens, a.reasoning_tokens, a.output_tokens
        )
        for k, v in parts.items():
            cats[k] += v
        step = a.step or 0
        steps[step] = steps.get(step, 0.0) + sum(parts.values())
    return CostBreakdown(sum(cats.values()), cats, steps, True, prices.placeholder)


def total_of_columns(usage: Any, prices: Prices) -> float:
    """:func:`breakdown`'s ``total_usd`` for a trace's columns (``Columns.usage``: a row per
    call, :data:`agentloop.analysis.columnar.USAGE_COLUMNS`): :func:`cost_parts` on arrays,
    each category summed call after call as the loop adds them (``cumsum`` adds in order), so
    the same float (a suite's thousand runs cost no Python call per model call)."""
    import numpy as np

    inp, cached_in, reasoning_in, output = (usage[:, k] for k in range(4))
    cached = np.minimum(np.maximum(0, cached_in), inp)
    reasoning = np.minimum(np.maximum(0, reasoning_in), output)
    cols = (
        (inp - cached) * prices.input / PER,
        cached * prices.cached_input / PER,
        reasoning * prices.output / PER,
        (output - reasoning) * prices.output / PER,
    )
    return sum(float(np.cumsum(v)[-1]) if len(v) else 0.0 for v in cols)


def of_trace(trace: Trace) -> CostBreakdown:
    """A loaded trace's cost: each model span at the prices of the tier it used (issue 23: the
    header lists every tier; an older trace has one, its ``tier``)."""
    from agentloop.analysis.agents import call_tier, recorded_tiers

    tiers = recorded_tiers(trace)
    spans = trace.of_kind("model")
    if len(tiers) <= 1:
        return breakdown((s.model for s in spans), trace.run.tier.prices)
    by_tier: dict[str, list[ModelAttrs | None]] = {}
    for s in spans:
        by_tier.setdefault(call_tier(trace, s.attrs, tiers), []).append(s.model)
    return merge([breakdown(ms, tiers[name].prices) for name, ms in by_tier.items()])


def merge(parts: list[CostBreakdown]) -> CostBreakdown:
    """Several breakdowns (one per tier) as one."""
    cats = dict.fromkeys(CATEGORIES, 0.0)
    steps: dict[int, float] = {}
    for b in parts:
        for k, v in b.by_category.items():
            cats[k] += v
        for k2, v in b.by_step.items():
            steps[k2] = steps.get(k2, 0.0) + v
    return CostBreakdown(
        sum(b.total_usd for b in parts),
        cats,
        steps,
        any(b.priced for b in parts),
        any(b.placeholder for b in parts),
    )


def render(b: CostBreakdown) -> str:
    """The cost lines of a report ("" when the run's tier had no prices)."""
    if not b.priced:
        return ""
    label = " (placeholder prices: not a real price list)" if b.placeholder else ""
    return "\n".join(
        [
            f"Cost at the tier's prices: ${b.total_usd:.6f}{label}",
            "  by category: " + ", ".join(f"{k} ${v:.6f}" for k, v in b.by_category.items()),
            "  by step:     " + ", ".join(f"{k}: ${v:.6f}" for k, v in sorted(b.by_step.items())),
        ]
    )


def as_json(b: CostBreakdown) -> dict[str, Any]:
    """The cost of a report as JSON (``priced`` False: the tier had no prices)."""
    return {
        "priced": b.priced,
        "placeholder": b.placeholder,
        "total_usd": b.total_usd,
        "by_category": b.by_category,
        "by_step": {str(k): v for k, v in sorted(b.by_step.items())},
    }
