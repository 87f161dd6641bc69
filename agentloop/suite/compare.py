"""Suite-level compare: many runs of the same tasks on two tiers, with intervals.

Compare (folders A and B, the same tasks on two tiers). Per task, from the repeats:

- measured speedup ``mean(A) / mean(B)`` of the runs' end-to-end times, and the speedup
  predicted from A alone (each A run re-timed to B's tier profile by
  :func:`agentloop.analysis.whatif.predict_ns`), each with a 95% bootstrap interval;
- the prediction error ``(mean(predicted) - mean(B)) / mean(B)`` split in two: each A run is
  re-timed again with B's tier profile *and* the measured durations of the paired B run's tool
  calls (paired by repeat, then by step and position in the step). What is left is the
  model-side error; the difference between the two predictions is tool noise (the tools simply
  took another time in B's runs). The two parts add up to the error;
- A's output share: reasoning + decode on A's critical path over its end-to-end time, beside the
  share the measured speedup implies at the tiers' per-token speedup ``K`` (Amdahl:
  ``share = (1 - 1/S) / (1 - 1/K)``), which is how the public 6.9x / 5.6x suite figures read at
  11x per token as decode shares of about 0.94 and 0.90.

The suite figure is the same over all runs (sums of run times: the speedup of the work, whatever
the concurrency), its interval from resampling runs within each task.

The suite-level what-if (one folder, another tier) is :mod:`agentloop.suite.whatif`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentloop.analysis._table import table
from agentloop.analysis.compare import _profile
from agentloop.analysis.graph import Graph, build_graph, critical_path, retime
from agentloop.analysis.whatif import Scenario, durations, new_parts, path_breakdown, predict_ns
from agentloop.errors import ConfigError
from agentloop.suite.records import RunRecord, Suite, load_suite
from agentloop.suite.stats import BOOTSTRAP_ROUNDS, BOOTSTRAP_SEED, mean, quantile
from agentloop.trace.reader import load_trace

OUTPUT_CATS = ("reasoning", "decode")


@dataclass(frozen=True)
class Loaded:
    """A suite's runs with their graphs (runs without a readable, finished trace are left out)."""

    folder: Path
    suite: Suite
    runs: list[RunRecord]
    graphs: list[Graph]
    skipped: list[str]


def load(folder: Path) -> Loaded:
    """Read ``folder/suite.json`` and every run's trace."""
    suite = load_suite(folder)
    runs, graphs, skipped = [], [], []
    for r in suite.runs:
        if not r.trace or not (folder / r.trace).is_file():
            skipped.append(f"{r.task} #{r.repeat}: no trace")
            continue
        g = build_graph(load_trace(folder / r.trace))
        if not g.trace.complete:
            skipped.append(f"{r.task} #{r.repeat}: trace incomplete")
            continue
        runs.append(r)
        graphs.append(g)
    return Loaded(folder, suite, runs, graphs, skipped)


def output_share(g: Graph) -> float:
    """Reasoning + decode on the critical path, over the run's end-to-end time."""
    cats, _ = path_breakdown(g, critical_path(g, g.t0, g.t1, g.end_ns), None)
    return sum(cats.get(c, 0) for c in OUTPUT_CATS) / g.measured_ns if g.measured_ns else 0.0


def implied_share(speedup: float, k: float) -> float | None:
    """The output share an end-to-end ``speedup`` implies at per-token speedup ``k`` (Amdahl)."""
    if k <= 1 or not math.isfinite(speedup) or speedup <= 0:
        return None
    return (1 - 1 / speedup) / (1 - 1 / k)


def _tool_keys(g: Graph) -> dict[tuple[int, int], int]:
    """Tool spans by (step number, position in the step's start order)."""
    out: dict[tuple[int, int], int] = {}
    seen: dict[int, int] = {}
    for i, kind in enumerate(g.kinds):
        if kind != "tool":
            continue
        st = g.step_of[i]
        recorded = g.spans[st].step if st >= 0 else -1
        step = st if recorded is None else recorded
        k = seen.get(step, 0)
        seen[step] = k + 1
        out[(step, k)] = i
    return out


def retime_with_tools(a: Graph, b: Graph, sc: Scenario) -> int:
    """A re-timed to ``sc`` with B's measured tool durations where B has the same tool call."""
    dur = durations(a, new_parts(a, sc))
    kb = _tool_keys(b)
    bd = b.durations()
    for key, i in _tool_keys(a).items():
        j = kb.get(key)
        if j is not None and a.names[i] == b.names[j]:
            dur[i] = bd[j]
    return retime(a, dur)[2] - a.start_ns


@dataclass(frozen=True)
class TaskCompare:
    """One task in a suite compare (seconds are means over the task's runs)."""

    task: str
    runs_a: int
    runs_b: int
    a_s: float
    b_s: float
    predicted_s: float
    retimed_s: float  # predicted with B's tool durations
    measured: tuple[float, float, float]  # speedup, CI low, CI high
    predicted: tuple[float, float, float]
    output_share_a: float
    implied_share: float | None

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_s - self.b_s) / self.b_s if self.b_s else 0.0

    @property
    def model_error_pct(self) -> float:
        return 100 * (self.retimed_s - self.b_s) / self.b_s if self.b_s else 0.0

    @property
    def tool_noise_pct(self) -> float:
        return self.error_pct - self.model_error_pct


@dataclass(frozen=True)
class SuiteCompare:
    """A suite compare: per task rows, the suite row, and notes."""

    tier_a: str
    tier_b: str
    k: float  # per-token speedup, output_tps B / A
    tasks: list[TaskCompare]
    suite: TaskCompare
    wall_a_s: float
    wall_b_s: float
    notes: list[str]


