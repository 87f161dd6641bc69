"""A recorded run's cost: its model spans at the recorded tier's prices, by category and step.

The formula is :mod:`agentloop.model.prices`; this is its tally over a trace, and how a report
prints it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentloop.model.prices import CATEGORIES, Prices, cost_parts
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


def of_trace(trace: Trace) -> CostBreakdown:
    """A loaded trace's cost: its model spans at the prices its header's tier recorded."""
    return breakdown((s.model for s in trace.of_kind("model")), trace.run.tier.prices)


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
