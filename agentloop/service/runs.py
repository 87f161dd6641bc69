"""The service's runs: submitted, queued under a concurrency bound, started through run handles.

One :class:`RunBook` per server. Every submitted run gets a service id at once (the ``202``
answer); it waits for a slot (status ``queued``), then starts through
:func:`agentloop.start_run`, whose handle gives the run id, the trace path, the event stream and
``cancel()``. Each run is an asyncio task the book owns (stored and awaited on shutdown), so a
cancel or a shutdown always ends with the trace closed as ``cancelled``.

The book is bounded both ways: past ``max_queued`` waiting runs a submission is refused (429),
and of the ended runs only the last ``keep_ended`` are held (their traces stay on disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentloop.api import RunConfig
from agentloop.config.tasks import Task
from agentloop.errors import RequestError
from agentloop.log import get_logger

# what a run's status can be while the service holds it; the finished ones are the runner's
QUEUED, RUNNING = "queued", "running"
MAX_QUEUED = 64  # runs waiting for a slot; one more is refused with 429
KEEP_ENDED = 1000  # ended runs the book remembers; older ones are forgotten (not their traces)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Run:
    """One submitted run as the service sees it (mutable: the book updates it as it goes)."""

    id: str
    task: Task
    tier: str | None
    status: str = QUEUED
    reason: str = ""
    submitted_at: str = field(default_factory=_now)
    started_at: str | None = None
    ended_at: str | None = None
    run_id: str | None = None
    trace_path: Path | None = None
    steps: int = 0
    elapsed_s: float | None = None
    success: bool | None = None
    success_detail: str = ""
    handle: Any = None  # the RunHandle once started
    started: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_requested: bool = False
    worker: asyncio.Task[None] | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON a client sees for this run."""
        return {
            "id": self.id,
            "task": self.task.name,
            "tier": self.tier,
            "status": self.status,
            "reason": self.reason,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "run_id": self.run_id,
            "steps": self.steps,
            "elapsed_s": self.elapsed_s,
            "success": self.success,
            "success_detail": self.success_detail,
            "trace": str(self.trace_path) if self.trace_path else None,
        }


StartRun = Callable[..., Any]  # agentloop.start_run's shape: (task, *, config) -> awaitable handle


