"""agentloop spans as OpenTelemetry spans: OTLP JSON files and OTLP/HTTP, on the OTel SDK.

Every agentloop span becomes one SDK ``ReadableSpan`` (the type the SDK's exporters take), and
the SDK does the encoding: :func:`otlp_json` is the ``ExportTraceServiceRequest`` that the OTLP
exporter would send, through protobuf's own JSON mapping; :func:`send_otlp` hands the spans to
the SDK's ``OTLPSpanExporter``. The mapping (docs/design.md, "Exports"):

- names are already GenAI ones (``invoke_agent {task}``, ``chat {model}``,
  ``execute_tool {tool}``; steps are ``step {n}``); ``gen_ai.operation.name`` says which, model
  calls are ``CLIENT`` spans, the rest ``INTERNAL``;
- ``gen_ai.*`` attributes as recorded (usage, models, first-chunk time, finish reasons, tool name
  and call id, arguments and result), agentloop's own under ``agentloop.*`` (timings in seconds,
  step, ok, tool data, in flight);
- the recorded ``after`` edges are span links (attribute ``agentloop.link = "after"``); the
  timing instants (first chunk, first visible token, last token) and every attempt are span
  events;
- the resource names agentloop (``service.name``) and the run's task, tier, model and speed
  profile; trace and span ids are derived from the run id, so exporting twice gives the same ids.

Every string goes through the trace redactor again before it leaves, so no secret of the current
environment can ride along even in a trace recorded elsewhere.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agentloop._version import __version__
from agentloop.errors import ConfigError, ExportError
from agentloop.redact import redactor, secret_values
from agentloop.trace import attrs as A
from agentloop.trace.reader import SpanRecord, Trace
from agentloop.trace.schema import RunHeader, SpanEvent

SCOPE = InstrumentationScope("agentloop", __version__)
MAX_ATTR_CHARS = 8_000  # long outputs are cut: a collector is not an archive of the run
OPERATION = {"run": "invoke_agent", "model": "chat", "tool": "execute_tool"}
# recorded gen_ai attributes that go out under their own name, as their semantic conventions say
_GEN_AI_COPY = (
    A.GEN_AI_REQUEST_MODEL,
    A.GEN_AI_RESPONSE_MODEL,
    A.GEN_AI_USAGE_INPUT_TOKENS,
    A.GEN_AI_USAGE_OUTPUT_TOKENS,
    A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    A.GEN_AI_RESPONSE_FINISH_REASONS,
    A.GEN_AI_TOOL_NAME,
    A.GEN_AI_TOOL_CALL_ID,
    A.GEN_AI_USAGE_CACHED_INPUT_TOKENS,
)
_SECONDS = (
    A.TTFB_S,
    A.TTFT_S,
    A.TTFT_VISIBLE_S,
    A.DECODE_S,
    A.TPOT_S,
    A.OUTPUT_TPS,
    A.CALL_S,
    A.TOKENS_PER_CHUNK,
)
_INSTANTS = (
    (A.T_FIRST, "gen_ai.first_chunk"),
    (A.T_FIRST_VISIBLE, "agentloop.first_visible_token"),
    (A.T_LAST, "agentloop.last_token"),
)


def _id(run_id: str, salt: str, nbytes: int) -> int:
    v = int.from_bytes(hashlib.sha256(f"{run_id}/{salt}".encode()).digest()[:nbytes], "big")
    return v or 1  # an all-zero id is invalid in OTLP


def _epoch_ns(header: RunHeader) -> int:
    try:
        dt = datetime.fromisoformat(header.wall)
    except ValueError:
        return 0
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def _scalar(v: Any) -> Any:
    """An attribute value OTel accepts: scalars as they are, lists of scalars, else JSON text."""
    if isinstance(v, bool | int | float):
        return v
    if isinstance(v, str):
        return v[:MAX_ATTR_CHARS]
    if isinstance(v, list | tuple) and all(isinstance(x, str) for x in v):
        return [x[:MAX_ATTR_CHARS] for x in v]
    return orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()[:MAX_ATTR_CHARS]


def resource_for(header: RunHeader) -> Resource:
    """The run's resource: agentloop, the task, the tier with its model and speed profile."""
    tier, prof = header.tier, header.tier.profile
    attrs: dict[str, Any] = {
        "service.name": "agentloop",
        "service.version": __version__,
        "service.instance.id": header.run_id,
        "agentloop.run_id": header.run_id,
        "agentloop.task.name": header.task.name,
        "agentloop.tier.name": tier.name,
        "agentloop.tier.model": tier.model or "?",
        "agentloop.tier.api": tier.api or "?",
    }
    if prof is not None:
        attrs["agentloop.tier.profile.base_latency_s"] = prof.base_latency_s
        attrs["agentloop.tier.profile.prefill_tps"] = prof.prefill_tps
        attrs["agentloop.tier.profile.output_tps"] = prof.output_tps
    if header.inferred:
        attrs["agentloop.inferred"] = _scalar(header.inferred)
    # Resource(...), not Resource.create: create runs the SDK's resource detectors (threads,
    # process and host probing: 1.6 ms per run measured) for facts a trace does not hold
    return Resource(attrs)


