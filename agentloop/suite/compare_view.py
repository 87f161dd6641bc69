"""A suite compare shown: the terminal table with its intervals, legend and notes, and the JSON."""

from __future__ import annotations

from typing import Any

from agentloop.analysis._table import table
from agentloop.suite.compare import SuiteCompare, TaskCompare


def _x(t: tuple[float, float, float], samples: int = 2) -> str:
    """A speedup and its interval; from one run a side no interval (a bootstrap of one sample
    resamples the same value: [6.40-6.40] would claim a certainty it has not)."""
    if samples < 2:
        return f"{t[0]:.2f}x"
    return f"{t[0]:.2f}x [{t[1]:.2f}-{t[2]:.2f}]"


def render_suite_compare(c: SuiteCompare) -> str:
    # the suite's bootstrap resamples within each task: one run of a task is no spread
    reps = [min(t.runs_a, t.runs_b) for t in c.tasks]
    reps.append(min(reps, default=1))
    rows = [
        [
            t.task,
            f"{t.runs_a}/{t.runs_b}",
            f"{t.a_s:.2f}",
            f"{t.b_s:.2f}",
            _x(t.measured, n),
            _x(t.predicted, n),
            f"{t.error_pct:+.1f}%",
            f"{t.model_error_pct:+.1f}%",
            f"{t.tool_noise_pct:+.1f}%",
            f"{t.output_share_a:.3f}",
            "-" if t.implied_share is None else f"{t.implied_share:.3f}",
        ]
        for t, n in zip([*c.tasks, c.suite], reps, strict=True)
    ]
    out = [
        f"suite compare  A {c.tier_a}  ->  B {c.tier_b}  (per-token speedup {c.k:.2f}x; "
        + (
            "speedups with 95% bootstrap intervals over the repeats)"
            if max(reps) > 1
            else "one run a task, so no intervals)"
        ),
        table(
            [
                "task",
                "runs A/B",
                "A s",
                "B s",
                "measured",
                "predicted from A",
                "error",
                "model-side",
                "tool noise",
                "output share A",
                "implied share",
            ],
            rows,
        ),
        f"wall time   A {c.wall_a_s:.2f} s, B {c.wall_b_s:.2f} s "
        f"({c.wall_a_s / c.wall_b_s:.2f}x at the suites' concurrency)"
        if c.wall_b_s
        else "",
        "A s / B s: mean run time per task (the suite row: sums); error = (predicted - B) / B "
        "= model-side (A re-timed with B's measured tool times) + tool noise; implied share "
        "= (1 - 1/S) / (1 - 1/K), the output share that speedup S means at K per token.",
    ]
    out += [f"note: {n}" for n in c.notes]
    return "\n".join(x for x in out if x)


def _tc_json(t: TaskCompare) -> dict[str, Any]:
    return {
        "task": t.task,
        "runs_a": t.runs_a,
        "runs_b": t.runs_b,
        "a_s": t.a_s,
        "b_s": t.b_s,
        "predicted_s": t.predicted_s,
        "retimed_with_b_tools_s": t.retimed_s,
        "measured_speedup": {"value": t.measured[0], "ci95": list(t.measured[1:])},
        "predicted_speedup": {"value": t.predicted[0], "ci95": list(t.predicted[1:])},
        "error_pct": t.error_pct,
        "model_error_pct": t.model_error_pct,
        "tool_noise_pct": t.tool_noise_pct,
        "output_share_a": t.output_share_a,
        "implied_share": t.implied_share,
    }


def suite_compare_json(c: SuiteCompare) -> dict[str, Any]:
    return {
        "tier_a": c.tier_a,
        "tier_b": c.tier_b,
        "per_token_speedup": c.k,
        "tasks": [_tc_json(t) for t in c.tasks],
        "suite": _tc_json(c.suite),
        "wall_a_s": c.wall_a_s,
        "wall_b_s": c.wall_b_s,
        "notes": c.notes,
    }
