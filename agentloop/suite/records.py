"""What a suite folder holds: one record per run, per-task and suite summaries, ``suite.json``.

``DIR/suite.json`` is written when the suite ends (and when it is interrupted: what finished is
kept); the traces are under ``DIR/traces/``. Readers (``compare``, ``whatif``) take the runs from
it and recompute the summaries, so the file's summaries are for people and other tools.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from agentloop.analysis import lateness
from agentloop.analysis.cost import of_trace
from agentloop.errors import ConfigError
from agentloop.suite.stats import spread
from agentloop.trace.reader import Trace

SUITE_FILE = "suite.json"
TRACES = "traces"
SCHEMA = 1


@dataclass(frozen=True)
class RunRecord:
    """One run of a suite: how it ended, its figures (from its trace), where its trace is."""

    task: str
    source: str
    repeat: int  # 1-based
    tier: str
    status: str  # ok, error, cancelled, budget (RunResult.status)
    reason: str
    success: bool | None
    elapsed_s: float  # the agent's time (RunResult.elapsed_s: no set-up, no success check)
    steps: int
    trace: str | None  # relative to the suite folder
    started_s: float  # offsets from the suite's start
    ended_s: float
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None  # None: the tier has no prices
    cost_by_category: dict[str, float] | None = None  # agentloop.model.prices.CATEGORIES
    cost_by_step: dict[str, float] | None = None  # step label (analysis.cost) -> USD
    # the client's own lateness (issue 28, agentloop.analysis.lateness): 0 in older suite files
    calls_measured: int = 0  # model calls whose client measured it
    calls_under_load: int = 0  # of them, with a timing error bound past 2% of their decode
    worst_timing_error_s: float = 0.0

    @property
    def passed(self) -> bool:
        """Ended well: status ok and the success check (if any) passed."""
        return self.status == "ok" and self.success is not False


def trace_figures(trace: Trace) -> dict[str, Any]:
    """Token totals and cost of a run, summed over its model spans' typed end attributes; the
    cost at the prices its header recorded (the formula the runner priced each span with)."""
    calls = [s.model for s in trace.of_kind("model") if s.model is not None]
    split = of_trace(trace)
    late = lateness.of_calls(calls)
    return {
        "calls_measured": late.measured,
        "calls_under_load": late.under_load,
        "worst_timing_error_s": late.worst_bound_s,
        "input_tokens": sum(m.input_tokens for m in calls),
        "cached_input_tokens": sum(m.cached_input_tokens for m in calls),
        "output_tokens": sum(m.output_tokens for m in calls),
        "reasoning_tokens": sum(m.reasoning_tokens for m in calls),
        "cost_usd": split.total_usd if split.priced else None,
        "cost_by_category": split.by_category if split.priced else None,
        "cost_by_step": dict(split.by_step) if split.priced else None,
    }


@dataclass(frozen=True)
class TaskSummary:
    """Per task: runs, passed, and median / p10 / p90 of wall time, tokens and cost."""

    task: str
    runs: int
    passed: int
    wall_s: dict[str, float | None]
    output_tokens: dict[str, float | None]
    input_tokens: dict[str, float | None]
    cost_usd: dict[str, float | None] | None
    total_cost_usd: float | None


@dataclass(frozen=True)
class Suite:
    """A suite folder's content: its runs, and what they were run with."""

    tier: str
    concurrency: int
    repeat: int
    wall_s: float
    runs: list[RunRecord]
    backend: str = "local"  # local | ray
    placeholder_prices: bool = False
    tasks: list[TaskSummary] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)
    # Ctrl-C (or a cancel) ended the suite: its runs in flight are kept as status 'cancelled'
    # with their traces; ``not_started`` runs never began
    interrupted: bool = False
    not_started: int = 0


