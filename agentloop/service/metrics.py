"""The service's Prometheus metrics (``GET /metrics``), through the official ``prometheus-client``.

Runs by status (the store's whole history), queue depth and runs in flight are read from the
book at each scrape. The timings come from each ended run's trace, read once when it ends (the
trace is the one owner of them): run duration per tier and status; per tier each model call's
duration, time to first token, output tokens per second and cost; per tool each call's duration.
A registry of the service's own (never the process-wide default), so importing does nothing and
two services in one process do not share counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from agentloop.errors import TraceFileError
from agentloop.trace import attrs as A
from agentloop.trace.reader import load_trace

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agentloop.service.run import Run
    from agentloop.service.runs import RunBook

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LAG = (0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)  # a timing error bound, s
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_TPS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


class _BookCollector:
    """Gauges read from the book at scrape time."""

    def __init__(self, book: RunBook) -> None:
        self.book = book

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily(
            "agentloop_runs", "Runs the service has, by status", labels=["status"]
        )
        for status, n in sorted(self.book.counts.items()):
            if n > 0:
                runs.add_metric([status], n)
        yield runs
        yield GaugeMetricFamily(
            "agentloop_queue_depth", "Runs waiting for a slot", value=self.book.queued
        )
        yield GaugeMetricFamily(
            "agentloop_runs_in_flight", "Runs running now", value=self.book.running
        )
        yield GaugeMetricFamily(
            "agentloop_slots",
            "Runs that may run at once (--concurrency)",
            value=self.book.concurrency,
        )


def _histogram(
    r: CollectorRegistry,
    name: str,
    doc: str,
    labels: list[str],
    buckets: Sequence[float] = _SECONDS,
) -> Histogram:
    """A histogram in ``r`` (seconds buckets unless told)."""
    return Histogram(name, doc, labels, buckets=buckets, registry=r)


class Metrics:
    """The service's registry and its metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.run_s = _histogram(
            r,
            "agentloop_run_duration_seconds",
            "A run's elapsed seconds, start to end",
            ["tier", "status"],
        )
        self.model_s = _histogram(
            r,
            "agentloop_model_call_duration_seconds",
            "A model call's seconds, request to last token",
            ["tier"],
        )
        self.ttft_s = _histogram(
            r, "agentloop_model_ttft_seconds", "A model call's time to its first token", ["tier"]
        )
        self.tps = _histogram(
            r,
            "agentloop_model_output_tokens_per_second",
            "A model call's output tokens per second while it streamed",
            ["tier"],
            _TPS,
        )
        self.tool_s = _histogram(
            r, "agentloop_tool_call_duration_seconds", "A tool call's seconds", ["tool"]
        )
        # the client's own lateness while it timed the call (issue 28)
        self.late = Counter(
            "agentloop_model_calls_measured",
            "Model calls whose client measured its own lateness; under_load: the timing error "
            "bound passed 2% of the call's decode (its speed may be the client's, not the model's)",
            ["tier", "under_load"],
            registry=r,
        )
        self.timing_error_s = _histogram(
            r,
            "agentloop_model_timing_error_seconds",
            "A model call's timing error bound: the client's event-loop lag while it streamed",
            ["tier"],
            _LAG,
        )
        self.cost = Counter(
            "agentloop_cost_usd", "Model cost at the tier's prices, USD", ["tier"], registry=r
        )
        self.refused = Counter(
            "agentloop_refused_requests",
            "Requests refused, by HTTP status",
            ["code"],
            registry=r,
        )

    def watch(self, book: RunBook) -> None:
        """Serve the book's gauges (runs by status, queue depth, in flight, slots)."""
        self.registry.register(_BookCollector(book))

    async def run_ended(self, run: Run) -> None:
        """Observe an ended run: its duration, and its trace's model and tool calls."""
        if run.trace_path is None or not run.trace_path.is_file():
            return
        try:
            trace = await asyncio.to_thread(load_trace, run.trace_path)
        except TraceFileError:
            return  # a trace cut short where it cannot be read: nothing to observe
        tier = trace.run.tier.name
        self.run_s.labels(tier, run.status).observe(run.elapsed_s or 0.0)
        for span in trace.spans.values():
            seconds = span.duration_ns / 1e9 if span.duration_ns is not None else None
            if span.kind == "model" and span.model is not None:
                self._model_call(tier, span.attrs, seconds)
            elif span.kind == "tool" and span.tool is not None and seconds is not None:
                self.tool_s.labels(span.tool.name).observe(seconds)

    def _model_call(self, tier: str, attrs: dict[str, Any], seconds: float | None) -> None:
        if seconds is not None:
            self.model_s.labels(tier).observe(seconds)
        for hist, key in ((self.ttft_s, A.TTFT_S), (self.tps, A.OUTPUT_TPS)):
            value = attrs.get(key)
            if isinstance(value, int | float) and value >= 0:
                hist.labels(tier).observe(float(value))
        bound = attrs.get(A.TIMING_ERROR_S)
        if isinstance(bound, int | float) and bound >= 0:
            self.timing_error_s.labels(tier).observe(float(bound))
            late = attrs.get(A.TIMING_UNDER_LOAD) is True
            self.late.labels(tier, "true" if late else "false").inc()
        cost = attrs.get(A.COST_USD)
        if isinstance(cost, int | float) and cost > 0:
            self.cost.labels(tier).inc(float(cost))

    def render(self) -> bytes:
        return generate_latest(self.registry)
