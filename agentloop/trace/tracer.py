"""Opens and closes spans as flat begin/end records on the run's monotonic clock."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Unpack

from agentloop.protocols import SpanSink
from agentloop.trace.attrs import ERROR
from agentloop.trace.header import ClockRecord
from agentloop.trace.schema import (
    EndFields,
    HeaderFields,
    end_record,
    end_span_record,
    event_record,
    header_record,
    start_record,
)

_current: ContextVar[Span | None] = ContextVar("agentloop_span", default=None)


@dataclass
class Span:
    """An open span; set attributes on it before it closes. ``t0``/``t1`` are run-clock ns."""

    id: str
    kind: str
    name: str
    parent: str | None
    t0: int
    t1: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"

    def set(self, **attrs: Any) -> None:
        self.attrs.update(attrs)


class Tracer:
    """Writes a run's records. Instants are ns since the run's anchor (``time.perf_counter_ns``)."""

    def __init__(self, sink: SpanSink, anchor_ns: int | None = None) -> None:
        self.sink = sink
        self.anchor_ns = time.perf_counter_ns() if anchor_ns is None else anchor_ns
        self.anchor_wall = datetime.now(UTC)
        self._ids = itertools.count(1)
        self.open: dict[str, Span] = {}

    def now(self) -> int:
        return time.perf_counter_ns() - self.anchor_ns

    def rel(self, perf_ns: int | None) -> int | None:
        """A ``perf_counter_ns`` instant as run-clock ns."""
        return None if perf_ns is None else perf_ns - self.anchor_ns

    def header(self, **fields: Unpack[HeaderFields]) -> None:
        """Write the run header (line 1), its clock anchored at this tracer's start."""
        clock: ClockRecord = {"wall": self.anchor_wall.isoformat(), "unit": "ns"}
        self.sink.write(header_record(clock, **fields))

    def end(self, status: str, t: int | None = None, **fields: Unpack[EndFields]) -> None:
        """Write the end record (the last line), at ``t`` (default: now)."""
        self.sink.write(end_record(status, self.now() if t is None else t, **fields))

    def event(self, span: Span, name: str, **attrs: Any) -> None:
        """Record a named instant inside the open ``span`` now (a ``span_event`` line, written
        at once, so it survives a run killed before the span ends)."""
        self.sink.write(event_record(span.id, self.now(), name, attrs))

    @contextlib.asynccontextmanager
    async def span(
        self, kind: str, name: str, *, after: list[str] | tuple[str, ...] = (), **attrs: Any
    ) -> AsyncIterator[Span]:
        """Open a span under the current one; its end record carries status and attributes."""
        parent = _current.get()
        span = Span(
            id=f"s{next(self._ids)}",
            kind=kind,
            name=name,
            parent=parent.id if parent else None,
            t0=self.now(),
        )
        self.sink.write(start_record(span.id, span.parent, kind, name, span.t0, after, attrs))
        self.open[span.id] = span
        token = _current.set(span)
        try:
            yield span
        except (asyncio.CancelledError, KeyboardInterrupt):
            span.status = "cancelled"
            raise
        except BaseException as exc:
            span.status = "error"
            span.attrs.setdefault(ERROR, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            _current.reset(token)
            span.t1 = self.now()
            del self.open[span.id]
            self.sink.write(end_span_record(span.id, span.t1, span.status, span.attrs))
