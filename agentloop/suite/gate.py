"""The start gate of a suite's first wave: its runs' model calls begin once every run is set up.

Setting a run up (its working copy, its jail's ``bwrap`` and init interpreter, its trace) costs
tens of milliseconds of CPU, and a suite starts ``concurrency`` runs at once: with a thousand,
that is tens of seconds of a saturated machine, and the early runs' streams, paced by the
simulator, would be read late by a client whose event loop is busy starting the others. So the
runs of the first wave wait at the gate (in :meth:`agentloop.suite.shared.SharedSim.client`,
once the run has its route, its client and a connection to the simulator, before the run's
trace and clock start) until every one of them has arrived or ended, or no run has arrived for
``max_wait_s``; then they go through one every ``spacing_s``, so that a thousand first
requests do not land on the same instant, nor, a call later, a thousand stream ends and next
requests. Runs after the first wave pass at once. Each run of the first wave holds a
:class:`Ticket`, given to every call of the gate it makes (no ambient state).

``freeze_gc``, when the caller asks for it (``agentloop suite`` does; a library must not
decide for the process it lives in): when the gate opens, what the wave's set-up made is frozen
for the garbage collector (:func:`gc.freeze`) until the suite ends (:meth:`StartGate.close`),
so that a full collection does not walk it all again.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from dataclasses import dataclass

MAX_WAIT_S = 30.0  # since the last arrival: a run with a slow setup command holds no one longer
# between two runs let through: 1,000 runs in 10 s (measured at 1,000 runs, 5 ms: 1.4-2.0% mean
# pacing error; 10 ms: 1.0-1.4%)
SPACING_S = 0.01


@dataclass(slots=True)
class Ticket:
    """One run's place at the gate: whether it has arrived there yet."""

    arrived: bool = False


class StartGate:
    """Holds ``expected`` runs until all have arrived or ended; lets them through spaced."""

    def __init__(
        self,
        expected: int,
        max_wait_s: float = MAX_WAIT_S,
        spacing_s: float | None = None,
        *,
        freeze_gc: bool = False,
    ) -> None:
        self.expected = expected
        self.freeze_gc = freeze_gc
        self.max_wait_s = max_wait_s
        self.spacing_s = SPACING_S if spacing_s is None else spacing_s  # read now (the benchmark)
        self.arrived = 0
        self._open = asyncio.Event()
        self._turn = asyncio.Lock()
        self._next = 0.0  # perf_counter instant the next waiter may pass
        self.held_s = 0.0  # how long the gate stayed shut (for the benchmark)
        self._frozen = False
        self._t0 = self._last = time.perf_counter()

    def _check(self) -> None:
        if not self._open.is_set() and self.arrived >= self.expected:
            self._open_now()

    def _open_now(self) -> None:
        self.held_s = time.perf_counter() - self._t0
        self._open.set()
        # what the wave's set-up made lives as long as its runs: moved out of the collector's
        # sight, so that each full collection does not walk a thousand runs' state again (a
        # collection's pause is a late read of every stream; measured: 180-430 ms each at 1,000)
        if self.freeze_gc:
            gc.freeze()
            self._frozen = True

    def close(self) -> None:
        """The suite is over: what the gate froze is collectable again."""
        if self._frozen:
            self._frozen = False
            gc.unfreeze()

    def leave(self, ticket: Ticket) -> None:
        """The run ended; one that never arrived is no longer waited for."""
        if not ticket.arrived:
            self.expected -= 1
            self._check()

    def will_hold(self, ticket: Ticket) -> bool:
        """Whether :meth:`wait` holds the ticket's run (not arrived yet, the gate still shut)."""
        return not ticket.arrived and not self._open.is_set()

    async def wait(self, ticket: Ticket) -> None:
        """Arrive (once per run) and wait for the gate, then for this run's turn through it."""
        if ticket.arrived:
            return
        ticket.arrived = True
        if self._open.is_set():
            return  # a later wave: no one to wait for
        self.arrived += 1
        self._last = time.perf_counter()
        self._check()
        while not self._open.is_set():
            left = self._last + self.max_wait_s - time.perf_counter()
            if left <= 0:
                self._open_now()
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._open.wait(), left)
        async with self._turn:
            delay = self._next - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            self._next = time.perf_counter() + self.spacing_s
