"""Paced emission of a planned SSE stream against absolute deadlines, with in-stream faults.

A :class:`StreamPlan` is API-neutral: pre-encoded event templates around the token deltas.
:func:`emit` writes it so that visible token ``g`` leaves no earlier than ``Schedule.due(g)``,
computed from the stream's start, never by accumulating sleeps: a late wake-up is caught up by
sending every token already due in one delta (more tokens per chunk when behind), so the rate
holds at thousands of tokens per second and under many concurrent streams.

With ``tokens_per_chunk = k`` a chunk leaves when its last token is due (a real server cannot
send a token before producing it), so the first visible chunk comes ``(k - 1) / output_tps``
after the first token's instant. ``min_interval()`` spaces one stream's writes (the server
widens it when many streams run, so that late wake-ups never pile up); tokens due meanwhile
go in the next chunk. The spacing never holds back the stream's last visible token: it leaves
when due, as the first does, so a wide spacing changes how many chunks a stream has, not when
its first and last visible token arrive.
"""

from __future__ import annotations

import asyncio
import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass

import orjson

# An event template: (before, after); rendered as before + sequence_number + after when the API
# numbers its events (Responses), else just ``before`` (Chat).
Tpl = tuple[bytes, bytes]


@dataclass(slots=True)
class Segment:
    """One run of visible tokens (a message's text, or one tool call's arguments)."""

    open: list[Tpl]
    tokens: tuple[str, ...]
    delta: tuple[bytes, bytes, bytes]  # before + seq + middle + json(text) + after
    close: list[Tpl]
    whole: bool = False  # sent in one delta when its last token is due (llama.cpp tool calls)


@dataclass(slots=True)
class StreamPlan:
    """Everything a stream sends, in order; ``numbered`` inserts sequence numbers."""

    numbered: bool
    head: list[Tpl]  # sent with the response headers
    reasoning: list[Tpl]  # sent when hidden reasoning starts (after base latency and prefill)
    segments: list[Segment]
    tail: list[Tpl]  # sent right after the last visible token
    seq: int = 0
    thinking: Segment | None = None  # reasoning streamed as text (Chat reasoning_content)

    def render(self, tpls: list[Tpl]) -> bytes:
        if not self.numbered:
            return b"".join(t[0] for t in tpls)
        out = []
        for before, after in tpls:
            out.append(b"%b%d%b" % (before, self.seq, after))
            self.seq += 1
        return b"".join(out)

    def render_delta(self, seg: Segment, text: str) -> bytes:
        before, middle, after = seg.delta
        if self.numbered:
            self.seq += 1
            return b"%b%d%b%b%b" % (before, self.seq - 1, middle, orjson.dumps(text), after)
        return b"%b%b%b" % (before, orjson.dumps(text), after)


@dataclass(slots=True)
class Schedule:
    """Absolute deadlines (event-loop clock) of one stream; ``offsets`` when jittered."""

    t_reason: float  # hidden reasoning starts
    t_first: float  # first visible token due
    inv_tps: float
    offsets: list[float] | None = None

    def due(self, g: int) -> float:
        if self.offsets is not None:
            return self.t_first + self.offsets[g]
        return self.t_first + g * self.inv_tps

    def due_count(self, now: float) -> int:
        """How many tokens are due at ``now``."""
        if now < self.t_first:
            return 0
        if self.offsets is not None:
            return bisect.bisect_right(self.offsets, now - self.t_first)
        return int((now - self.t_first) / self.inv_tps) + 1

    def shift(self, seconds: float) -> None:
        self.t_reason += seconds
        self.t_first += seconds