class SpanMapper:
    """Turns one run's span records into SDK spans (built once per run, then per span)."""

    def __init__(self, header: RunHeader, scrub: Any = None) -> None:
        self.run_id = header.run_id or "agentloop"
        self.trace_id = _id(self.run_id, "trace", 16)
        self.epoch = _epoch_ns(header)
        self.resource = resource_for(header)
        self.scrub = scrub or redactor(secret_values())

    def context(self, span_id: str) -> SpanContext:
        return SpanContext(
            self.trace_id,
            _id(self.run_id, span_id, 8),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )

    def span(self, s: SpanRecord, end_ns: int, events: Sequence[SpanEvent] = ()) -> ReadableSpan:
        """The SDK span of ``s``; a span in flight ends at ``end_ns`` (run clock), marked so.
        ``events``: the trace's span events of ``s`` (context trims), as OTLP span events."""
        a = self.scrub(dict(s.attrs))
        attrs: dict[str, Any] = {
            "agentloop.span.id": s.id,
            "agentloop.span.kind": s.kind,
            "agentloop.status": s.status,
        }
        if s.kind in OPERATION:
            attrs[GA.GEN_AI_OPERATION_NAME] = OPERATION[s.kind]
        step = s.start_attrs.get(A.STEP, a.get(A.STEP))
        if isinstance(step, int):
            attrs["agentloop.step"] = step
        if s.t1 is None:
            attrs["agentloop.in_flight"] = True
        if s.kind == "run":
            attrs[GA.GEN_AI_AGENT_NAME] = s.name.removeprefix("invoke_agent ").strip()
        for k in _GEN_AI_COPY:
            if a.get(k) is not None:
                attrs[k] = _scalar(a[k])
        for k in _SECONDS:
            if isinstance(a.get(k), int | float):
                attrs[f"agentloop.{k}"] = float(a[k])
        if s.kind == "model":
            attrs[GA.GEN_AI_PROVIDER_NAME] = "openai"
            if a.get(A.SERVICE_TIER) is not None:
                attrs[GA.GEN_AI_OPENAI_RESPONSE_SERVICE_TIER] = _scalar(a[A.SERVICE_TIER])
            if a.get(A.TIER) is not None:
                attrs["agentloop.tier.name"] = _scalar(a[A.TIER])
            if a.get(A.OUTPUT) is not None:  # not gen_ai.output.messages: not in its shape
                attrs["agentloop.output"] = _scalar(a[A.OUTPUT])
        if s.kind == "tool":
            if a.get(A.ARGUMENTS) is not None:
                attrs[GA.GEN_AI_TOOL_CALL_ARGUMENTS] = _scalar(a[A.ARGUMENTS])
            if a.get(A.OUTPUT) is not None:
                attrs[GA.GEN_AI_TOOL_CALL_RESULT] = _scalar(a[A.OUTPUT])
            if isinstance(a.get(A.OK), bool):
                attrs["agentloop.tool.ok"] = a[A.OK]
            for k, v in (a.get(A.DATA) or {}).items():
                if isinstance(v, bool | int | float | str):
                    attrs[f"agentloop.tool.data.{k}"] = _scalar(v)
        if a.get(A.QUEUED_NS):
            attrs["agentloop.queued_s"] = a[A.QUEUED_NS] / 1e9
        if a.get(A.ERROR) is not None:
            attrs["error.type"] = _scalar(a[A.ERROR])
        status = (
            Status(StatusCode.UNSET)
            if s.status in ("ok", "in_flight")
            else Status(StatusCode.ERROR, str(a.get(A.ERROR) or s.status))
        )
        parent = self.context(s.parent) if s.parent else None
        t1 = end_ns if s.t1 is None else s.t1
        return ReadableSpan(
            name=s.name,
            context=self.context(s.id),
            parent=parent,
            resource=self.resource,
            attributes=attrs,
            events=self._events(a) + [self._event(ev) for ev in events],
            kind=SpanKind.CLIENT if s.kind == "model" else SpanKind.INTERNAL,
            status=status,
            start_time=self.epoch + s.t0,
            end_time=self.epoch + t1,
            instrumentation_scope=SCOPE,
            links=[Link(self.context(x), {"agentloop.link": "after"}) for x in s.after],
        )

    def _event(self, ev: SpanEvent) -> Event:
        attrs = {f"agentloop.{k}": _scalar(v) for k, v in self.scrub(ev.attrs).items()}
        return Event(ev.name, {k: v for k, v in attrs.items() if v is not None}, self.epoch + ev.t)

    def _events(self, a: Mapping[str, Any]) -> list[Event]:
        out: list[Event] = []
        tm = a.get(A.TIMING) or {}
        for key, name in _INSTANTS:
            if isinstance(tm.get(key), int):
                out.append(Event(name, {}, self.epoch + tm[key]))
        for n, att in enumerate(a.get(A.ATTEMPTS) or (), start=1):
            if not isinstance(att, Mapping) or not isinstance(att.get(A.ATTEMPT_START), int):
                continue
            t0 = att[A.ATTEMPT_START]
            ev: dict[str, Any] = {"agentloop.attempt": n}
            if isinstance(att.get(A.ATTEMPT_END), int):
                ev["agentloop.attempt.duration_s"] = (att[A.ATTEMPT_END] - t0) / 1e9
            if att.get(A.ATTEMPT_ERROR) is not None:
                ev["error.type"] = _scalar(att[A.ATTEMPT_ERROR])
            if isinstance(att.get(A.ATTEMPT_STATUS), int):
                ev["http.response.status_code"] = att[A.ATTEMPT_STATUS]
            if att.get(A.WAIT_NS):
                ev["agentloop.attempt.wait_s"] = att[A.WAIT_NS] / 1e9
            out.append(Event("agentloop.attempt", ev, self.epoch + t0))
        return out