def _ratio_ci(
    xs: list[float], ys: list[float], groups: list[tuple[list[int], list[int]]], paired: bool
) -> tuple[float, float, float]:
    """sum(xs) / sum(ys) and a 95% bootstrap interval, resampling within each group (index
    lists into xs and ys); ``paired`` resamples one index set for both."""
    px = sum(xs[i] for ia, _ in groups for i in ia)
    py = sum(ys[j] for ia, ib in groups for j in (ia if paired else ib))
    point = px / py if py > 0 else math.inf
    rng = random.Random(BOOTSTRAP_SEED)
    vals = []
    for _ in range(BOOTSTRAP_ROUNDS):
        sx = sy = 0.0
        for ia, ib in groups:
            pick = [ia[rng.randrange(len(ia))] for _ in ia]
            sx += sum(xs[i] for i in pick)
            pick_b = pick if paired else [ib[rng.randrange(len(ib))] for _ in ib]
            sy += sum(ys[i] for i in pick_b)
        if sy > 0:
            vals.append(sx / sy)
    lo, hi = quantile(vals, 0.025), quantile(vals, 0.975)
    return point, lo if lo is not None else point, hi if hi is not None else point


def _task_row(
    name: str,
    a_idx: list[int],
    b_idx: list[int],
    a_s: list[float],
    b_s: list[float],
    pred: list[float],
    ret: list[float],
    share: list[float],
    k: float,
) -> TaskCompare:
    # a task's mean ratio: means scale both sums by the same run counts, so weight A's side
    na, nb = len(a_idx), len(b_idx)
    xs = [a_s[i] / na for i in range(len(a_s))]
    ys = [b_s[i] / nb for i in range(len(b_s))]
    measured = _ratio_ci(xs, ys, [(a_idx, b_idx)], paired=False)
    predicted = _ratio_ci(a_s, pred, [(a_idx, a_idx)], paired=True)
    return TaskCompare(
        name,
        na,
        nb,
        mean([a_s[i] for i in a_idx]),
        mean([b_s[i] for i in b_idx]),
        mean([pred[i] for i in a_idx]),
        mean([ret[i] for i in a_idx]),
        measured,
        predicted,
        mean([share[i] for i in a_idx]),
        implied_share(measured[0], k),
    )


def compare_suites(a_dir: Path, b_dir: Path) -> SuiteCompare:
    """Compare suite folders A and B (the same tasks; B on the faster tier)."""
    A, B = load(a_dir), load(b_dir)
    if not A.runs or not B.runs:
        raise ConfigError(f"{a_dir if not A.runs else b_dir}: no finished runs to compare")
    tier_b, prof_b = _profile(B.graphs[0])
    _, prof_a = _profile(A.graphs[0])
    sc = Scenario.tier(tier_b, prof_b)
    k = prof_b.output_tps / prof_a.output_tps
    notes = [*(f"A: {s}" for s in A.skipped), *(f"B: {s}" for s in B.skipped)]
    b_by: dict[tuple[str, int], int] = {}
    b_tasks: dict[str, list[int]] = {}
    for j, r in enumerate(B.runs):
        b_by[(r.task, r.repeat)] = j
        b_tasks.setdefault(r.task, []).append(j)
    a_s = [g.measured_ns / 1e9 for g in A.graphs]
    b_s = [g.measured_ns / 1e9 for g in B.graphs]
    pred = [predict_ns(g, sc) / 1e9 for g in A.graphs]
    share = [output_share(g) for g in A.graphs]
    ret = []
    for r, g in zip(A.runs, A.graphs, strict=True):
        pair = b_by.get((r.task, r.repeat))
        if pair is None and r.task in b_tasks:
            pair = b_tasks[r.task][0]
        ret.append(
            retime_with_tools(g, B.graphs[pair], sc) / 1e9
            if pair is not None
            else predict_ns(g, sc) / 1e9
        )
    a_tasks: dict[str, list[int]] = {}
    for i, r in enumerate(A.runs):
        a_tasks.setdefault(r.task, []).append(i)
    rows, groups = [], []
    for name, ai in a_tasks.items():
        bi = b_tasks.get(name)
        if not bi:
            notes.append(f"task '{name}' has no finished run in B: left out")
            continue
        rows.append(_task_row(name, ai, bi, a_s, b_s, pred, ret, share, k))
        groups.append((ai, bi))
    for name in b_tasks:
        if name not in a_tasks:
            notes.append(f"task '{name}' has no finished run in A: left out")
    if not rows:
        raise ConfigError(f"{a_dir} and {b_dir} have no task in common")
    all_a = [i for ai, _ in groups for i in ai]
    all_b = [j for _, bi in groups for j in bi]
    # suite: sums of run times, each task weighted by its runs (equal repeats: plain sums)
    measured = _ratio_ci(a_s, b_s, groups, paired=False)
    predicted = _ratio_ci(a_s, pred, [(ai, ai) for ai, _ in groups], paired=True)
    suite = TaskCompare(
        "suite",
        len(all_a),
        len(all_b),
        sum(a_s[i] for i in all_a),
        sum(b_s[j] for j in all_b),
        sum(pred[i] for i in all_a),
        sum(ret[i] for i in all_a),
        measured,
        predicted,
        sum(share[i] * a_s[i] for i in all_a) / sum(a_s[i] for i in all_a),
        implied_share(measured[0], k),
    )
    return SuiteCompare(
        A.suite.tier, B.suite.tier, k, rows, suite, A.suite.wall_s, B.suite.wall_s, notes
    )


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
