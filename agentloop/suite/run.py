"""Running a suite: many task files, each repeated, concurrently in one process, bounded.

Every run goes through the run API (:func:`agentloop.api.plan_run`, then
:func:`agentloop.api.execute`: a cancelled run's trace is known) with the suite's
:class:`agentloop.api.RunConfig`; ``concurrency`` bounds how many run at once and a failing run
(error, limit, crash, failed check) is recorded and never stops the others. What the suite
shares with a run reaches it in one field of its config, :class:`agentloop.api.SuiteScope`:
simulated tiers share ONE simulator for the whole suite, in a process of its own
(:mod:`agentloop.suite.shared`): each run takes a route on it instead of starting its own
server, so a thousand concurrent runs share one listening socket and one write budget, and the
first wave's model calls wait at a start gate until the wave is set up, each run connected
(:mod:`agentloop.suite.gate`; ``tests/benchmarks/bench_suite_scale.py``); a run's jail is
emptied at its end and torn down behind the runs still going (:mod:`agentloop.sandbox.closer`).
With ``ray`` each run is a Ray task on a cluster instead (:mod:`agentloop.suite.ray_backend`)
and its trace comes back into the folder. ``DIR/suite.json`` is written at the end, and also
when the suite is interrupted: then it says ``interrupted``, its runs in flight are recorded as
``cancelled`` with their closed traces, and ``not_started`` counts the runs that never began.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from agentloop.api import (
    RunConfig,
    RunOptions,
    RunPlan,
    SuiteScope,
    configure,
    execute,
    open_task,
    plan_run,
    resolve_tier,
    tool_registry,
)
from agentloop.config.tasks import Task
from agentloop.config.tiers import Tier, require_key
from agentloop.errors import AgentloopError, ConfigError
from agentloop.events import Only, RunEvent, fan_out
from agentloop.loop.ending import RunResult
from agentloop.sandbox.closer import JailCloser, closing_behind
from agentloop.suite.gate import StartGate, Ticket
from agentloop.suite.records import (
    TRACES,
    RunRecord,
    Suite,
    finish,
    trace_figures,
    write_suite,
)
from agentloop.suite.shared import SharedSim, shared_simulator, shares
from agentloop.trace.reader import load_trace

if TYPE_CHECKING:
    from agentloop.suite.ray_backend import RayBackend

TASK_SUFFIXES = (".yaml", ".yml")


def collect(paths: Sequence[str | Path]) -> list[Path]:
    """Task files named, or found in the named folders (their ``*.yaml``, sorted, not recursive)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in TASK_SUFFIXES and f.is_file())
            if not found:
                raise ConfigError(f"{p}: no task files (*.yaml) in this folder")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(f"{p}: no such task file or folder")
    return out


@dataclass(frozen=True)
class Job:
    """One run to do: a task (validated up front) and which repeat it is."""

    task: Task
    source: Path
    repeat: int
    tier: Tier


@dataclass
class Progress:
    """Live counts of a suite (what the progress line shows)."""

    total: int
    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    running: int = 0
    failed: int = 0
    output_tokens: int = 0

    def line(self) -> str:
        el = time.perf_counter() - self.started
        return (
            f"suite  {self.done}/{self.total} done  {self.running} running  "
            f"{self.failed} failed  {el:7.1f} s  {self.output_tokens:,} output tokens"
        )


ProgressCallback = Callable[[Progress], None]


def plan_jobs(
    paths: Sequence[str | Path],
    *,
    tier: str | Tier | None = None,
    tiers_file: str | Path | None = None,
    repeat: int = 1,
) -> list[Job]:
    """Load and validate every task first (bad input stops the suite before any run), then
    order the runs repeat by repeat, so that early runs cover every task."""
    if repeat < 1:
        raise ConfigError(f"--repeat must be at least 1 (got {repeat})")
    tasks = [(open_task(p), p) for p in collect(paths)]
    tiers = {id(t): resolve_tier(t, tier, tiers_file, asked_by="--tier") for t, _ in tasks}
    for the_tier in tiers.values():
        require_key(the_tier)  # before any run's set-up
    return [Job(t, p, r, tiers[id(t)]) for r in range(1, repeat + 1) for t, p in tasks]


INTERRUPTED = "interrupted: the suite was cancelled (Ctrl-C) while this run was in flight"


