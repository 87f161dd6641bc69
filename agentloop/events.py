"""Run events: the frozen values a run emits as it goes (start/end of run, step, model, tool, progress).

The runner emits every event through one :data:`EventSink` (``RunEvent -> None``); the run handle
(:mod:`agentloop.handle`) keeps them as a history and streams them to subscribers, and the old
``observer(kind, data)`` callback is :func:`observer_sink`, a thin adapter over the same events.

Token progress during a model call: the runner opens :func:`call_progress` around the call; a
model client that streams calls :func:`watch_stream` once per attempt with the object it
accumulates the stream in (anything with a ``chunks`` count), and a ticker reads that count every
:data:`PROGRESS_INTERVAL_S`. Nothing is done per stream event, so the hot path pays nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

KINDS = (
    "run_start",
    "step_start",
    "step_end",
    "model_start",
    "model_progress",
    "model_end",
    "tool_start",
    "tool_end",
    "run_end",
)
PROGRESS_INTERVAL_S = 0.25  # model_progress is emitted at most this often during a call


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One thing that happened in a run. ``t_s``: seconds on the run's clock (trace anchor).

    ``step`` and ``span_id`` name the step and the trace span the event belongs to (``None`` for
    run-level events before the run span opens). ``data`` by kind:

    - ``run_start``: ``task``, ``tier`` (names)
    - ``step_start`` / ``step_end``: ``step`` (end: ``status``, ``seconds``)
    - ``model_start``: ``step``; ``model_progress``: ``output_tokens`` (stream deltas so far, an
      estimate of tokens; the exact count comes in ``model_end``), ``elapsed_s``
    - ``model_end``: ``step``, ``seconds``, ``usage``, ``attempts``, ``text``, ``tool_calls``
    - ``tool_start``: ``step``, ``name``, ``call_id``; ``tool_end``: ``step``, ``name``, ``ok``,
      ``seconds``, ``output``
    - ``run_end``: ``status``, ``reason``, ``steps``, ``elapsed_s``, ``success`` (the check's
      record, or ``None``)
    """

    kind: str
    run_id: str
    t_s: float
    step: int | None
    span_id: str | None
    data: Mapping[str, Any]

    def as_json(self) -> dict[str, Any]:
        """The event as a JSON object (a server-sent event's data, a relayed event)."""
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "t_s": self.t_s,
            "step": self.step,
            "span_id": self.span_id,
            "data": dict(self.data),
        }


EventSink = Callable[[RunEvent], None]
Observer = Callable[[str, dict[str, Any]], None]


def observer_sink(observer: Observer) -> EventSink:
    """The old ``observer(kind, data)`` callback as an event sink (``data`` gains ``span_id``)."""

    def sink(event: RunEvent) -> None:
        observer(event.kind, {**event.data, "span_id": event.span_id})

    return sink


class Only:
    """``sink`` given only the events of ``kinds``; a run makes none of the others that cost
    work of their own (``model_progress``: a ticker per model call, see :func:`wants`)."""

    __slots__ = ("kinds", "sink")

    def __init__(self, kinds: Iterable[str], sink: EventSink) -> None:
        self.kinds = frozenset(kinds)
        self.sink = sink

    def __call__(self, event: RunEvent) -> None:
        if event.kind in self.kinds:
            self.sink(event)


class _FanOut:
    __slots__ = ("kinds", "sinks")

    def __init__(self, sinks: list[EventSink]) -> None:
        self.sinks = sinks
        each: list[frozenset[str] | None] = [getattr(s, "kinds", None) for s in sinks]
        self.kinds: frozenset[str] | None = None
        if all(k is not None for k in each):
            self.kinds = frozenset(k for ks in each if ks is not None for k in ks)

    def __call__(self, event: RunEvent) -> None:
        for s in self.sinks:
            s(event)


def fan_out(*sinks: EventSink | None) -> EventSink | None:
    """One sink calling each given sink in turn (``None`` entries skipped)."""
    live = [s for s in sinks if s is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]
    return _FanOut(live)


def wants(sink: EventSink | None, kind: str) -> bool:
    """Whether ``sink`` takes events of ``kind`` (every sink does but an :class:`Only`)."""
    if sink is None:
        return False
    kinds = getattr(sink, "kinds", None)
    return kinds is None or kind in kinds


class _Watch:
    __slots__ = ("stream",)

    def __init__(self) -> None:
        self.stream: Any = None

    def tokens(self) -> int:
        return int(getattr(self.stream, "chunks", 0) or 0)


_watch: ContextVar[_Watch | None] = ContextVar("agentloop_call_watch", default=None)


def watch_stream(stream: Any) -> None:
    """Called by a model client once per attempt: ``stream.chunks`` counts deltas received."""
    w = _watch.get()
    if w is not None:
        w.stream = stream


@contextlib.asynccontextmanager
async def call_progress(
    report: Callable[[int, float], None] | None, interval_s: float = PROGRESS_INTERVAL_S
) -> AsyncIterator[None]:
    """While the body runs, call ``report(output_tokens, elapsed_s)`` every ``interval_s``."""
    if report is None:
        yield
        return
    watch = _Watch()
    token = _watch.set(watch)
    t0 = time.perf_counter()

    async def tick() -> None:
        while True:
            await asyncio.sleep(interval_s)
            report(watch.tokens(), time.perf_counter() - t0)

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()
        await asyncio.wait([ticker])  # owned to its end; a cancel of the caller still propagates
        _watch.reset(token)
