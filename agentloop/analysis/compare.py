"""Two runs of one task on two tiers: measured speedup against the one predicted from run A.

Run A is re-timed to run B's tier (the speed profile in B's trace header) with
:func:`agentloop.analysis.whatif.whatif`; the prediction error is
``(predicted B - measured B) / measured B``. Per step and per category the critical-path times
of A, the prediction and B sit side by side, so the steps that account for the miss stand out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentloop.analysis._table import elide, pct, ratio, secs, table
from agentloop.analysis.breakdown import category_order, path_breakdown, ratio_of, step_label
from agentloop.analysis.flat import Graph
from agentloop.analysis.passes import critical_path
from agentloop.analysis.whatif import Scenario, WhatIf, whatif
from agentloop.errors import TraceFileError
from agentloop.model.speed import SpeedProfile


@dataclass(frozen=True, slots=True)
class Row:
    """One step or category: A measured, A re-timed to B's tier, B measured (ns)."""

    name: str
    a_ns: int
    predicted_ns: int
    b_ns: int


@dataclass(frozen=True, slots=True)
class Comparison:
    """The outcome of comparing run A with run B of the same task."""

    task: str
    tier_a: str
    tier_b: str
    prediction: WhatIf
    b_ns: int
    steps: tuple[Row, ...]
    categories: tuple[Row, ...]
    warnings: tuple[str, ...]

    @property
    def a_ns(self) -> int:
        return self.prediction.measured_ns

    @property
    def measured_speedup(self) -> float:
        return ratio_of(self.a_ns, self.b_ns)

    @property
    def predicted_speedup(self) -> float:
        return self.prediction.speedup

    @property
    def error_pct(self) -> float:
        return 100 * (self.prediction.predicted_ns - self.b_ns) / self.b_ns if self.b_ns else 0.0


def _profile(g: Graph) -> tuple[str, SpeedProfile]:
    tier = g.trace.run.tier
    if tier.profile is None:
        raise TraceFileError(
            f"{g.trace.path or '<trace>'}: the run header has no tier speed "
            f"profile (tier.profile) to predict with"
        )
    return tier.name, tier.profile


def _task(g: Graph) -> str:
    return g.trace.run.task.name


def compare(a: Graph, b: Graph) -> Comparison:
    """Compare run ``a`` with run ``b``; a different task name is an error, a different number
    of steps a warning."""
    if _task(a) != _task(b):
        raise TraceFileError(
            f"{a.trace.path} is task '{_task(a)}' but {b.trace.path} is task "
            f"'{_task(b)}': compare needs two runs of the same task"
        )
    tier_a = a.trace.run.tier.name
    tier_b, prof_b = _profile(b)
    warnings = []
    na, nb = a.kinds.count("step"), b.kinds.count("step")
    if na != nb:
        warnings.append(
            f"the runs took different numbers of steps (A {na}, B {nb}): the "
            f"prediction re-times A's steps, so it cannot match B step for step"
        )
    for g, tag in ((a, "A"), (b, "B")):
        if not g.trace.complete:
            warnings.append(f"trace {tag} is incomplete (the run did not finish)")
    w = whatif(a, Scenario.tier(tier_b, prof_b))
    b_cats, b_steps = path_breakdown(b, critical_path(b, b.t0, b.t1, b.end_ns), None)
    b_by_label = {step_label(b, s): v for s, v in b_steps.items()}
    labels = [c.name for c in w.steps] + [
        s for s in b_by_label if s not in {c.name for c in w.steps}
    ]
    pred = {c.name: c for c in w.steps}
    steps = tuple(
        Row(
            s,
            pred[s].measured_ns if s in pred else 0,
            pred[s].predicted_ns if s in pred else 0,
            b_by_label.get(s, 0),
        )
        for s in labels
    )
    pc = {c.name: c for c in w.categories}
    cats = tuple(
        Row(
            c,
            pc[c].measured_ns if c in pc else 0,
            pc[c].predicted_ns if c in pc else 0,
            b_cats.get(c, 0),
        )
        for c in category_order(set(pc) | set(b_cats))
    )
    return Comparison(_task(a), tier_a, tier_b, w, b.measured_ns, steps, cats, tuple(warnings))


def _rows_json(rows: tuple[Row, ...]) -> list[dict[str, Any]]:
    return [
        {
            "name": r.name,
            "a_s": r.a_ns / 1e9,
            "predicted_s": r.predicted_ns / 1e9,
            "b_s": r.b_ns / 1e9,
            "error_s": (r.predicted_ns - r.b_ns) / 1e9,
        }
        for r in rows
    ]


def compare_json(c: Comparison) -> dict[str, Any]:
    """The comparison as plain JSON-able data; times in seconds."""
    return {
        "task": c.task,
        "tier_a": c.tier_a,
        "tier_b": c.tier_b,
        "a_s": c.a_ns / 1e9,
        "b_s": c.b_ns / 1e9,
        "predicted_b_s": c.prediction.predicted_ns / 1e9,
        "measured_speedup": c.measured_speedup,
        "predicted_speedup": c.predicted_speedup,
        "error_pct": c.error_pct,
        "warnings": list(c.warnings),
        "steps": _rows_json(c.steps),
        "categories": _rows_json(c.categories),
    }


# a relative error of a near-zero time is noise (0.1 ms against 0.04 ms is "+150%"): below this
# measured time the error column says "-" and the seconds column tells the story
MIN_PCT_NS = 10_000_000


def _error_pct(r: Row) -> str:
    return pct(r.predicted_ns - r.b_ns, r.b_ns) if abs(r.b_ns) >= MIN_PCT_NS else "-"


def _rows_text(rows: tuple[Row, ...], head: str) -> str:
    return table(
        [head, "A s", "predicted B s", "B s", "error s", "error"],
        [
            r
            if isinstance(r, str)
            else [
                r.name,
                secs(r.a_ns),
                secs(r.predicted_ns),
                secs(r.b_ns),
                secs(r.predicted_ns - r.b_ns),
                _error_pct(r),
            ]
            for r in elide(rows)
        ],
    )


def render_compare(c: Comparison) -> str:
    """The comparison as plain aligned text."""
    out = [f"task {c.task}: A on {c.tier_a}, B on {c.tier_b}"]
    out += [f"  warning: {w}" for w in c.warnings]
    out += [
        f"  A measured           {secs(c.a_ns)} s",
        f"  B measured           {secs(c.b_ns)} s   speedup {ratio(c.measured_speedup)}",
        f"  B predicted from A   {secs(c.prediction.predicted_ns)} s   speedup "
        f"{ratio(c.predicted_speedup)}",
        f"  prediction error     {c.error_pct:+.2f}%",
        "",
        "Per step (critical-path time; error = predicted - measured B):",
        _rows_text(c.steps, "step"),
        "",
        "Per category (critical path):",
        _rows_text(c.categories, "category"),
    ]
    return "\n".join(out)