def _record(
    job: Job,
    result: RunResult | None,
    error: str | None,
    folder: Path,
    t0: float,
    t1: float,
    suite_t0: float,
    planned: Path | None = None,
) -> RunRecord:
    """A run's record; ``planned`` is its trace's path when the run ended with no result (a
    cancelled run's trace is closed and kept: status 'cancelled')."""
    trace = Path(result.trace_path) if result is not None and result.trace_path else planned
    if trace is not None and not trace.is_file():
        trace = None
    figures: dict[str, Any] = {}
    if trace is not None and trace.is_file():
        try:
            figures = trace_figures(load_trace(trace))
        except AgentloopError as exc:
            error = error or f"trace unreadable: {exc.message}"
    rel = (
        str(trace.relative_to(folder))
        if trace is not None and trace.is_relative_to(folder)
        else (str(trace) if trace is not None else None)
    )
    if result is None:
        cancelled = error == INTERRUPTED
        return RunRecord(
            job.task.name,
            str(job.source),
            job.repeat,
            job.tier.name,
            "cancelled" if cancelled else "error",
            error or "the run failed",
            None,
            t1 - t0,
            0,
            rel,
            t0 - suite_t0,
            t1 - suite_t0,
            **figures,
        )
    return RunRecord(
        job.task.name,
        str(job.source),
        job.repeat,
        job.tier.name,
        result.status,
        result.reason,
        result.success,
        result.elapsed_s,
        result.steps,
        rel,
        t0 - suite_t0,
        t1 - suite_t0,
        **figures,
    )


class _Runs:
    """A suite's runs as they go: the jobs, what every run is given, the live counts, and each
    job's record once its run has ended."""

    def __init__(
        self,
        jobs: list[Job],
        folder: Path,
        each: RunConfig,
        concurrency: int,
        remote: RayBackend | None,
        gate: StartGate | None,
    ) -> None:
        self.jobs, self.folder, self.remote, self.gate = jobs, folder, remote, gate
        self.state = Progress(len(jobs))
        observe = Only({"model_end"}, self._model_end)  # nor a model_progress ticker per call
        self.each = replace(each, trace_dir=folder / TRACES, events=fan_out(observe, each.events))
        self.records: list[RunRecord | None] = [None] * len(jobs)
        self.plans: list[RunPlan | None] = [None] * len(jobs)
        self.interrupted = False
        self._sem = asyncio.Semaphore(concurrency)
        self._closer: JailCloser | None = None
        self._sim: SharedSim | None = None

    def _model_end(self, event: RunEvent) -> None:
        usage = event.data.get("usage")
        self.state.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)

    async def go(
        self,
        closer: JailCloser,
        sim: SharedSim | None,
        progress: ProgressCallback | None,
        interval_s: float,
    ) -> None:
        """Every job, at most ``concurrency`` at once; ``progress`` every ``interval_s``."""
        self._closer, self._sim = closer, sim
        async with asyncio.TaskGroup() as tg:
            tick = tg.create_task(_tick(self.state, progress, interval_s))
            work = [tg.create_task(self._one(i, j)) for i, j in enumerate(self.jobs)]
            await asyncio.gather(*work)
            tick.cancel()

    async def _one(self, i: int, job: Job) -> None:
        async with self._sem:
            self.state.running += 1
            t0 = time.perf_counter()
            result, error = None, None
            ticket = Ticket() if self.gate is not None and shares(job.tier) else None
            cancelled = False
            try:
                result = await self._run(i, job, ticket)
            except AgentloopError as exc:
                error = exc.message
            except Exception as exc:  # one run's crash is its own record, never the suite's end
                error = f"internal error: {type(exc).__name__}: {exc}"
            except asyncio.CancelledError:  # its trace was closed as cancelled: keep a record
                cancelled, error, self.interrupted = True, INTERRUPTED, True
            finally:
                self.state.running -= 1
                if self.gate is not None and ticket is not None:
                    self.gate.leave(ticket)
            t1 = time.perf_counter()
            plan = self.plans[i]
            planned = plan.trace_path if plan is not None else None
            if cancelled:  # read here, not in a thread: the cancelled task is ending
                self.records[i] = _record(
                    job, None, error, self.folder, t0, t1, self.state.started, planned
                )
                self.state.done += 1
                raise asyncio.CancelledError
            args = (job, result, error, self.folder, t0, t1, self.state.started, planned)
            try:
                rec = await asyncio.to_thread(_record, *args)
            except asyncio.CancelledError:  # interrupted as this run ended: still recorded
                self.records[i] = _record(*args)
                self.interrupted = True
                raise
            self.records[i] = rec
            self.state.done += 1
            self.state.failed += not rec.passed

    async def _run(self, i: int, job: Job, ticket: Ticket | None) -> RunResult:
        if self.remote is not None:
            result = await self.remote.run(job, self.folder / TRACES)
            self.state.output_tokens += int(result.totals.get("output_tokens", 0) or 0)
            return result
        shared = self._sim is not None and shares(job.tier)
        scope = SuiteScope(
            models=self._sim.models_for(ticket) if self._sim is not None and shared else None,
            closer=self._closer,
        )
        config = replace(self.each, tier=job.tier, suite=scope)
        plan = self.plans[i] = plan_run(job.task, config)  # its trace's path, known before it
        return await execute(plan, config)

    def suite(self, tier: str | Tier | None, concurrency: int, repeat: int) -> Suite:
        """The suite as it stands: the runs that ended, in job order."""
        name = tier.name if isinstance(tier, Tier) else tier
        return Suite(
            name or (self.jobs[0].tier.name if self.jobs else ""),
            concurrency,
            repeat,
            time.perf_counter() - self.state.started,
            [r for r in self.records if r is not None],
            "ray" if self.remote is not None else "local",
            any(j.tier.prices is not None and j.tier.prices.placeholder for j in self.jobs),
            interrupted=self.interrupted,
            not_started=sum(r is None for r in self.records) if self.interrupted else 0,
        )