def trace_spans(trace: Trace) -> list[ReadableSpan]:
    """Every span of a loaded trace as an SDK span (in flight ones end at the last instant)."""
    m = SpanMapper(trace.run)
    end = trace.end_ns
    events: dict[str, list[SpanEvent]] = {}
    for ev in trace.events:
        events.setdefault(ev.span, []).append(ev)
    return [m.span(s, end, events.get(s.id, ())) for s in trace.spans.values()]


def otlp_json(spans: Iterable[ReadableSpan]) -> dict[str, Any]:
    """The ``ExportTraceServiceRequest`` of ``spans`` as OTLP/JSON, from the SDK's encoder.

    OTLP/JSON differs from protobuf's JSON mapping in two ways, both applied here: enums are
    integers, and trace and span ids are hex (protobuf writes bytes as base64), so the ids are
    re-spelt after mapping.
    """
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data: dict[str, Any] = MessageToDict(encode_spans(list(spans)), use_integers_for_enums=True)
    _ids_to_hex(data)
    return data


def _ids_to_hex(obj: Any) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                obj[k] = base64.b64decode(v).hex()
            else:
                _ids_to_hex(v)
    elif isinstance(obj, list):
        for v in obj:
            _ids_to_hex(v)


def traces_endpoint(url: str) -> str:
    """An OTLP/HTTP traces URL: a bare collector address gets the standard ``/v1/traces``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"--otlp {url!r}: not an http(s) URL of an OTLP/HTTP collector "
            f"(for example http://127.0.0.1:4318)"
        )
    path = parts.path if parts.path not in ("", "/") else "/v1/traces"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def exporter(url: str, timeout_s: float = 5.0) -> Any:
    """The SDK's OTLP/HTTP (protobuf) span exporter for ``url``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=traces_endpoint(url), timeout=timeout_s)


@contextlib.contextmanager
def quiet_sdk_logs() -> Iterator[None]:
    """Keep the OTLP exporter's own retry warnings off stderr: agentloop says it once, itself."""
    logger = logging.getLogger("opentelemetry.exporter.otlp")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def send_otlp(spans: list[ReadableSpan], url: str, timeout_s: float = 10.0) -> None:
    """Send ``spans`` to the OTLP/HTTP collector at ``url`` (blocking; run it in a thread)."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    exp = exporter(url, timeout_s)
    try:
        with quiet_sdk_logs():
            result = exp.export(spans)
    finally:
        exp.shutdown()
    if result is not SpanExportResult.SUCCESS:
        raise ExportError(
            f"the OTLP collector at {traces_endpoint(url)} did not accept the "
            f"{len(spans)} spans (unreachable, or it refused them within "
            f"{timeout_s:g} s)"
        )
