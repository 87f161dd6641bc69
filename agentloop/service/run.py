"""One submitted run as the service sees it: its status, its JSON summary, its row in the store.

:class:`Run` is mutable (the book, :class:`agentloop.service.runs.RunBook`, updates it as the run
goes); its summary is what a client sees (schema ``RunSummary``), its row what the store keeps,
and :meth:`Run.end_event` the ``run_end`` an event stream ends with when the run had none of its
own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentloop.config.tasks import Task

# the statuses the service gives a run besides how the runner ends one (ok, error, budget, ...)
QUEUED, RUNNING, INTERRUPTED = "queued", "running", "interrupted"


def now(ago: timedelta = timedelta()) -> str:
    when = datetime.now(UTC) - ago
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Run:
    """One submitted run as the service sees it (mutable: the book updates it as it goes)."""

    id: str
    task_name: str
    tier: str | None
    task: Task | None = None  # None for a run read back from the store that will not run
    status: str = QUEUED
    reason: str = ""
    submitted_at: str = field(default_factory=now)
    started_at: str | None = None
    ended_at: str | None = None
    run_id: str | None = None
    trace_path: Path | None = None
    steps: int = 0
    elapsed_s: float | None = None
    success: bool | None = None
    success_detail: str = ""
    resumed_from: str | None = None
    resumed_as: str | None = None
    handle: Any = None  # the RunHandle once started
    started: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_requested: bool = False
    worker: asyncio.Task[None] | None = None
    followers: int = 0  # event streams open on this run
    slotted: bool = False  # holds one of the concurrency slots (starting or running)

    def summary(self) -> dict[str, Any]:
        """The JSON a client sees for this run (schema ``RunSummary``)."""
        return {
            "id": self.id,
            "task": self.task_name,
            "tier": self.tier,
            "status": self.status,
            "reason": self.reason,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "run_id": self.run_id,
            "steps": self.steps,
            "elapsed_s": self.elapsed_s,
            "wall_s": self.wall_s(),
            "success": self.success,
            "success_detail": self.success_detail,
            "trace": str(self.trace_path) if self.trace_path else None,
            "resumed_from": self.resumed_from,
            "resumed_as": self.resumed_as,
        }

    def wall_s(self) -> float | None:
        """Start to end on the service's clock: the run's set-up (workspace, jail, setup
        commands) and success check included, which ``elapsed_s`` (the agent's time, what the
        what-if re-times) leaves out; None until it has ended."""
        if self.started_at is None or self.ended_at is None:
            return None
        start, end = (
            datetime.fromisoformat(t.replace("Z", "+00:00"))
            for t in (self.started_at, self.ended_at)
        )
        return round((end - start).total_seconds(), 3)

    def row(self) -> dict[str, Any]:
        """The store's columns of this run (its summary's fields but the derived wall_s)."""
        out = self.summary()
        del out["wall_s"]
        return out

    async def events(self) -> AsyncIterator[tuple[int, str, dict[str, Any]]]:
        """(sequence number, event name, JSON data) of this run from its start; ends with
        ``run_end``. The numbers are the same for every subscriber (``Last-Event-ID``)."""
        await self.started.wait()
        seq = 0
        if self.handle is not None:
            async for ev in self.handle.events():
                if ev.kind == "run_end":
                    # the book's summary is final before a client sees the end, so a GET
                    # right after run_end never says "running"
                    await self.ended.wait()
                    yield seq, ev.kind, {"id": self.id, **ev.as_json()}
                    return
                yield seq, ev.kind, {"id": self.id, **ev.as_json()}
                seq += 1
        # the run ended without a run_end event of its own (it never started, crashed, ran
        # before a restart, or waits for the next start): the stream still ends the same way
        await self.ended.wait()
        yield seq, "run_end", self.end_event()

    def end_event(self) -> dict[str, Any]:
        """The ``run_end`` event's data for a run that ended without one of its own (it never
        started, crashed, ran before a restart, or waits for the next start)."""
        return {
            "id": self.id,
            "kind": "run_end",
            "run_id": self.run_id,
            "t_s": self.elapsed_s or 0.0,
            "step": None,
            "span_id": None,
            "data": {
                "status": self.status,
                "reason": self.reason,
                "steps": self.steps,
                "elapsed_s": self.elapsed_s or 0.0,
                "success": self.success,
            },
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Run:
        """A run as the store has it; one that has ended has its events set."""
        run = cls(
            id=row["id"],
            task_name=row["task"],
            tier=row["tier"],
            status=row["status"],
            reason=row["reason"],
            submitted_at=row["submitted_at"],
            started_at=row["started_at"],
            ended_at=row["ended_at"],
            run_id=row["run_id"],
            trace_path=Path(row["trace"]) if row["trace"] else None,
            steps=row["steps"],
            elapsed_s=row["elapsed_s"],
            success=row["success"],
            success_detail=row["success_detail"],
            resumed_from=row["resumed_from"],
            resumed_as=row["resumed_as"],
        )
        if run.status not in (QUEUED, RUNNING):
            run.started.set()
            run.ended.set()
        return run