def make_schedule(
    t0: float,
    prefill_s: float,
    reasoning_s: float,
    inv_tps: float,
    n: int,
    jitter: float,
    rng: random.Random | None,
) -> Schedule:
    """Deadlines from the request's arrival ``t0``; jitter scales each interval by 1 ± jitter."""
    if jitter <= 0 or rng is None:
        return Schedule(t0 + prefill_s, t0 + prefill_s + reasoning_s, inv_tps)
    lo, hi = 1 - jitter, 1 + jitter
    t_reason = t0 + prefill_s * rng.uniform(lo, hi)
    offsets, acc = [], 0.0
    for _ in range(n):
        offsets.append(acc)
        acc += inv_tps * rng.uniform(lo, hi)
    return Schedule(t_reason, t_reason + reasoning_s * rng.uniform(lo, hi), inv_tps, offsets)


@dataclass(slots=True)
class StreamFault:
    """A fault inside a stream, applied once ``after`` visible tokens have been written."""

    after: int
    kind: str  # cut | stall | malformed | endless
    stall_s: float = 0.0


MALFORMED = b'data: {"type": "response.output_text.delta", "delta": "unterminated\n\n'


class StreamCut(Exception):
    """A ``cut`` fault fired: the caller closes the connection with no terminal event."""


async def emit(
    write: Callable[[bytes], None],
    plan: StreamPlan,
    sched: Schedule,
    tokens_per_chunk: int,
    faults: list[StreamFault],
    is_closing: Callable[[], bool],
    min_interval: Callable[[], float] = lambda: 0.0,
) -> None:
    """Write ``plan`` paced by ``sched``; raises StreamCut when a cut fault fires."""
    await _Emitter(write, plan, sched, tokens_per_chunk, faults, is_closing, min_interval).run()


class _Emitter:
    """One stream being written: how many visible tokens are out (``g``), when the last write
    left, the bytes held for the next write, and the in-stream faults still to fire."""

    __slots__ = (
        "buf", "g", "is_closing", "k", "last_write", "min_interval", "pending", "plan", "sched",
        "seg", "total", "write",
    )  # fmt: skip

    def __init__(
        self,
        write: Callable[[bytes], None],
        plan: StreamPlan,
        sched: Schedule,
        tokens_per_chunk: int,
        faults: list[StreamFault],
        is_closing: Callable[[], bool],
        min_interval: Callable[[], float],
    ) -> None:
        self.write, self.plan, self.sched = write, plan, sched
        self.is_closing, self.min_interval = is_closing, min_interval
        self.total = sum(len(s.tokens) for s in plan.segments)
        self.pending = sorted(
            (StreamFault(min(f.after, self.total), f.kind, f.stall_s) for f in faults),
            key=lambda f: f.after,
        )
        self.k = max(1, tokens_per_chunk)
        self.seg: Segment | None = plan.segments[0] if plan.segments else None
        self.g = 0  # visible tokens written so far
        self.last_write = 0.0
        self.buf = b""

    async def run(self) -> None:
        plan, sched, write = self.plan, self.sched, self.write
        clock = asyncio.get_running_loop().time
        write(plan.render(plan.head))
        await self.apply(0)
        if plan.reasoning:
            delay = sched.t_reason - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            write(plan.render(plan.reasoning))
        if plan.thinking is not None:
            await _think(
                write, plan, plan.thinking, sched, self.k, self.is_closing, self.min_interval
            )
        if self.total == 0:
            delay = sched.t_first - clock()
            if delay > 0:
                await asyncio.sleep(delay)
        for seg in plan.segments:
            if not await self.segment(seg):
                return
        write(self.buf + plan.render(plan.tail))

    async def apply(self, g: int) -> None:
        """Fire the in-stream faults due once ``g`` visible tokens are out."""
        pending = self.pending
        while pending and pending[0].after == g:
            f = pending.pop(0)
            if f.kind == "cut":
                raise StreamCut()
            if f.kind == "stall":
                self.sched.shift(f.stall_s)
                await asyncio.sleep(f.stall_s)
            elif f.kind == "malformed":
                self.write(MALFORMED)
            elif f.kind == "endless":
                await _endless(
                    self.write,
                    self.plan,
                    self.seg,
                    self.sched.inv_tps,
                    self.k,
                    self.is_closing,
                    self.min_interval,
                )

    async def segment(self, seg: Segment) -> bool:
        """Write one segment's tokens at their deadlines; False once the client has hung up."""
        # the hot loop: one pass per chunk, so what it reads is held in locals
        plan, sched, write, pending, k = self.plan, self.sched, self.write, self.pending, self.k
        clock, sleep = asyncio.get_running_loop().time, asyncio.sleep
        is_closing, min_interval, total = self.is_closing, self.min_interval, self.total
        self.seg = seg
        buf = self.buf + plan.render(seg.open)
        g, last_write = self.g, self.last_write
        tokens, i, n_seg = seg.tokens, 0, len(seg.tokens)
        if seg.whole and n_seg:
            delay = sched.due(g + n_seg - 1) - clock()
            if delay > 0:
                await sleep(delay)
            if is_closing():
                return False
            write(buf + plan.render_delta(seg, "".join(tokens)))
            buf, g, i = b"", g + n_seg, n_seg
        while i < n_seg:
            cap = n_seg - i
            if pending and pending[0].after > g:
                cap = min(cap, pending[0].after - g)
            stop = i + min(k, cap)
            # spaced by min_interval(), but never past the stream's last token: the first and
            # the last visible token leave when due, whatever the spacing (the rate between them
            # is what a client measures)
            floor = min(last_write + min_interval(), sched.due(total - 1))
            delay = max(sched.due(g + stop - i - 1), floor) - clock()
            if delay > 0:
                await sleep(delay)
            if is_closing():
                return False
            behind = sched.due_count(clock()) - g  # catch up: every token due goes now
            if behind > stop - i:
                stop = i + min(behind, cap)
            last_write = clock()
            write(buf + plan.render_delta(seg, "".join(tokens[i:stop])))
            buf = b""
            g += stop - i
            i = stop
            if pending and pending[0].after == g:
                await self.apply(g)
        self.g, self.last_write = g, last_write
        # the segment's closing events follow its last delta at once, in their own write: they
        # repeat the whole text, and must not hold back the delta before them
        buf += plan.render(seg.close)
        if buf and n_seg and seg is not plan.segments[-1]:
            write(buf)
            buf = b""
        self.buf = buf
        return True


