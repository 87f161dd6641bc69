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

Its table and JSON are :mod:`agentloop.suite.compare_view`'s; the suite-level what-if (one
folder, another tier) is :mod:`agentloop.suite.whatif`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

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
    b_tasks = _by_task(B.runs)
    a_s = [g.measured_ns / 1e9 for g in A.graphs]
    b_s = [g.measured_ns / 1e9 for g in B.graphs]
    pred = [predict_ns(g, sc) / 1e9 for g in A.graphs]
    share = [output_share(g) for g in A.graphs]
    ret = _retimed(A, B, b_tasks, sc)
    pairs = _common_tasks(_by_task(A.runs), b_tasks, notes)
    if not pairs:
        raise ConfigError(f"{a_dir} and {b_dir} have no task in common")
    rows = [_task_row(name, ai, bi, a_s, b_s, pred, ret, share, k) for name, ai, bi in pairs]
    groups = [(ai, bi) for _, ai, bi in pairs]
    suite = _suite_row(groups, a_s, b_s, pred, ret, share, k)
    return SuiteCompare(
        A.suite.tier, B.suite.tier, k, rows, suite, A.suite.wall_s, B.suite.wall_s, notes
    )


def _by_task(runs: list[RunRecord]) -> dict[str, list[int]]:
    """Each task's runs, as their indices in ``runs``, tasks in order of their first run."""
    out: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        out.setdefault(r.task, []).append(i)
    return out


def _retimed(A: Loaded, B: Loaded, b_tasks: dict[str, list[int]], sc: Scenario) -> list[float]:
    """Each A run re-timed (s) with the tool times of its B pair (the same task and repeat, else
    the task's first B run); a run whose task B lacks is predicted."""
    b_by = {(r.task, r.repeat): j for j, r in enumerate(B.runs)}
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
    return ret


def _common_tasks(
    a_tasks: dict[str, list[int]], b_tasks: dict[str, list[int]], notes: list[str]
) -> list[tuple[str, list[int], list[int]]]:
    """The tasks both sides ran, with their runs on each side; one a side lacks is named in
    ``notes`` and left out."""
    pairs = []
    for name, ai in a_tasks.items():
        bi = b_tasks.get(name)
        if not bi:
            notes.append(f"task '{name}' has no finished run in B: left out")
            continue
        pairs.append((name, ai, bi))
    for name in b_tasks:
        if name not in a_tasks:
            notes.append(f"task '{name}' has no finished run in A: left out")
    return pairs


def _suite_row(
    groups: list[tuple[list[int], list[int]]],
    a_s: list[float],
    b_s: list[float],
    pred: list[float],
    ret: list[float],
    share: list[float],
    k: float,
) -> TaskCompare:
    """The suite's row: sums of run times over the common tasks, each task weighted by its runs
    (equal repeats: plain sums)."""
    all_a = [i for ai, _ in groups for i in ai]
    all_b = [j for _, bi in groups for j in bi]
    measured = _ratio_ci(a_s, b_s, groups, paired=False)
    predicted = _ratio_ci(a_s, pred, [(ai, ai) for ai, _ in groups], paired=True)
    return TaskCompare(
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
