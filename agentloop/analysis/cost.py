"""A recorded run's cost: its model spans at the recorded tier's prices, by category and step.

The formula is :mod:`agentloop.model.prices`; this is its tally over a trace, and how a report
prints it. A step is named as the report's steps table names it
(:func:`agentloop.analysis.agents.step_text`): "3" for the main agent's third, "logs#2:1" for
the first step of sub-agent logs' second invocation, so each agent's calls are its own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
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
    by_step: dict[str, float]  # step label (module docstring) -> USD, in step_order
    priced: bool
    placeholder: bool


def breakdown(
    model_attrs: Iterable[ModelAttrs | None],
    prices: Prices | None,
    labels: Iterable[str] | None = None,
) -> CostBreakdown:
    """Cost of a run's model spans (their typed end attributes, ``SpanRecord.model``; None for
    a span still in flight) at ``prices``, by category and step; ``labels``: each span's step
    label (:func:`step_label`), else its step number (one agent's run)."""
    cats = dict.fromkeys(CATEGORIES, 0.0)
    steps: dict[str, float] = {}
    if prices is None:
        return CostBreakdown(0.0, cats, steps, False, False)
    attrs = list(model_attrs)
    names = list(labels) if labels is not None else [str(a.step or 0) if a else "" for a in attrs]
    for a, step in zip(attrs, names, strict=True):
        if a is None:
            continue
        parts = cost_parts(
            prices, a.input_tokens, a.cached_input_tokens, a.reasoning_tokens, a.output_tokens
        )
        for k, v in parts.items():
            cats[k] += v
        steps[step] = steps.get(step, 0.0) + sum(parts.values())
    return CostBreakdown(sum(cats.values()), cats, _ordered(steps), True, prices.placeholder)


def step_label(start_attrs: Mapping[str, Any]) -> str:
    """A model span's step as the report names it, from its start attributes ("0": none)."""
    from agentloop.analysis.agents import step_text

    return step_text(start_attrs, "0")


def step_order(label: str) -> tuple[int, str, int, int]:
    """Sort key of step labels: the main agent's steps by number, then each sub-agent's
    invocations and steps by name, invocation and number."""
    from agentloop.analysis.agents import sub_run_step

    if label.isdigit():
        return (0, "", 0, int(label))
    sub = sub_run_step(label)
    return (2, label, 0, 0) if sub is None else (1, *sub)


def _ordered(steps: Mapping[str, float]) -> dict[str, float]:
    return dict(sorted(steps.items(), key=lambda kv: step_order(kv[0])))


def total_of_columns(usage: Any, prices: Prices) -> float:
    """:func:`breakdown`'s ``total_usd`` for a trace's columns (``Columns.usage``: a row per
    call, :data:`agentloop.analysis.columnar.USAGE_COLUMNS`): :func:`cost_parts` on arrays,
    each category summed call after call as the loop adds them (``cumsum`` adds in order), so
    the same float (a suite's thousand runs cost no Python call per model call)."""
    import numpy as np

    cols = call_parts(prices, usage)
    return sum(float(np.cumsum(v)[-1]) if len(v) else 0.0 for v in cols)


def of_trace(trace: Trace) -> CostBreakdown:
    """A loaded trace's cost: each model span at the prices of the tier it used (issue 23: the
    header lists every tier; an older trace has one, its ``tier``)."""
    from agentloop.analysis.agents import call_tier, recorded_tiers

    tiers = recorded_tiers(trace)
    spans = trace.of_kind("model")
    if len(tiers) <= 1:
        labels = [step_label(s.start_attrs) for s in spans]
        return breakdown((s.model for s in spans), trace.run.tier.prices, labels)
    by_tier: dict[str, tuple[list[ModelAttrs | None], list[str]]] = {}
    for s in spans:
        ms, names = by_tier.setdefault(call_tier(trace, s.attrs, tiers), ([], []))
        ms.append(s.model)
        names.append(step_label(s.start_attrs))
    return merge([breakdown(ms, tiers[t].prices, names) for t, (ms, names) in by_tier.items()])


def merge(parts: list[CostBreakdown]) -> CostBreakdown:
    """Several breakdowns (one per tier) as one."""
    cats = dict.fromkeys(CATEGORIES, 0.0)
    steps: dict[str, float] = {}
    for b in parts:
        for k, v in b.by_category.items():
            cats[k] += v
        for k2, v in b.by_step.items():
            steps[k2] = steps.get(k2, 0.0) + v
    return CostBreakdown(
        sum(b.total_usd for b in parts),
        cats,
        _ordered(steps),
        any(b.priced for b in parts),
        any(b.placeholder for b in parts),
    )


def render(b: CostBreakdown) -> str:
    """The cost lines of a report ("" when the run's tier had no prices)."""
    from agentloop.analysis.agents import sub_run_step

    if not b.priced:
        return ""
    label = " (placeholder prices: not a real price list)" if b.placeholder else ""
    # the main agent's steps on one line, each sub-agent invocation's on its own
    runs: dict[str, list[str]] = {}
    for k, v in b.by_step.items():
        sub = sub_run_step(k)
        who, step = ("", k) if sub is None else (f"{sub[0]}#{sub[1]}", str(sub[2]))
        runs.setdefault(who, []).append(f"{step}: ${v:.6f}")
    lines = [
        f"Cost at the tier's prices: ${b.total_usd:.6f}{label}",
        "  by category: " + ", ".join(f"{k} ${v:.6f}" for k, v in b.by_category.items()),
    ]
    for who, items in runs.items():
        lines.append(f"  by step{' of ' + who if who else ''}: ".ljust(15) + ", ".join(items))
    return "\n".join(lines)


def as_json(b: CostBreakdown) -> dict[str, Any]:
    """The cost of a report as JSON (``priced`` False: the tier had no prices)."""
    return {
        "priced": b.priced,
        "placeholder": b.placeholder,
        "total_usd": b.total_usd,
        "by_category": b.by_category,
        "by_step": dict(b.by_step),
    }


def in_order_sums(values: Any, groups: Any, n: int) -> Any:
    """For each of ``n`` groups, ``0.0`` plus its ``values`` one after another (an array per
    call, a group code each): the float a loop adding them in order gives, to the bit (numpy's
    ``sum`` adds pairwise, ``cumsum`` in order)."""
    import numpy as np

    out = np.zeros(n, np.float64)
    if not len(values):
        return out
    order = np.argsort(groups, kind="stable")
    v = values[order]
    cnt = np.bincount(groups, minlength=n)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(cnt, out=off[1:])
    big = cnt > 32  # a long group: its own cumsum; the short ones rank by rank, all at once
    for k in np.flatnonzero(big).tolist():
        out[k] = 0.0 + np.cumsum(v[off[k] : off[k + 1]])[-1]
    small = ~big & (cnt > 0)
    for r in range(int(cnt[small].max()) if small.any() else 0):
        live = small & (cnt > r)
        out[live] += v[off[:-1][live] + r]
    return out


def _call_sums(parts: list[Any]) -> Any:
    """``sum(cost_parts(...).values())`` per call, from the four parts' arrays: the builtin
    ``sum``'s own arithmetic (in order until Python 3.12, compensated from 3.12 on)."""
    import numpy as np

    f = 0.0 + parts[0]
    if sys.version_info < (3, 12):
        for x in parts[1:]:
            f = f + x
        return f
    comp = np.zeros_like(f)
    for x in parts[1:]:
        t = f + x
        comp += np.where(np.abs(f) >= np.abs(x), (f - t) + x, (x - t) + f)
        f = t
    return np.where((comp != 0) & np.isfinite(comp), f + comp, f)


def call_parts(prices: Prices, usage: Any) -> list[Any]:
    """:func:`cost_parts` on arrays (rows: input, cached input, reasoning, output tokens), as
    :data:`CATEGORIES` arrays: the same float operations, so the same bits."""
    import numpy as np

    inp, cached_in, reasoning_in, output = (usage[:, k] for k in range(4))
    cached = np.minimum(np.maximum(0, cached_in), inp)
    reasoning = np.minimum(np.maximum(0, reasoning_in), output)
    return [
        (inp - cached) * prices.input / PER,
        cached * prices.cached_input / PER,
        reasoning * prices.output / PER,
        (output - reasoning) * prices.output / PER,
    ]


def _breakdown_of_rows(
    usage: Any, labels: Any, names: list[str], prices: Prices | None
) -> CostBreakdown:
    """:func:`breakdown` of usage rows with their step labels' codes into ``names``."""
    import numpy as np

    cats = dict.fromkeys(CATEGORIES, 0.0)
    if prices is None:
        return CostBreakdown(0.0, cats, {}, False, False)
    parts = call_parts(prices, usage)
    for k, v in zip(CATEGORIES, parts, strict=True):
        cats[k] = 0.0 + float(np.cumsum(v)[-1]) if len(v) else 0.0
    per = in_order_sums(_call_sums(parts), labels, len(names))
    seen = np.flatnonzero(np.bincount(labels, minlength=len(names)))
    steps = {names[k]: float(per[k]) for k in seen.tolist()}
    return CostBreakdown(sum(cats.values()), cats, _ordered(steps), True, prices.placeholder)


def of_columns(c: Any, header: Any) -> CostBreakdown:
    """:func:`of_trace` from a trace's columns (``Columns.calls`` and ``usage``) and its typed
    header: the same breakdown, on arrays."""
    import numpy as np

    from agentloop.analysis.columnar import CALL_COLUMNS

    tiers = {t.name: t for t in header.all_tiers}
    tier, label = c.calls[:, CALL_COLUMNS.index("tier")], c.calls[:, CALL_COLUMNS.index("label")]
    used = c.calls[:, -1] == 1
    names = c.call_names["label"]
    if len(tiers) <= 1:
        return _breakdown_of_rows(c.usage, label[used], names, header.tier.prices)
    _, first = np.unique(tier, return_index=True)
    parts = []
    for t in tier[np.sort(first)].tolist():  # the tiers in first-use order
        mine = tier[used] == t
        name = c.call_names["tier"][t]
        parts.append(
            _breakdown_of_rows(c.usage[mine], label[used][mine], names, tiers[name].prices)
        )
    return merge(parts)
