"""A suite's jail closer: emptied jails of ended runs are torn down behind the runs, spaced.

Closing a bubblewrap jail makes the kernel tear down its namespaces (network, mounts, PIDs):
tens of milliseconds of kernel work, some of it under machine-wide locks. A suite of a
thousand runs ending within seconds of each other tore down a thousand jails in a burst, and
the runs still streaming shared the two cores with it: their clients read the simulator's
tokens late (the mean per-call output-rate error was 4.4% against 2.5% with every teardown
after the suite, ``tests/benchmarks/bench_suite_scale.py``). So within a suite a run's jail
is first *emptied* at the run's end (its init, PID 1 of the namespace, SIGKILLs every other
process in it: nothing of the run outlives the run) and the idle init is then closed here, one
jail at a time with ``spacing_s`` between closes while runs go on; :meth:`JailCloser.drain`, at
the suite's end, closes the rest ``at_once`` at a time. A jail is handed to a closer only
explicitly (``jail.aclose(closer)``; a suite's run gets its closer in
:attr:`agentloop.api.SuiteScope.closer`); without one a jail closes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

from agentloop.log import get_logger

SPACING_S = 0.1  # while runs go on: at most ~10 teardowns a second (50/s measured worse)
DRAIN_AT_ONCE = 8


class JailCloser:
    """Closes deferred jails in the background, spaced; :meth:`drain` waits for all."""

    def __init__(self, spacing_s: float = SPACING_S) -> None:
        self.spacing_s = spacing_s
        self._queue: deque[Callable[[], Awaitable[None]]] = deque()
        self._workers: set[asyncio.Task[None]] = set()
        self._draining = False
        self._wake = asyncio.Event()  # set by drain: a worker between two closes stops waiting
        self.closed = 0

    def defer(self, close: Callable[[], Awaitable[None]]) -> None:
        """Close a jail later (``close`` tears it down); its run has emptied it already."""
        self._queue.append(close)
        if not self._workers:
            self._start()

    @property
    def pending(self) -> int:
        return len(self._queue)

    def _start(self) -> None:
        task = asyncio.get_running_loop().create_task(self._work())
        self._workers.add(task)
        task.add_done_callback(self._workers.discard)

    async def _work(self) -> None:
        while self._queue:
            close = self._queue.popleft()
            try:
                await close()
            except Exception as exc:  # one jail's teardown failing never stops the others
                get_logger("agentloop.sandbox.jail").warning("jail_close_failed", error=str(exc))
            self.closed += 1
            if not self._draining:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.spacing_s)

    async def drain(self, at_once: int = DRAIN_AT_ONCE) -> None:
        """Close every deferred jail now, ``at_once`` at a time; returns when all are closed."""
        self._draining = True
        self._wake.set()
        while len(self._workers) < min(at_once, len(self._queue)):
            self._start()
        while self._workers:
            await asyncio.gather(*list(self._workers), return_exceptions=True)


@contextlib.asynccontextmanager
async def closing_behind(spacing_s: float = SPACING_S) -> AsyncIterator[JailCloser]:
    """A closer for the jails closed with it within (``jail.aclose(closer)``: emptied at once,
    torn down behind); on the way out (also on an error or a cancel) every one is closed
    before this returns."""
    closer = JailCloser(spacing_s)
    try:
        yield closer
    finally:
        await asyncio.shield(closer.drain())
