"""How late the event loop runs while calls stream: the bound on a call's own timing error.

The client takes every instant of a call (headers, each read, the terminal event) when the
event loop gets round to it; when the loop is busy (a thousand runs setting up, a CPU-bound
task, a long redaction) bytes that arrived on time are stamped late, and the trace would blame
the model. So while any call of a loop streams, one tiny task per loop sleeps ``SAMPLE_S`` at a
time and notes how much later than asked it woke: the loop's lag. Every call watching the loop
(:meth:`LoopLag.watch` at send, :meth:`LoopLag.done` at its end) keeps the largest lag seen
while it ran, counted up to the instant it ends (a block still under way then counts too).

A read due while the loop was blocked is stamped at most that block's length late, and the
sampler sees every block of ``SAMPLE_S`` or more to within ``SAMPLE_S``; so each instant of the
call is late by at most ``lag_max + SAMPLE_S``, and any duration between two of them (ttft,
decode) is off by at most that much either way: the call's timing error bound. One sampler per
event loop, started by the first call watching it and stopped with the last: a loop with no
call streaming runs nothing of this.
"""

from __future__ import annotations

import asyncio
import weakref
from time import perf_counter_ns

SAMPLE_S = 0.002  # the sampler's sleep: 500 wake-ups a second while anything streams
SAMPLE_NS = int(SAMPLE_S * 1e9)


class Watch:
    """One call's view of its loop's lag: the largest seen since :meth:`LoopLag.watch`."""

    __slots__ = ("max_ns",)

    def __init__(self) -> None:
        self.max_ns = 0

    @property
    def bound_ns(self) -> int:
        """The call's timing error bound: its worst lag plus what the sampler may miss."""
        return self.max_ns + SAMPLE_NS


class LoopLag:
    """The lag sampler of one event loop, running while any :class:`Watch` is open."""

    def __init__(self) -> None:
        self._watches: set[Watch] = set()
        self._task: asyncio.Task[None] | None = None
        self._due = 0  # perf_counter_ns the sampler asked to wake at (0: not sleeping)

    def watch(self) -> Watch:
        w = Watch()
        self._watches.add(w)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sample())
        return w

    def done(self, w: Watch) -> Watch:
        """The call ended: a block under way now counts as lag it was measured under."""
        if w not in self._watches:
            return w
        if self._due:
            late = perf_counter_ns() - self._due
            if late > w.max_ns:
                w.max_ns = late
        self._watches.discard(w)
        return w

    async def _sample(self) -> None:
        watches = self._watches
        try:
            while watches:
                self._due = perf_counter_ns() + SAMPLE_NS
                await asyncio.sleep(SAMPLE_S)
                late = perf_counter_ns() - self._due
                self._due = 0
                for w in watches:
                    if late > w.max_ns:
                        w.max_ns = late
        finally:
            self._task, self._due = None, 0


# the loop is what is measured: its sampler lives as long as it does, and no longer
_SAMPLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLag] = (
    weakref.WeakKeyDictionary()
)


def loop_lag() -> LoopLag:
    """The running event loop's sampler (made on first use)."""
    loop = asyncio.get_running_loop()
    lag = _SAMPLERS.get(loop)
    if lag is None:
        lag = _SAMPLERS[loop] = LoopLag()
    return lag
