"""Critical-path time per category and per step: what report, what-if and compare tally.

A critical path (recorded or re-timed) is read as the leaves it passes (model and tool spans:
their own time) and framework gaps (everything else), owned by the step they fall in. Model
leaves are split by :mod:`agentloop.analysis.attribution` (or by re-timed parts), tool leaves
book ``tool:<name>``, the part of a tool's start gap spent waiting for the ``max_parallel_tools``
bound books ``tool_queue``, the other gaps ``framework``. The sums are exact: categories (and
steps) add up to the path's end-to-end time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from operator import not_

from agentloop.analysis.agents import step_text
from agentloop.analysis.attribution import (
    FRAMEWORK,
    IN_FLIGHT,
    MODEL_PARTS,
    TOOL_QUEUE,
    tool_category,
)
from agentloop.analysis.flat import Graph
from agentloop.analysis.passes import chase, critical_path
from agentloop.trace import attrs as A
from agentloop.trace.attrs import STEP

MODEL_CATS = frozenset(MODEL_PARTS)

__all__ = [
    "MODEL_CATS",
    "category_order",
    "path_breakdown",
    "path_tally",
    "ratio_of",
    "step_label",
    "step_labels",
]


def ratio_of(measured: int, predicted: int) -> float:
    """``measured / predicted``; 1 for an empty run, infinity when nothing is left."""
    if predicted > 0:
        return measured / predicted
    return math.inf if measured > 0 else 1.0


def path_breakdown(
    g: Graph, segments: list[tuple[int, int, bool]], parts: dict[int, tuple[int, int, int]] | None
) -> tuple[dict[str, int], dict[int, int]]:
    """Critical-path ns per category and per step (step span index, -1 for run level).

    ``parts`` are the re-timed (base, reasoning, decode) of model spans; None: as measured.
    """
    if not segments:
        return {}, {}
    idx, nss, gaps = zip(*segments, strict=True)
    step_of = g.step_of
    owners = [step_of[i] if i >= 0 else -1 for i in idx]
    leaves = list(itertools.compress(zip(idx, nss, strict=True), map(not_, gaps)))
    return _tally(
        g,
        zip(owners, nss, strict=True),
        [i for i, _ in leaves],
        [ns for _, ns in leaves],
        sum(itertools.compress(nss, gaps)),
        parts,
    )


def path_tally(
    g: Graph,
    V: list[int],
    back: list[int],
    dur: list[int],
    total: int,
    parts: dict[int, tuple[int, int, int]] | None,
) -> tuple[dict[str, int], dict[int, int]]:
    """:func:`path_breakdown` of the critical path of instants V (with their links ``back``,
    :func:`retime_path`) that the durations ``dur`` gave, without building its segments: a
    path can have a million.

    A leaf's segment is its duration; every other segment is framework time, so their sum is
    what the leaves leave of the path's total; per step the segments telescope.
    """
    if not g.roots:
        return path_breakdown(g, critical_path(g, [], [], total), parts)
    groups, leaves = chase(g, V, back, total)
    leaf_ns = list(map(dur.__getitem__, leaves))
    return _tally(g, groups, leaves, leaf_ns, total - g.start_ns - sum(leaf_ns), parts)


def _tally(
    g: Graph,
    owned: Iterable[tuple[int, int]],
    leaves: list[int],
    leaf_ns: list[int],
    gap_ns: int,
    parts: dict[int, tuple[int, int, int]] | None,
) -> tuple[dict[str, int], dict[int, int]]:
    """Categories and steps from (step, ns) pairs, the leaves on the path with their ns, and
    the framework time of the path's other segments."""
    steps = _steps_of(list(owned))
    is_model = list(map(g.models.__contains__, leaves))
    on_path = list(itertools.compress(leaves, is_model))
    others = list(itertools.compress(leaves, map(not_, is_model)))
    other_ns = list(itertools.compress(leaf_ns, map(not_, is_model)))
    cats = _other_cats(g, others, other_ns)
    if on_path:
        _model_cats(g, on_path, parts, cats)
    # every leaf's start gap is on the path with it: the queued part of a tool's is its own
    queued = sum(map(g.queue.__getitem__, leaves))
    if queued:
        cats[TOOL_QUEUE] = queued
    cats[FRAMEWORK] = cats.get(FRAMEWORK, 0) + gap_ns - queued
    return cats, steps


