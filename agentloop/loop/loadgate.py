"""The process's run gate: runs set up together start their clocks once all are set up, spaced.

What a suite's start gate (:mod:`agentloop.suite.gate`) gives its first wave, given to every run
of the embedding API and the service without the caller knowing: two hundred concurrent
:func:`agentloop.run_task` calls set up at once (working copy, jail, simulator, client: tens
of milliseconds of CPU each, on the event loop), and the first runs' streams were read late by
a loop busy setting the others up (measured: -17% mean output tok/s, -40% at worst, against
the simulator's pacing: ``tests/benchmarks/bench_load.py``). So a run *arrives* here before its
set-up (:meth:`RunGate.arrive`) and, set up, waits (:meth:`RunGate.start`) until no run of
the loop is still setting up, or for ``max_hold_s`` at most, then goes through one every
``spacing_s``; only then does its run span (the agent's clock) start. A lone run passes at
once.

One gate per event loop (its asyncio primitives belong to one loop), made on first use:
:func:`gate_for_loop`. ``AGENTLOOP_LOAD_GATE=off`` in the environment turns it off (the
benchmark's side-by-side); each run holds a :class:`Pass`, passed explicitly (no ambient state).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from dataclasses import dataclass

SPACING_S = 0.01  # between two runs let through (the suite gate's, measured there)
# a set-up run waits at most this long for the others (a service never stalls). Re-checked for
# 200 set-ups on a busy machine (issue 28, bench_load.py at load 13-36 on 2 cores): their wave
# took 58-173 s, which no hold a service could bear covers; the lag bound flags what it misses
MAX_HOLD_S = 2.0
OFF_ENV = "AGENTLOOP_LOAD_GATE"


@dataclass(slots=True)
class Pass:
    """One run's place at the gate: whether its set-up still counts."""

    setting_up: bool = True


class RunGate:
    """Counts the runs setting up; lets set-up runs through once none is, spaced."""

    def __init__(self, spacing_s: float = SPACING_S, max_hold_s: float = MAX_HOLD_S) -> None:
        self.spacing_s, self.max_hold_s = spacing_s, max_hold_s
        self.setting_up = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._turn = asyncio.Lock()
        self._next = 0.0  # perf_counter instant the next run may pass
        self.held = 0  # runs that waited (for the benchmark and tests)

    def arrive(self) -> Pass:
        """A run begins its set-up."""
        self.setting_up += 1
        self._idle.clear()
        return Pass()

    def leave(self, p: Pass) -> None:
        """The run's set-up is over (done, failed or cancelled); idempotent."""
        if p.setting_up:
            p.setting_up = False
            self.setting_up -= 1
            if self.setting_up <= 0:
                self.setting_up = 0
                self._idle.set()

    async def start(self, p: Pass) -> None:
        """The run is set up: wait for the others' set-ups (bounded), then for its turn."""
        self.leave(p)
        if not self._idle.is_set():
            self.held += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), self.max_hold_s)
        async with self._turn:
            delay = self._next - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            self._next = time.perf_counter() + self.spacing_s


_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RunGate] = weakref.WeakKeyDictionary()


def gate_for_loop() -> RunGate | None:
    """The running loop's gate (made on first use); None when ``AGENTLOOP_LOAD_GATE=off``."""
    if os.environ.get(OFF_ENV, "").lower() in ("off", "0", "no", "false"):
        return None
    loop = asyncio.get_running_loop()
    gate = _GATES.get(loop)
    if gate is None:
        gate = _GATES[loop] = RunGate()
    return gate