async def _think(
    write: Callable[[bytes], None],
    plan: StreamPlan,
    seg: Segment,
    sched: Schedule,
    k: int,
    is_closing: Callable[[], bool],
    min_interval: Callable[[], float],
) -> None:
    """Stream hidden reasoning as text between its start and the first visible token: reasoning
    token ``j`` is due at ``t_reason + (j + 1) * (t_first - t_reason) / R``."""
    clock = asyncio.get_running_loop().time
    n = len(seg.tokens)
    step = (sched.t_first - sched.t_reason) / n if n else 0.0
    i, last = 0, 0.0
    while i < n:
        stop = min(n, i + k)
        delay = max(sched.t_reason + stop * step, last + min_interval()) - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        if is_closing():
            return
        due = int((clock() - sched.t_reason) / step) if step > 0 else n
        stop = max(stop, min(n, due))
        last = clock()
        write(plan.render_delta(seg, "".join(seg.tokens[i:stop])))
        i = stop


async def _endless(
    write: Callable[[bytes], None],
    plan: StreamPlan,
    seg: Segment | None,
    inv_tps: float,
    k: int,
    is_closing: Callable[[], bool],
    min_interval: Callable[[], float],
) -> None:
    """The ``endless`` fault: filler deltas at the stream's pace until the client hangs up."""
    if seg is None:
        return
    piece = " again" * k
    interval = max(k * inv_tps, min_interval(), 0.001)
    while not is_closing():
        write(plan.render_delta(seg, piece))
        await asyncio.sleep(interval)