async def _tick(state: Progress, progress: ProgressCallback | None, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        if progress is not None:
            progress(state)


def _first_wave_gate(jobs: list[Job], concurrency: int, freeze_gc: bool) -> StartGate | None:
    """The start gate of the runs the semaphore admits first (the first ``concurrency`` jobs,
    in order), when more than one of them takes a route on the shared simulator."""
    first = sum(shares(j.tier) for j in jobs[:concurrency])
    return StartGate(first, freeze_gc=freeze_gc) if first > 1 else None


async def _prepare(
    paths: Sequence[str | Path], out: str | Path, base: RunConfig, repeat: int
) -> tuple[RunConfig, list[Job], Path]:
    """The suite's jobs, its folder made (``out/traces``) and the runs' shared configuration
    (the tool registry built once: it derives every tool's schema, ~30 ms a run)."""
    jobs = plan_jobs(paths, tier=base.tier, tiers_file=base.tiers_file, repeat=repeat)
    folder = await asyncio.to_thread(Path(out).resolve)
    await asyncio.to_thread((folder / TRACES).mkdir, parents=True, exist_ok=True)
    if base.tools is None:
        base = replace(base, tools=await asyncio.to_thread(tool_registry))
    return base, jobs, folder


async def run_suite(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    config: RunConfig | None = None,
    concurrency: int = 8,
    repeat: int = 1,
    ray: str | None = None,
    progress: ProgressCallback | None = None,
    progress_interval_s: float = 1.0,
    share_simulator: bool = True,
    freeze_gc: bool = False,
    **options: Unpack[RunOptions],
) -> Suite:
    """Run every task ``repeat`` times, at most ``concurrency`` at once; write ``out/suite.json``.

    Every run is given ``config`` (a :class:`agentloop.api.RunConfig`, or its fields as
    keywords), with its job's tier, the suite's ``out/traces`` folder and the suite's scope;
    its ``events`` see every run's events. ``ray``: a Ray cluster address (``auto``,
    ``HOST:PORT``, ``ray://HOST:PORT``, or ``local`` to start one in-process) to run each run as
    a Ray task on. ``share_simulator=False`` gives every simulated run its own simulator, as a
    single run has (the benchmark's baseline). ``freeze_gc``: freeze the first wave's set-up
    for the garbage collector once it starts (:mod:`agentloop.suite.gate`; the process's
    collector is the caller's to decide on: ``agentloop suite`` asks for it).
    """
    base = configure(config, **options)
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1 (got {concurrency})")
    base, jobs, folder = await _prepare(paths, out, base, repeat)
    remote = None
    if ray is not None:
        from agentloop.suite.ray_backend import RayBackend

        remote = RayBackend(ray, base)
    shared = remote is None and share_simulator
    gate = _first_wave_gate(jobs, concurrency, freeze_gc) if shared else None
    runs = _Runs(jobs, folder, base, concurrency, remote, gate)
    runs.state.started = time.perf_counter()  # the suite's time includes its simulator's start
    try:
        async with (
            closing_behind() as closer,
            shared_simulator([j.tier for j in jobs] if shared else [], gate) as sim,
        ):
            await runs.go(closer, sim, progress, progress_interval_s)
    except asyncio.CancelledError:  # also before any run began (the simulator starting)
        runs.interrupted = True
        raise
    finally:
        if gate is not None:
            gate.close()
        if remote is not None:
            remote.close()
        if progress is not None:
            progress(runs.state)
        suite = runs.suite(base.tier, concurrency, repeat)
        await asyncio.to_thread(write_suite, folder, suite)
    return finish(suite)
