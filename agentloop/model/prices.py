"""The one cost formula: what a model call costs at a tier's prices, split by token category.

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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

CATEGORIES = ("input", "cached_input", "reasoning", "output")
PER = 1e6  # prices are per million tokens


class PricesRecord(TypedDict):
    """:class:`Prices` as a trace header's tier records them."""

    input: float
    cached_input: float
    output: float
    placeholder: bool


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens; ``placeholder``: not a real price list, reports say so."""

    input: float
    cached_input: float
    output: float
    placeholder: bool = False

    def summary(self) -> PricesRecord:
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
