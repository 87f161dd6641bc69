"""The one cost formula: what model calls cost at a tier's prices, per call, category and step.

A tier may give ``prices`` in USD per million tokens: ``input`` (uncached input), ``cached_input``
and ``output`` (hidden reasoning and visible output alike, as providers bill them). A call costs

    ((input_tokens - cached_input_tokens) * input + cached_input_tokens * cached_input
     + output_tokens * output) / 1e6

with ``input_tokens`` counting the cached ones too (the OpenAI usage convention). The runner puts
this on every model span as ``cost_usd`` (None when the tier has no prices); reports split it by
category (input, cached input, reasoning, visible output) and by step with :func:`cost_parts`,
so the parts always add up to the span's ``cost_usd``. ``placeholder`` marks prices that are
not a real price list (the shipped tiers): every report that shows cost says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentloop.ending import Ending
from agentloop.trace import attrs as A

CATEGORIES = ("input", "cached_input", "reasoning", "output")
PER = 1e6  # prices are per million tokens


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens; ``placeholder``: not a real price list, reports say so."""

    input: float
    cached_input: float
    output: float
    placeholder: bool = False

    def summary(self) -> dict[str, Any]:
        """As written into a trace header's tier."""
        return {
            "input": self.input,
            "cached_input": self.cached_input,
            "output": self.output,
            "placeholder": self.placeholder,
        }

    @classmethod
    def from_summary(cls, data: Mapping[str, Any] | None) -> Prices | None:
        """Back from a trace header (None when the tier had no prices)."""
        if not data:
            return None
        return cls(
            float(data["input"]),
            float(data["cached_input"]),
            float(data["output"]),
            bool(data.get("placeholder", False)),
        )


def cost_parts(
    prices: Prices,
    input_tokens: int,
    cached_input_tokens: int,
    reasoning_tokens: int,
    output_tokens: int,
) -> dict[str, float]:
    """One call's cost in USD by category; ``output_tokens`` includes the reasoning ones."""
    cached = min(max(0, cached_input_tokens), input_tokens)
    reasoning = min(max(0, reasoning_tokens), output_tokens)
    return {
        "input": (input_tokens - cached) * prices.input / PER,
        "cached_input": cached * prices.cached_input / PER,
        "reasoning": reasoning * prices.output / PER,
        "output": (output_tokens - reasoning) * prices.output / PER,
    }


def call_cost(
    prices: Prices | None, input_tokens: int, cached_input_tokens: int, output_tokens: int
) -> float | None:
    """One call's cost in USD (None without prices): the sum of :func:`cost_parts`."""
    if prices is None:
        return None
    return sum(cost_parts(prices, input_tokens, cached_input_tokens, 0, output_tokens).values())


def _tokens(attrs: Mapping[str, Any], key: str) -> int:
    v = attrs.get(key)
    return int(v) if isinstance(v, int | float) else 0


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """A run's (or a suite's) cost: total, by category, by step; ``priced`` False: no prices."""

    total_usd: float
    by_category: dict[str, float]
    by_step: dict[int, float]
    priced: bool
    placeholder: bool


def breakdown(model_attrs: Iterable[Mapping[str, Any]], prices: Prices | None) -> CostBreakdown:
    """Cost of a run's model spans (their end attributes) at ``prices``, by category and step."""
    cats = dict.fromkeys(CATEGORIES, 0.0)
    steps: dict[int, float] = {}
    if prices is None:
        return CostBreakdown(0.0, cats, steps, False, False)
    for a in model_attrs:
        parts = cost_parts(
            prices,
            _tokens(a, A.GEN_AI_USAGE_INPUT_TOKENS),
            _tokens(a, A.GEN_AI_USAGE_CACHED_INPUT_TOKENS),
            _tokens(a, A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS),
            _tokens(a, A.GEN_AI_USAGE_OUTPUT_TOKENS),
        )
        for k, v in parts.items():
            cats[k] += v
        step = _tokens(a, A.STEP)
        steps[step] = steps.get(step, 0.0) + sum(parts.values())
    return CostBreakdown(sum(cats.values()), cats, steps, True, prices.placeholder)


def check_limit(max_cost_usd: float | None, spent_usd: float) -> Ending | None:
    """The run's ending (status budget) once ``spent_usd`` is past the task's ``max_cost_usd``."""
    if max_cost_usd is not None and spent_usd > max_cost_usd:
        return Ending.limit_reached(
            "cost",
            f"cost limit of ${max_cost_usd:g} reached "
            f"(${spent_usd:.6f} spent at the tier's prices)",
        )
    return None


def of_trace(trace: Any) -> CostBreakdown:
    """A loaded trace's cost: its model spans at the prices its header's tier recorded."""
    prices = Prices.from_summary((trace.header.get("tier") or {}).get("prices"))
    return breakdown((s.attrs for s in trace.of_kind("model")), prices)


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
