"""The service's runs: submitted, written down, queued under a concurrency bound, started.

One :class:`RunBook` per server, over a :class:`agentloop.service.store.RunStore`. Every accepted
run is a row in the store before its ``202`` answer; it waits for a slot (status ``queued``),
then starts through :func:`agentloop.start_run` (or, with ``serve --ray``, the Ray backend's
:meth:`agentloop.suite.ray_backend.RayBackend.start_run`: the same handle for a run on a
cluster), whose handle gives the runner's run id, the
trace path, the event stream and ``cancel()``; its start and its end are written as they
happen. Each run is an asyncio task the book owns (stored and awaited on shutdown), so a cancel
or a shutdown always ends with the trace closed as ``cancelled``.

On start (:meth:`RunBook.recover`) the book reads the store: queued runs wait again, in the
order they were submitted; runs that were in flight when the server died are ``interrupted``
(their trace ends where the run was) and, when asked, run again once as a new run. A graceful
stop leaves queued runs queued, so the next start picks them up.

The book is bounded: past ``max_queued`` waiting runs a submission is refused (429 with a
Retry-After), and of the ended runs only the last ``keep_ended`` are held in memory with their
events (older ones are answered from the store). The store is bounded too: :func:`prune_forever`
deletes the rows of ended runs older than ``keep_days`` or past the newest ``keep_runs``, at
start and every ``every_s`` (queued and running runs are never deleted; the traces stay on disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from agentloop.api import RunConfig
from agentloop.config.tasks import Task
from agentloop.errors import AgentloopError, RequestError
from agentloop.log import get_logger
from agentloop.service.run import INTERRUPTED, QUEUED, RUNNING, Run, now
from agentloop.service.store import RunStore

MAX_QUEUED = 64  # runs waiting for a slot; one more is refused with 429
KEEP_ENDED = 1000  # ended runs held in memory with their events; older ones from the store
MAX_FOLLOWERS = 32  # event streams of one run at once; one more is refused with 429
KEEP_DAYS = 30.0  # ended runs older than this are deleted from the store (their traces stay)
KEEP_RUNS = 10_000  # of the ended runs the store keeps the newest this many
PRUNE_EVERY_S = 3600.0  # how often the store is pruned after the prune at start
STOPPED = "the service stopped while the run was in flight; its trace ends where the run was"
EARLY = "the service stopped while the run was being set up, before its trace began"

Parse = Callable[[Any], tuple[Task, str | None]]  # a request body -> (task, tier), or 4xx


StartRun = Callable[..., Any]  # agentloop.start_run's shape: (task, *, config) -> awaitable handle
RunEnded = Callable[[Run], Any]  # told of every run that ended (the metrics); may be async


class RunBook:
    """Submitted runs by id; at most ``concurrency`` run at once, the rest wait in order."""

    def __init__(
        self,
        start_run: StartRun,
        *,
        store: RunStore,
        trace_dir: Path,
        concurrency: int = 4,
        tiers_file: Path | None = None,
        max_queued: int = MAX_QUEUED,
        keep_ended: int = KEEP_ENDED,
        on_end: RunEnded | None = None,
    ) -> None:
        self._start_run = start_run
        self.store = store
        self._trace_dir = trace_dir
        self._tiers_file = tiers_file
        self._slots = asyncio.Semaphore(concurrency)
        self.concurrency = concurrency
        self.max_queued, self.keep_ended = max_queued, keep_ended
        self._on_end = on_end
        self.runs: dict[str, Run] = {}  # live runs, and the last keep_ended ended ones
        self._ended: deque[str] = deque()  # ids of ended runs still held, oldest first
        self.counts: Counter[str] = Counter()  # runs by status, the store's whole history
        self._durations: deque[float] = deque(maxlen=32)  # the last runs' seconds, for Retry-After
        self._submitting = asyncio.Lock()  # one submission at a time: key check, bound, insert
        self.closing = False
        self._cancel_on_close = False

    @property
    def queued(self) -> int:
        return self.counts[QUEUED]

    @property
    def running(self) -> int:
        return self.counts[RUNNING]

    def _set(self, run: Run, status: str) -> None:
        self.counts[run.status] -= 1
        self.counts[status] += 1
        run.status = status

    def retry_after(self) -> int:
        """Seconds after which a refused submission may find room: the mean of the last runs'
        durations times the queue's turns ahead, at least 1, at most 10 minutes."""
        mean = sum(self._durations) / len(self._durations) if self._durations else 5.0
        turns = (self.queued + 1) / self.concurrency
        return max(1, min(600, math.ceil(mean * turns)))

    # -- submitting -----------------------------------------------------------------------------

    async def submit(
        self,
        task: Task,
        tier: str | None,
        request: Any,
        *,
        key: str | None = None,
        digest: str | None = None,
        resumed_from: str | None = None,
    ) -> tuple[Run, bool]:
        """Write down and queue a run of ``task``; (the run, whether it is new). With an
        idempotency ``key`` seen before the first run comes back (409 if ``digest``, the
        body's, differs); past ``max_queued`` waiting runs a 429; while stopping a 503."""
        async with self._submitting:
            if self.closing:
                raise RequestError(
                    "the service is stopping and takes no new runs: submit again once it is back",
                    field="",
                    status=503,
                )
            if key is not None:
                row = await self.store.by_key(key)
                if row is not None:
                    if row["idem_digest"] != digest:
                        raise RequestError(
                            f"header 'Idempotency-Key': run {row['id']} was submitted with this "
                            "key and another body (use a new key for a new run)",
                            field="Idempotency-Key",
                            status=409,
                        )
                    return self.runs.get(row["id"]) or Run.from_row(row), False
            if self.queued >= self.max_queued:
                raise RequestError(
                    f"the queue is full ({self.queued} runs waiting for one of "
                    f"{self.concurrency} slots): submit again after Retry-After seconds",
                    field="",
                    status=429,
                )
            run = Run(
                id=uuid.uuid4().hex[:12],
                task_name=task.name,
                tier=tier,
                task=task,
                resumed_from=resumed_from,
            )
            await self.store.add({**run.row(), "idem_key": key, "idem_digest": digest}, request)
            self._queue(run)
        return run, True

    def _queue(self, run: Run) -> None:
        self.counts[QUEUED] += 1
        self.runs[run.id] = run
        run.worker = asyncio.create_task(self._drive(run), name=f"agentloop-run-{run.id}")

    async def recover(self, parse: Parse, *, resume: bool = False) -> dict[str, int]:
        """Read the store at start: queued runs wait again in their order; runs in flight when
        the service died are ``interrupted`` and, with ``resume``, run once more as new runs.
        How many of each."""
        self.counts = Counter(await self.store.counts())
        again = 0
        for row in await self.store.with_status(RUNNING):
            if row["trace"] and await asyncio.to_thread(Path(row["trace"]).is_file):
                await self.store.update(
                    row["id"], status=INTERRUPTED, reason=STOPPED, ended_at=now()
                )
            else:  # stopped while its workspace was set up: the runner had written nothing
                await self.store.update(
                    row["id"], status=INTERRUPTED, reason=EARLY, ended_at=now(), trace=None
                )
            self.counts[RUNNING] -= 1
            self.counts[INTERRUPTED] += 1
            if resume and row["resumed_from"] is None:  # once: a resumed run is not resumed again
                try:
                    task, tier = parse(row["request"])
                except AgentloopError as exc:
                    await self.store.update(row["id"], reason=f"interrupted; not resumed: {exc}")
                    continue
                try:
                    run, _ = await self.submit(task, tier, row["request"], resumed_from=row["id"])
                except RequestError as exc:  # the queue is full already
                    await self.store.update(row["id"], reason=f"interrupted; not resumed: {exc}")
                    continue
                await self.store.update(row["id"], resumed_as=run.id)
                again += 1
        queued = await self.store.with_status(QUEUED)
        for row in queued:
            if row["id"] in self.runs:
                continue  # just resubmitted above
            run = Run.from_row(row)
            self.counts[QUEUED] -= 1  # _queue counts it again
            try:
                run.task, run.tier = parse(row["request"])
            except AgentloopError as exc:  # the task file went away or changed while down
                self.counts[QUEUED] += 1
                await self._finish(run, "error", f"not run after the restart: {exc}")
                continue
            self._queue(run)
        return {"queued": len(queued), "resumed": again}

    # -- running --------------------------------------------------------------------------------

    async def _drive(self, run: Run) -> None:
        async with self._slots:
            if self.closing:  # stays queued in the store: the next start runs it
                return
            run.slotted = True
            if run.cancel_requested:
                await self._finish(run, "cancelled", "cancelled before it started")
                return
            assert run.task is not None
            config = RunConfig(  # the submission's id is the run's: one id everywhere
                tier=run.tier, trace_dir=self._trace_dir, tiers_file=self._tiers_file, run_id=run.id
            )
            try:
                handle = await self._start_run(run.task, config=config)
            except Exception as exc:  # checked at the door; a tier file edited since, say
                await self._finish(run, "error", getattr(exc, "message", None) or str(exc))
                return
            run.handle, run.run_id = handle, handle.run_id
            run.trace_path = Path(handle.trace_path)
            run.started_at = now()
            self._set(run, RUNNING)
            await self.store.update(
                run.id,
                status=RUNNING,
                started_at=run.started_at,
                run_id=run.run_id,
                trace=str(run.trace_path),
            )
            run.started.set()
            if run.cancel_requested or (self.closing and self._cancel_on_close):
                handle.cancel()  # cancelled, or the stop came while it started
            follow = asyncio.create_task(self._follow_steps(run, handle))
            try:
                result = await handle
            except Exception as exc:  # a crash inside the run: the run is an error, the
                # service goes on (the trace, if one was started, was closed by the runner)
                get_logger("agentloop.service").error(
                    "run_crashed", id=run.id, error=f"{type(exc).__name__}: {exc}"
                )
                await self._finish(run, "error", f"crashed: {type(exc).__name__}: {exc}")
                return
            finally:
                follow.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follow
            run.steps, run.elapsed_s = result.steps, result.elapsed_s
            run.success, run.success_detail = result.success, result.success_detail
            await self._finish(run, result.status, result.reason)

    async def _follow_steps(self, run: Run, handle: Any) -> None:
        """Keep ``run.steps`` current from the run's own events, for ``GET /v1/runs/{id}``."""
        async for ev in handle.events():
            if ev.kind == "step_start" and ev.step is not None:
                run.steps = max(run.steps, int(ev.step))

    async def _finish(self, run: Run, status: str, reason: str) -> None:
        run.reason, run.ended_at = reason, now()
        self._set(run, status)
        if run.elapsed_s is not None:
            self._durations.append(run.elapsed_s)
        await self.store.update(
            run.id,
            status=status,
            reason=reason,
            ended_at=run.ended_at,
            steps=run.steps,
            elapsed_s=run.elapsed_s,
            success=run.success,
            success_detail=run.success_detail,
        )
        self._ended_in_memory(run)
        if self._on_end is not None:
            try:
                done = self._on_end(run)
                if asyncio.iscoroutine(done):
                    await done
            except Exception as exc:  # the metrics never end the service
                get_logger("agentloop.service").error(
                    "on_end_failed", id=run.id, error=f"{type(exc).__name__}: {exc}"
                )

    def _ended_in_memory(self, run: Run) -> None:
        run.started.set()  # a subscriber waiting for the start learns it never will
        run.ended.set()
        self._ended.append(run.id)
        while len(self._ended) > self.keep_ended:
            self.runs.pop(self._ended.popleft(), None)

    async def prune(self, keep_days: float = KEEP_DAYS, keep_runs: int = KEEP_RUNS) -> int:
        """Delete from the store the ended runs that ended more than ``keep_days`` ago or are
        not among the newest ``keep_runs`` ended ones (and forget them here); how many. Queued
        and running runs stay; trace files are never touched."""
        gone = await self.store.prune(
            ended_before=now(timedelta(days=keep_days)), keep=keep_runs, live=(QUEUED, RUNNING)
        )
        for run_id, status in gone:
            self.counts[status] -= 1
            held = self.runs.get(run_id)
            if held is not None and held.ended.is_set():
                del self.runs[run_id]
        if gone:
            self._ended = deque(i for i in self._ended if i in self.runs)
        return len(gone)

    # -- what clients ask -----------------------------------------------------------------------

    async def find(self, run_id: str) -> Run | None:
        """The run with this id: held in memory, else as the store has it."""
        if run_id in self.runs:
            return self.runs[run_id]
        row = await self.store.get(run_id)
        return Run.from_row(row) if row is not None else None

    async def page(
        self, *, status: str | None, task: str | None, before: int | None, limit: int
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Summaries newest first (the live ones as they are now) and the next page's cursor."""
        rows, cursor = await self.store.page(status=status, task=task, before=before, limit=limit)
        out = []
        for row in rows:
            held = self.runs.get(row["id"])
            out.append(held.summary() if held is not None else Run.from_row(row).summary())
        return out, cursor

    def cancel(self, run: Run) -> None:
        """Cancel a run: a queued one never starts, a running one ends with status cancelled."""
        run.cancel_requested = True
        if run.handle is not None and not run.ended.is_set():
            run.handle.cancel()

    # -- stopping -------------------------------------------------------------------------------

    async def close(self, drain_s: float = 0.0, grace_s: float = 30.0) -> int:
        """Stop: take no new runs, leave the queued ones queued (in the store, for the next
        start), let runs in flight finish for ``drain_s``, then cancel the rest and wait for
        their traces to close. How many were cancelled."""
        self.closing = True
        self._cancel_on_close = drain_s <= 0
        for run in list(self.runs.values()):
            if run.status == QUEUED and not run.slotted and run.worker is not None:
                run.worker.cancel()
                run.reason = "the service stopped; the run waits in the queue for its next start"
                run.started.set()
                run.ended.set()  # its event streams end; its row stays queued
        live = [r for r in self.runs.values() if r.slotted and not r.ended.is_set()]
        workers = [r.worker for r in live if r.worker is not None]
        if workers and drain_s > 0:
            await asyncio.wait(workers, timeout=drain_s)
        self._cancel_on_close = True  # one that starts from now on is cancelled at once
        cancelled = [r for r in live if not r.ended.is_set()]
        for run in cancelled:
            self.cancel(run)
        pending = [r.worker for r in cancelled if r.worker is not None]
        if pending:
            deadline = time.monotonic() + grace_s
            _, stuck = await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
            for w in stuck:
                w.cancel()
            if stuck:
                await asyncio.wait(stuck, timeout=5.0)
        return len(cancelled)


async def prune_forever(
    book: RunBook, keep_days: float, keep_runs: int, every_s: float = PRUNE_EVERY_S
) -> None:
    """Prune ``book``'s store every ``every_s`` seconds until cancelled; a failure is logged,
    never the end of the service."""
    log = get_logger("agentloop.service")
    while True:
        await asyncio.sleep(every_s)
        try:
            pruned = await book.prune(keep_days, keep_runs)
        except Exception as exc:
            log.error("prune_failed", error=f"{type(exc).__name__}: {exc}")
            continue
        if pruned:
            log.info("runs_pruned", runs=pruned, keep_days=keep_days, keep_runs=keep_runs)