def summarize_tasks(runs: Sequence[RunRecord]) -> list[TaskSummary]:
    """One summary per task, in first-seen order."""
    by: dict[str, list[RunRecord]] = {}
    for r in runs:
        by.setdefault(r.task, []).append(r)
    out = []
    for name, rs in by.items():
        costs = [r.cost_usd for r in rs if r.cost_usd is not None]
        out.append(
            TaskSummary(
                name,
                len(rs),
                sum(r.passed for r in rs),
                spread([r.elapsed_s for r in rs]),
                spread([float(r.output_tokens) for r in rs]),
                spread([float(r.input_tokens) for r in rs]),
                spread(costs) if costs else None,
                sum(costs) if costs else None,
            )
        )
    return out


def totals(runs: Sequence[RunRecord], wall_s: float) -> dict[str, Any]:
    """Suite totals: runs, passed, failed, tokens, cost, and throughput over the wall time."""
    costs = [r.cost_usd for r in runs if r.cost_usd is not None]
    out_tok = sum(r.output_tokens for r in runs)
    per_s = (lambda x: x / wall_s) if wall_s > 0 else (lambda x: math.nan)
    return {
        "runs": len(runs),
        "passed": sum(r.passed for r in runs),
        "failed": sum(not r.passed for r in runs),
        "input_tokens": sum(r.input_tokens for r in runs),
        "cached_input_tokens": sum(r.cached_input_tokens for r in runs),
        "output_tokens": out_tok,
        "reasoning_tokens": sum(r.reasoning_tokens for r in runs),
        "cost_usd": sum(costs) if costs else None,
        "runs_per_min": per_s(len(runs)) * 60,
        "output_tokens_per_s": per_s(out_tok),
        "run_time_s": sum(r.elapsed_s for r in runs),  # agent time: what the what-if re-times
        # each run's wall time: its set-up (workspace, jail, setup commands) and check included
        "run_wall_s": sum(r.ended_s - r.started_s for r in runs),
        "calls_measured": sum(r.calls_measured for r in runs),
        "calls_under_load": sum(r.calls_under_load for r in runs),
        "worst_timing_error_s": max((r.worst_timing_error_s for r in runs), default=0.0),
    }


def finish(suite: Suite) -> Suite:
    """The suite with its per-task summaries and totals filled in."""
    return Suite(
        suite.tier,
        suite.concurrency,
        suite.repeat,
        suite.wall_s,
        suite.runs,
        suite.backend,
        suite.placeholder_prices,
        summarize_tasks(suite.runs),
        totals(suite.runs, suite.wall_s),
        suite.interrupted,
        suite.not_started,
    )


def write_suite(folder: Path, suite: Suite) -> Path:
    """Write ``folder/suite.json`` (atomically: a reader never sees half a file)."""
    path = folder / SUITE_FILE
    data = {"schema": SCHEMA, "kind": "agentloop-suite", **asdict(finish(suite))}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    tmp.replace(path)
    return path


_RUNS = TypeAdapter(list[RunRecord])


def load_suite(folder: Path) -> Suite:
    """Read a suite folder's ``suite.json``; bad content names the file and the field."""
    path = folder / SUITE_FILE
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(
            f"{folder}: not a suite folder (no {SUITE_FILE}; `agentloop suite` writes one)"
        ) from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read as JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "agentloop-suite":
        raise ConfigError(f"{path}: not an agentloop suite file (field 'kind')")
    try:
        runs = _RUNS.validate_python(data.get("runs"))
        return Suite(
            str(data["tier"]),
            int(data["concurrency"]),
            int(data["repeat"]),
            float(data["wall_s"]),
            runs,
            str(data.get("backend", "local")),
            bool(data.get("placeholder_prices", False)),
            interrupted=bool(data.get("interrupted", False)),
            not_started=int(data.get("not_started", 0)),
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{path}, field 'runs.{loc}': {err['msg']}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: missing or bad field {exc}") from None


def trace_paths(folder: Path, runs: Iterable[RunRecord]) -> list[Path | None]:
    """Each run's trace file (None for a run that left none)."""
    return [folder / r.trace if r.trace else None for r in runs]
