"""How long a model call may stay silent before its attempt is given up: two bounds and their watch.

A working endpoint is silent before its first token while it reads the prompt and, on a
reasoning model, while it thinks; once tokens flow it has no reason to pause for long. So an
attempt has two bounds (:class:`Bounds`):

- ``first``, until the first event with a payload (until the first *visible* one when the tier
  asks for reasoning, whose tokens may stay hidden): the tier's ``first_token_timeout_s`` when
  set, else from its speed profile, ``stall + FACTOR * (base + prefill(N) + decode(N, R))``
  with ``N = body bytes / BYTES_PER_TOKEN`` (tool schemas included, as a server counts them) and
  ``R`` the effort's :data:`REASONING_ALLOWANCE` (at most ``max_output_tokens``); a tier without
  a profile: ``stall``. Never below ``stall``. :func:`first_token_timeout` is the formula.
- ``stall``, the tier's ``stall_timeout_s``: the longest gap between two network reads after that.

Both count silence since the last network read (headers, or any event). The HTTP read timeout
is ``first`` (it bounds the wait for the headers, and backs the watch up); :class:`Watch`
tightens the bound to ``stall`` once the first token is in: one timer, re-armed only when it
fires (at least every ``stall`` while the first token is awaited, so its arrival is seen before
the stall deadline it starts), so a chunk costs one attribute store (``Turn.t_read``), not a
timer each.
"""

from __future__ import annotations

import asyncio
from asyncio import CancelledError
from dataclasses import dataclass
from time import perf_counter_ns
from types import TracebackType

from agentloop.clients._stream import Turn
from agentloop.config.tiers import Tier

FACTOR = 2.0  # the profile is a median; a loaded server or a longer think may take twice that
BYTES_PER_TOKEN = 3.0  # English text runs ~4 bytes a token and JSON framing adds: errs long
# hidden reasoning tokens a call of each effort is allowed before its first visible token:
# rough typical figures (not measured here); a tier that knows better sets first_token_timeout_s
REASONING_ALLOWANCE = {
    "none": 0,
    "minimal": 256,
    "low": 2_000,
    "medium": 6_000,
    "high": 16_000,
    "xhigh": 32_000,
}


def reasons(tier: Tier) -> bool:
    """Whether the tier asks for reasoning, so output before the first visible token is hidden."""
    return tier.options.get("reasoning_effort") not in (None, "none")


def first_token_timeout(tier: Tier, stall_s: float, body_bytes: int) -> float:
    """Seconds of silence an attempt may wait for its first token (module docstring)."""
    if tier.first_token_timeout_s is not None:
        return max(stall_s, tier.first_token_timeout_s)
    if tier.profile is None:
        return stall_s
    n = int(body_bytes / BYTES_PER_TOKEN)
    r = REASONING_ALLOWANCE.get(tier.options.get("reasoning_effort") or "none", 0)
    if tier.options.get("max_output_tokens"):
        r = min(r, int(tier.options["max_output_tokens"]))
    wait = tier.profile.first_token_s(n) + tier.profile.decode_s(n, r)
    return stall_s + FACTOR * wait


@dataclass(frozen=True, slots=True)
class Bounds:
    """One attempt's two silence bounds, in seconds; ``hidden``: ``first`` lasts until the first
    visible event, not the first hidden one."""

    first_s: float
    stall_s: float
    hidden: bool

    def waiting(self, turn: Turn) -> bool:
        """Whether ``turn`` is still before its first token (so ``first_s`` applies)."""
        return (turn.t_first_visible if self.hidden else turn.t_first) is None

    def stall_error(self, turn: Turn) -> str:
        """The failed attempt's error when the bound in force ran out (it goes in the trace)."""
        if self.waiting(turn):
            what = "visible token" if self.hidden else "token"
            return f"stall: no first {what} within {_s(self.first_s)} s (first-token bound)"
        return f"stall: no event for {_s(self.stall_s)} s"


def _s(seconds: float) -> str:
    return f"{round(seconds, 2):g}"


class Watch:
    """``with Watch(bounds, turn):`` around awaiting a stream's reads into ``turn``: TimeoutError
    once the bound in force has passed since ``turn.t_read`` (the last network read).

    What ``asyncio.timeout`` does (cancel the task, turn that cancellation and no other into
    TimeoutError), as a plain context manager around our own re-arming timer: about one
    ``asyncio.timeout``'s cost a call, where wrapping one would add its own and two coroutines."""

    __slots__ = ("_bounds", "_cancelling", "_fired", "_handle", "_loop", "_task", "_turn")

    def __init__(self, bounds: Bounds, turn: Turn) -> None:
        self._bounds, self._turn = bounds, turn
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False

    def __enter__(self) -> Watch:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Watch is used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        self._loop = asyncio.get_running_loop()
        self._check()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._fired and self._task.uncancel() <= self._cancelling and et is CancelledError:
            raise TimeoutError from ev  # our cancellation; anyone else's goes on as it is

    def _check(self) -> None:
        b, turn = self._bounds, self._turn
        waiting = b.waiting(turn)
        left = (turn.t_read - perf_counter_ns()) / 1e9 + (b.first_s if waiting else b.stall_s)
        if left > 0:
            # while waiting, look again at least every stall_s: the first token's read is then
            # seen before its own stall deadline, which is armed exactly from there on
            self._handle = self._loop.call_later(
                min(left, b.stall_s) if waiting else left, self._check
            )
        else:
            self._handle, self._fired = None, True
            self._task.cancel()