class RunBook:
    """Submitted runs by id; at most ``concurrency`` run at once, the rest wait in order."""

    def __init__(
        self,
        start_run: StartRun,
        *,
        trace_dir: Path,
        concurrency: int = 4,
        tiers_file: Path | None = None,
        max_queued: int = MAX_QUEUED,
        keep_ended: int = KEEP_ENDED,
    ) -> None:
        self._start_run = start_run
        self._trace_dir = trace_dir
        self._tiers_file = tiers_file
        self._slots = asyncio.Semaphore(concurrency)
        self.concurrency = concurrency
        self.max_queued, self.keep_ended = max_queued, keep_ended
        self.runs: dict[str, Run] = {}
        self._ended: deque[str] = deque()  # ids of ended runs still held, oldest first
        self._closing = False

    def submit(self, task: Task, tier: str | None) -> Run:
        """Queue a run of ``task``; it starts when a slot is free (429 when the queue is full)."""
        waiting = sum(1 for r in self.runs.values() if r.status == QUEUED)
        if waiting >= self.max_queued:
            raise RequestError(
                f"the queue is full ({waiting} runs waiting for one of {self.concurrency} "
                "slots): submit again when runs have ended",
                field="",
                status=429,
            )
        run = Run(id=uuid.uuid4().hex[:12], task=task, tier=tier)
        self.runs[run.id] = run
        run.worker = asyncio.create_task(self._drive(run), name=f"agentloop-run-{run.id}")
        return run

    async def _drive(self, run: Run) -> None:
        try:
            async with self._slots:
                if run.cancel_requested or self._closing:
                    self._end(run, "cancelled", "cancelled before it started")
                    return
                config = RunConfig(
                    tier=run.tier, trace_dir=self._trace_dir, tiers_file=self._tiers_file
                )
                try:
                    handle = await self._start_run(run.task, config=config)
                except Exception as exc:  # a tier or setup problem: the run ends as an error
                    self._end(run, "error", getattr(exc, "message", None) or str(exc))
                    return
                run.handle, run.run_id = handle, handle.run_id
                run.trace_path = Path(handle.trace_path)
                run.status, run.started_at = RUNNING, _now()
                run.started.set()
                if run.cancel_requested:
                    handle.cancel()
                follow = asyncio.create_task(self._follow_steps(run, handle))
                try:
                    result = await handle
                except Exception as exc:  # a crash inside the run: the run is an error, the
                    # service goes on (the trace, if one was started, was closed by the runner)
                    get_logger("agentloop.service").error(
                        "run_crashed", id=run.id, error=f"{type(exc).__name__}: {exc}"
                    )
                    self._end(run, "error", f"crashed: {type(exc).__name__}: {exc}")
                    return
                finally:
                    follow.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await follow
                run.steps, run.elapsed_s = result.steps, result.elapsed_s
                run.success, run.success_detail = result.success, result.success_detail
                self._end(run, result.status, result.reason)
        finally:
            if not run.ended.is_set():  # cancelled from outside (shutdown of the loop itself)
                self._end(run, "cancelled", "service stopped")

    async def _follow_steps(self, run: Run, handle: Any) -> None:
        """Keep ``run.steps`` current from the run's own events, for ``GET /v1/runs/{id}``."""
        async for ev in handle.events():
            if ev.kind == "step_start" and ev.step is not None:
                run.steps = max(run.steps, int(ev.step))

    def _end(self, run: Run, status: str, reason: str) -> None:
        run.status, run.reason, run.ended_at = status, reason, _now()
        run.started.set()  # a subscriber waiting for the start learns it never will
        run.ended.set()
        self._ended.append(run.id)
        while len(self._ended) > self.keep_ended:
            self.runs.pop(self._ended.popleft(), None)

    def cancel(self, run: Run) -> None:
        """Cancel a run: a queued one never starts, a running one ends with status cancelled."""
        run.cancel_requested = True
        if run.handle is not None and not run.ended.is_set():
            run.handle.cancel()

    async def events(self, run: Run) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(event name, JSON data) of ``run`` from its start; ends with ``run_end``."""
        await run.started.wait()
        if run.handle is not None:
            async for ev in run.handle.events():
                if ev.kind == "run_end":
                    # the book's summary is final before a client sees the end, so a GET
                    # right after run_end never says "running"
                    await run.ended.wait()
                    yield ev.kind, event_json(ev)
                    return
                yield ev.kind, event_json(ev)
        # the run ended without a run_end event of its own (it never started, or crashed):
        # the stream still ends the way every stream does
        await run.ended.wait()
        yield (
            "run_end",
            {
                "kind": "run_end",
                "run_id": run.run_id,
                "t_s": run.elapsed_s or 0.0,
                "step": None,
                "span_id": None,
                "data": {
                    "status": run.status,
                    "reason": run.reason,
                    "steps": run.steps,
                    "elapsed_s": run.elapsed_s or 0.0,
                    "success": None,
                },
            },
        )

    async def close(self, grace_s: float = 30.0) -> int:
        """Cancel every run that has not ended and wait for their traces to close."""
        self._closing = True
        live = [r for r in self.runs.values() if not r.ended.is_set()]
        for run in live:
            self.cancel(run)
        workers = [r.worker for r in live if r.worker is not None]
        if workers:
            deadline = time.monotonic() + grace_s
            _, pending = await asyncio.wait(workers, timeout=max(0.0, deadline - time.monotonic()))
            for w in pending:
                w.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5.0)
        return len(live)


def event_json(ev: Any) -> dict[str, Any]:
    """A frozen :class:`agentloop.events.RunEvent` as the JSON of one server-sent event."""
    return {
        "kind": ev.kind,
        "run_id": ev.run_id,
        "t_s": ev.t_s,
        "step": ev.step,
        "span_id": ev.span_id,
        "data": dict(ev.data),
    }
