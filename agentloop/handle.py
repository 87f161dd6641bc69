"""The run handle: start a run, watch its events live, cancel it, await its result.

    handle = await agentloop.start_run("checkout-timeouts", tier="sim-ultrafast")
    handle.run_id, handle.trace_path          # known at once
    async for event in handle.events():       # history first, then live; ends after run_end
        ...
    handle.cancel()                           # the trace ends with status cancelled
    result = await handle                     # a RunResult; status "cancelled" after a cancel

Awaiting the handle never cancels the run (a service can stop waiting and look again later);
``cancel()`` does. A cancel gives a ``cancelled`` :class:`RunResult`, never a bare
``CancelledError``. Bad input (task or tier file, limits) raises from :func:`start_run` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator
from dataclasses import replace
from pathlib import Path
from typing import Any, Unpack

from agentloop import api
from agentloop.config.tasks import Task
from agentloop.events import RunEvent, fan_out
from agentloop.loop.ending import RunResult


class RunHandle:
    """A run in progress (or finished): its id, trace path, events, cancel and result."""

    def __init__(self, plan: api.RunPlan) -> None:
        self.run_id: str = plan.run_id
        self.trace_path: Path = plan.trace_path
        self._history: list[RunEvent] = []
        self._wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._job: asyncio.Task[RunResult] | None = None
        self._cancelled = False

    # -- fed by the runner ----------------------------------------------------------------------

    def _push(self, event: RunEvent) -> None:
        self._history.append(event)
        self._notify()

    def _notify(self) -> None:
        wake, self._wake = self._wake, asyncio.get_running_loop().create_future()
        if not wake.done():
            wake.set_result(None)

    def _start(self, job: asyncio.Task[RunResult]) -> None:
        self._job = job
        job.add_done_callback(lambda _: self._notify())

    # -- what a caller holds --------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._job is not None and self._job.done()

    async def events(self) -> AsyncIterator[RunEvent]:
        """Every event from the run's start (history first, then live); ends after ``run_end``."""
        i = 0
        while True:
            while i < len(self._history):
                event = self._history[i]
                i += 1
                yield event
                if event.kind == "run_end":
                    return
            if self.done:
                return  # ended before the runner started (setup failed or was cancelled)
            # shielded: a subscriber that stops waiting (cancelled, or its client went away)
            # must not cancel the future every other subscriber waits on
            await asyncio.shield(self._wake)

    def cancel(self) -> None:
        """Cancel the run: subprocesses killed, browser closed, trace ended as ``cancelled``."""
        if self._job is not None and not self._job.done():
            self._cancelled = True
            self._job.cancel()

    async def result(self) -> RunResult:
        """The run's result once it ends (status ``cancelled`` after :meth:`cancel`)."""
        assert self._job is not None
        await asyncio.wait([self._job])  # waiting is not owning: the caller's cancel stays theirs
        if self._job.cancelled():
            return self._cancelled_result()
        return self._job.result()

    def __await__(self) -> Generator[Any, None, RunResult]:
        return self.result().__await__()

    def _cancelled_result(self) -> RunResult:
        end = next((e for e in reversed(self._history) if e.kind == "run_end"), None)
        text = next(
            (
                str(e.data.get("text") or "")
                for e in reversed(self._history)
                if e.kind == "model_end" and e.data.get("text")
            ),
            "",
        )
        if end is None:  # cancelled while the workspace was being set up: no trace was started
            return RunResult(
                self.run_id,
                "cancelled",
                "cancelled before the run started",
                0,
                "",
                0.0,
                trace_path=None,
            )
        return RunResult(
            self.run_id,
            "cancelled",
            str(end.data.get("reason", "")),
            int(end.data.get("steps", 0)),
            text,
            float(end.data.get("elapsed_s", 0.0)),
            trace_path=str(self.trace_path),
        )


async def start_run(
    task: Task | str | Path,
    *,
    config: api.RunConfig | None = None,
    **options: Unpack[api.RunOptions],
) -> RunHandle:
    """Start a run in the background and return its handle at once.

    Takes what :func:`agentloop.run_task` takes (a :class:`agentloop.RunConfig`, its fields as
    keywords, or both); ``events`` (an extra sink) sees every event too. The run is a task on
    the running loop, owned by the handle.
    """
    the_config = api.configure(config, **options)
    plan = api.plan_run(task, the_config)
    handle = RunHandle(plan)
    watched = replace(the_config, events=fan_out(handle._push, the_config.events))
    handle._start(
        asyncio.create_task(api.execute(plan, watched), name=f"agentloop-run-{plan.run_id}")
    )
    return handle
