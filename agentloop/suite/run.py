"""Running a suite: many task files, each repeated, concurrently in one process, bounded.

Every run goes through the run API (:func:`agentloop.api.run_task`); ``concurrency`` bounds
how many run at once and a failing run (error, limit, crash, failed check) is recorded and never
stops the others. Simulated tiers share ONE simulator for the whole suite, in a process of its
own (:mod:`agentloop.sim.child`): each run takes a route on it instead of starting its own
server, so a thousand concurrent runs share one listening socket and one write budget, and the
first wave's model calls wait at a start gate until the wave is set up, each run connected
(:mod:`agentloop.suite.gate`; ``tests/benchmarks/bench_suite_scale.py``). With ``ray`` each
run is a Ray task on a cluster instead (:mod:`agentloop.suite.ray_backend`) and its trace comes
back into the folder. ``DIR/suite.json`` is written at the end, and also when the suite is interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Unpack

from agentloop.api import (
    RunConfig,
    RunOptions,
    configure,
    open_task,
    resolve_tier,
    run_task,
    tool_registry,
)
from agentloop.config.tasks import Task
from agentloop.config.tiers import Tier
from agentloop.errors import AgentloopError, ConfigError, SimulatorError
from agentloop.events import Only, RunEvent, fan_out
from agentloop.loop.runner import RunResult
from agentloop.sandbox.closer import closing_behind
from agentloop.suite.gate import TICKET, StartGate, Ticket
from agentloop.suite.records import (
    TRACES,
    RunRecord,
    Suite,
    finish,
    trace_figures,
    write_suite,
)
from agentloop.trace.reader import load_trace

TASK_SUFFIXES = (".yaml", ".yml")
KEEPALIVE_S = 600.0  # a run's idle connection to the suite's simulator is kept this long


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
    tiers = {id(t): resolve_tier(t, tier, tiers_file) for t, _ in tasks}
    return [Job(t, p, r, tiers[id(t)]) for r in range(1, repeat + 1) for t, p in tasks]


@contextlib.asynccontextmanager
async def shared_simulator(
    jobs: Sequence[Job], gate: StartGate | None = None
) -> AsyncIterator[None]:
    """One simulator, in a process of its own (:mod:`agentloop.sim.child`), for every simulated
    run of the suite (runs take routes on it); one SDK client that every run's client is a copy
    of, each on a connection pool of the run's own (one TLS context for all); ``gate`` holds the
    first wave, each run connected, until that wave is set up (:mod:`agentloop.suite.gate`)."""
    import httpx2
    import openai

    from agentloop.sim import server
    from agentloop.sim.child import SimProcess
    from agentloop.sim.server import SHARED, Shared

    profiles = [j.tier.profile for j in jobs if j.tier.simulated and j.tier.profile is not None]
    if not profiles or SHARED.get() is not None:
        yield
        return
    # each route brings its own profile
    async with SimProcess(profiles[0], server.SUITE_WRITE_BUDGET) as sim:
        # one TLS context for every pool: making one loads the trust store (~0.2 s of CPU)
        tls = httpx2.create_ssl_context()
        http = httpx2.AsyncClient(verify=tls)
        sdk = openai.AsyncOpenAI(
            base_url=sim.base_url, api_key="sim", max_retries=0, http_client=http
        )
        # a run connected before the gate may wait there through the whole wave's set-up
        limits = httpx2.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_S
        )

        @contextlib.asynccontextmanager
        async def pool() -> AsyncIterator[httpx2.AsyncClient]:
            # a run's own pool: httpcore scans every connection of a pool for each request and
            # each response's end, so one pool for a thousand runs costs O(runs) per event
            async with httpx2.AsyncClient(verify=tls, limits=limits) as own:
                yield own

        async def hold(own: httpx2.AsyncClient, base_url: str) -> None:
            assert gate is not None
            if gate.will_hold():
                # connected now, so that a thousand runs do not connect as the gate opens
                try:
                    (await own.get(f"{base_url}/models")).raise_for_status()
                except httpx2.HTTPError as exc:
                    raise SimulatorError(
                        f"the suite's simulator did not answer GET {base_url}/models: {exc}"
                    ) from exc
            await gate.wait()

        token = SHARED.set(Shared(sim, sdk, pool, hold if gate is not None else None))
        try:
            yield
        finally:
            SHARED.reset(token)
            await sdk.close()


def _record(
    job: Job,
    result: RunResult | None,
    error: str | None,
    folder: Path,
    t0: float,
    t1: float,
    suite_t0: float,
) -> RunRecord:
    trace = Path(result.trace_path) if result is not None and result.trace_path else None
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
        return RunRecord(
            job.task.name,
            str(job.source),
            job.repeat,
            job.tier.name,
            "error",
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
    **options: Unpack[RunOptions],
) -> Suite:
    """Run every task ``repeat`` times, at most ``concurrency`` at once; write ``out/suite.json``.

    ``ray``: a Ray cluster address (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``, or ``local``
    to start one in-process) to run each run as a Ray task on. ``share_simulator=False`` gives
    every simulated run its own simulator, as a single run has (the benchmark's baseline).
    Every run is given ``config`` (a :class:`agentloop.api.RunConfig`, or its fields as
    keywords), with its job's tier and the suite's ``out/traces`` folder; its ``events`` see
    every run's events.
    """
    base = configure(config, **options)
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1 (got {concurrency})")
    jobs = plan_jobs(paths, tier=base.tier, tiers_file=base.tiers_file, repeat=repeat)
    folder = await asyncio.to_thread(Path(out).resolve)
    traces = folder / TRACES
    await asyncio.to_thread(traces.mkdir, parents=True, exist_ok=True)
    state = Progress(len(jobs))
    # built once: the registry derives every tool's schema from its signature (~30 ms a run)
    tools = base.tools if base.tools is not None else await asyncio.to_thread(tool_registry)
    records: list[RunRecord | None] = [None] * len(jobs)
    sem = asyncio.Semaphore(concurrency)
    remote: Any = None
    if ray is not None:
        from agentloop.suite.ray_backend import RayBackend

        remote = RayBackend(ray, base)

    def model_end(event: RunEvent) -> None:
        usage = event.data.get("usage")
        state.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)

    observe = Only({"model_end"}, model_end)  # nor a model_progress ticker per call
    each = replace(base, trace_dir=traces, tools=tools, events=fan_out(observe, base.events))

    async def one(i: int, job: Job) -> None:
        async with sem:
            state.running += 1
            t0 = time.perf_counter()
            result, error = None, None
            ticket = Ticket() if gate is not None and job.tier.simulated else None
            TICKET.set(ticket)
            try:
                if remote is not None:
                    result = await remote.run(job, traces)
                    state.output_tokens += int(result.totals.get("output_tokens", 0) or 0)
                else:
                    result = await run_task(job.task, config=replace(each, tier=job.tier))
            except AgentloopError as exc:
                error = exc.message
            except Exception as exc:  # one run's crash is its own record, never the suite's end
                error = f"internal error: {type(exc).__name__}: {exc}"
            finally:
                state.running -= 1
                if gate is not None and ticket is not None:
                    gate.leave(ticket)
            t1 = time.perf_counter()
            rec = await asyncio.to_thread(
                _record, job, result, error, folder, t0, t1, state.started
            )
            records[i] = rec
            state.done += 1
            state.failed += not rec.passed

    async def ticker() -> None:
        while True:
            await asyncio.sleep(progress_interval_s)
            if progress is not None:
                progress(state)

    shared = remote is None and share_simulator
    # the first wave: the semaphore admits the first `concurrency` jobs, in order
    first = sum(j.tier.simulated for j in jobs[:concurrency])
    gate = StartGate(first) if shared and first > 1 else None
    suite_t0 = state.started = time.perf_counter()
    try:
        async with (
            # a run's jail is emptied at its end and torn down behind the runs still going
            closing_behind() if remote is None else contextlib.nullcontext(),
            shared_simulator(jobs if shared else [], gate),
            asyncio.TaskGroup() as tg,
        ):
            tick = tg.create_task(ticker())
            work = [tg.create_task(one(i, j)) for i, j in enumerate(jobs)]
            await asyncio.gather(*work)
            tick.cancel()
    finally:
        if gate is not None:
            gate.close()
        if remote is not None:
            remote.close()
        if progress is not None:
            progress(state)
        done = [r for r in records if r is not None]
        suite = Suite(
            _tier_name(base.tier) or (jobs[0].tier.name if jobs else ""),
            concurrency,
            repeat,
            time.perf_counter() - suite_t0,
            done,
            "ray" if remote is not None else "local",
            any(j.tier.prices is not None and j.tier.prices.placeholder for j in jobs),
        )
        await asyncio.to_thread(write_suite, folder, suite)
    return finish(suite)


def _tier_name(tier: str | Tier | None) -> str | None:
    return tier.name if isinstance(tier, Tier) else tier
