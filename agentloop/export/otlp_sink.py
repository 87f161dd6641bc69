"""A live trace sink that streams each span to an OTLP/HTTP collector as it ends.

It sits in the run's trace pipeline beside the JSONL sink (after redaction) and never slows or
fails the run: ``write`` only builds the SDK span and puts it on the SDK's
``BatchSpanProcessor`` queue (bounded: when the collector cannot keep up, spans are dropped,
never waited for), and the processor's worker sends batches in the background. When the
collector is unreachable or refuses a batch, that is logged once and later batches are dropped
at once instead of being retried; closing the sink waits at most ``close_timeout_s`` for what
is still queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agentloop.export.otlp import SpanMapper, exporter, quiet_sdk_logs, traces_endpoint
from agentloop.log import get_logger
from agentloop.trace.reader import SpanRecord
from agentloop.trace.schema import SpanEvent, parse_header


class _LogOnce(SpanExporter):
    """Wraps the SDK exporter: the first failed batch is logged, then everything is dropped."""

    def __init__(self, inner: SpanExporter, url: str) -> None:
        self.inner, self.url = inner, url
        self.dead = False
        self.sent = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.dead:
            return SpanExportResult.FAILURE
        with quiet_sdk_logs():
            result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.sent += len(spans)
            return result
        self.dead = True
        get_logger("agentloop.export").warning(
            "OTLP collector unreachable or refusing spans; streaming to it stops for this run "
            "(the trace file is unaffected)",
            endpoint=self.url,
        )
        return result

    def shutdown(self) -> None:
        with quiet_sdk_logs():
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class OtlpSink:
    """A :class:`agentloop.protocols.SpanSink` that streams spans to an OTLP/HTTP collector."""

    def __init__(
        self,
        url: str,
        *,
        schedule_delay_s: float = 0.2,
        max_queue: int = 4096,
        export_timeout_s: float = 5.0,
        close_timeout_s: float = 5.0,
    ) -> None:
        self.url = traces_endpoint(url)
        self._exporter = _LogOnce(exporter(url, export_timeout_s), self.url)
        self._processor = BatchSpanProcessor(
            self._exporter,
            max_queue_size=max_queue,
            schedule_delay_millis=schedule_delay_s * 1000,
            max_export_batch_size=min(512, max_queue),
        )
        self._close_ms = int(close_timeout_s * 1000)
        self._mapper: SpanMapper | None = None
        self._open: dict[str, SpanRecord] = {}
        self._events: dict[str, list[SpanEvent]] = {}  # of open spans, sent with the span

    @property
    def sent(self) -> int:
        """Spans the collector has accepted so far."""
        return self._exporter.sent

    def write(self, record: dict[str, Any]) -> None:
        typ = record.get("type")
        if typ == "run":
            # typed as a reader types it; records come redacted
            self._mapper = SpanMapper(parse_header(record, "<live run>"), scrub=lambda r: r)
        elif typ == "span_start":
            self._open[record["id"]] = SpanRecord(
                record["id"],
                record.get("parent"),
                record["kind"],
                record["name"],
                record["t"],
                list(record.get("after") or ()),
                start_attrs=record.get("attrs") or {},
            )
        elif typ == "span_event" and record.get("span") in self._open:
            ev = SpanEvent(record["span"], record["t"], record["name"], record.get("attrs") or {})
            self._events.setdefault(ev.span, []).append(ev)
        elif typ == "span_end" and self._mapper is not None:
            s = self._open.pop(record["id"], None)
            events = self._events.pop(record["id"], ())
            if s is None:
                return
            s.t1, s.status, s.attrs = (
                record["t"],
                record.get("status", "ok"),
                record.get("attrs") or {},
            )
            if not self._exporter.dead:
                self._processor.on_end(self._mapper.span(s, s.t1, events))

    def close(self) -> None:
        """Send what is queued (bounded by ``close_timeout_s``) and stop the worker."""
        if not self._exporter.dead:
            self._processor.force_flush(self._close_ms)
        self._processor.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