def _steps_of(owned: list[tuple[int, int]]) -> dict[int, int]:
    """The path's ns per step from its (step, ns) segments in path order."""
    if len(owned) > 1 and owned[0][0] == owned[-1][0]:  # run level at both ends of the path
        owned = [(owned[0][0], owned[0][1] + owned[-1][1]), *owned[1:-1]]
    steps = dict(owned)
    if len(steps) < len(owned):  # a step owns several runs of segments: add them up
        steps = {}
        for st, ns in owned:
            steps[st] = steps.get(st, 0) + ns
    return steps


def _other_cats(g: Graph, others: list[int], other_ns: list[int]) -> dict[str, int]:
    """The categories of the path's leaves that are not model calls: tools by their category,
    spans still in flight, the rest framework."""
    cats: dict[str, int] = {}
    in_flight, kinds, names = g.in_flight, g.kinds, g.names
    if not any(map(in_flight.__getitem__, others)) and set(map(kinds.__getitem__, others)) <= {
        "tool"
    }:
        # finished tools only (the usual case): sum per tool name in whole-list passes
        tools = list(map(names.__getitem__, others))
        first = dict(zip(reversed(tools), reversed(others), strict=True))  # first span of a name
        for nm in dict.fromkeys(tools):
            cat = tool_category(nm, g.spans[first[nm]].tool)
            ns = (
                sum(itertools.compress(other_ns, map(nm.__eq__, tools)))
                if len(first) > 1
                else sum(other_ns)
            )
            cats[cat] = cats.get(cat, 0) + ns
        return cats
    cache: dict[str, str] = {}
    for i, ns in zip(others, other_ns, strict=True):
        if in_flight[i]:
            cat = IN_FLIGHT
        elif kinds[i] == "tool":
            cat = cache.get(names[i]) or cache.setdefault(
                names[i], tool_category(names[i], g.spans[i].tool)
            )
        else:  # a finished model span that had children, or a childless step: bookkeeping
            cat = FRAMEWORK
        cats[cat] = cats.get(cat, 0) + ns
    return cats


def _model_cats(
    g: Graph,
    on_path: list[int],
    parts: dict[int, tuple[int, int, int]] | None,
    cats: dict[str, int],
) -> None:
    """The model calls on the path into ``cats``: base, reasoning and decode (``parts``: as
    re-timed), then tail, wait, retry and overhead."""
    ms = list(map(g.models.__getitem__, on_path))
    new = (
        [(m.base, m.reasoning, m.decode) for m in ms]
        if parts is None
        else list(map(parts.__getitem__, on_path))
    )
    for name, col in zip(("base", "reasoning", "decode"), zip(*new, strict=True), strict=True):
        cats[name] = sum(col)
    cols = list(zip(*ms, strict=True))
    for k, name in ((3, "tail"), (4, "wait"), (5, "retry"), (6, "overhead")):
        cats[name] = sum(cols[k])


def category_order(names: set[str]) -> list[str]:
    """Categories in display order: model parts, framework, tool queue, in flight, then tools by
    name."""
    fixed = [*MODEL_PARTS, FRAMEWORK, TOOL_QUEUE, IN_FLIGHT]
    return [c for c in fixed if c in names] + sorted(n for n in names if n not in fixed)


def step_label(g: Graph, i: int) -> str:
    """A step span's number as text (its ``step`` start attribute, else its name); -1: "run"."""
    return step_labels(g, [i])[0]


def step_labels(g: Graph, ids: list[int]) -> list[str]:
    """:func:`step_label` of each of ``ids``, in one comprehension (a run can have 200,000)."""
    spans, names = g.spans, g.names
    return [
        "run"
        if i < 0
        else (
            str(n)
            if A.GEN_AI_AGENT_NAME not in (a := spans[i].start_attrs)
            else step_text(a, names[i])
        )
        if (n := spans[i].start_attrs.get(STEP)) is not None
        else names[i]
        for i in ids
    ]
