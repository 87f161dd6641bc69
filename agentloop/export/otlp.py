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
from collections.abc import Iterable, Iterator, Sequence
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
from agentloop.trace.fields import Where
from agentloop.trace.reader import SpanRecord, Trace
from agentloop.trace.schema import RunHeader, SpanEvent
from agentloop.trace.span_attrs import ModelAttrs, ToolAttrs, model_attrs, tool_attrs

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
# recorded attributes that go out under another name, copied as they are (by span kind)
_COPY: dict[str, tuple[tuple[str, str], ...]] = {
    "": tuple((k, k) for k in _GEN_AI_COPY),
    "model": (
        *((k, k) for k in _GEN_AI_COPY),
        (A.SERVICE_TIER, GA.GEN_AI_OPENAI_RESPONSE_SERVICE_TIER),
        (A.TIER, "agentloop.tier.name"),
        (A.OUTPUT, "agentloop.output"),  # not gen_ai.output.messages: not in its shape
    ),
}
_WHERE = Where("<otlp export>", 0)  # records already checked (a loaded trace) or ours (live)


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
        ``events``: the trace's span events of ``s`` (context trims), as OTLP span events.

        The attributes are redacted again first, and the typed views (``ModelAttrs``,
        ``ToolAttrs``) read from the redacted ones; what goes out under another name without
        being read is copied by the tables above."""
        a = self.scrub(dict(s.attrs))
        attrs = _common_attributes(s, a)
        sdk_events: list[Event] = []
        if s.kind == "model":
            attrs[GA.GEN_AI_PROVIDER_NAME] = "openai"
            if s.t1 is not None:
                sdk_events = self._model_events(model_attrs(a, _WHERE))
        if s.kind == "tool" and s.t1 is not None:
            attrs.update(_tool_attributes(tool_attrs(a, s.name, _WHERE)))
        elif isinstance(a.get(A.QUEUED_NS), int) and a[A.QUEUED_NS]:
            attrs["agentloop.queued_s"] = a[A.QUEUED_NS] / 1e9
        error = a.get(A.ERROR)
        if error is not None:
            attrs["error.type"] = _scalar(error)
        status = (
            Status(StatusCode.UNSET)
            if s.status in ("ok", "in_flight")
            else Status(StatusCode.ERROR, str(error or s.status))
        )
        parent = self.context(s.parent) if s.parent else None
        t1 = end_ns if s.t1 is None else s.t1
        return ReadableSpan(
            name=s.name,
            context=self.context(s.id),
            parent=parent,
            resource=self.resource,
            attributes=attrs,
            events=sdk_events + [self._event(ev) for ev in events],
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

    def _model_events(self, m: ModelAttrs) -> list[Event]:
        """The call's instants (first chunk, first visible token, last token) and its attempts."""
        out: list[Event] = []
        tm = m.timing
        if tm is not None:
            for t, name in (
                (tm.t_first, "gen_ai.first_chunk"),
                (tm.t_first_visible, "agentloop.first_visible_token"),
                (tm.t_last, "agentloop.last_token"),
            ):
                if t is not None:
                    out.append(Event(name, {}, self.epoch + t))
        for n, att in enumerate(m.attempts, start=1):
            if att.t_start is None:
                continue
            ev: dict[str, Any] = {"agentloop.attempt": n}
            if att.t_end is not None:
                ev["agentloop.attempt.duration_s"] = (att.t_end - att.t_start) / 1e9
            if att.error is not None:
                ev["error.type"] = _scalar(att.error)
            if att.status is not None:
                ev["http.response.status_code"] = att.status
            if att.wait_ns:
                ev["agentloop.attempt.wait_s"] = att.wait_ns / 1e9
            out.append(Event("agentloop.attempt", ev, self.epoch + att.t_start))
        return out


def _common_attributes(s: SpanRecord, a: dict[str, Any]) -> dict[str, Any]:
    """The OTLP attributes every span has, from its record and its redacted attributes ``a``:
    ids, kind, status, operation, step, in flight, the run's agent, the copied and the seconds
    fields."""
    attrs: dict[str, Any] = {
        "agentloop.span.id": s.id,
        "agentloop.span.kind": s.kind,
        "agentloop.status": s.status,
    }
    if s.kind in OPERATION:
        attrs[GA.GEN_AI_OPERATION_NAME] = OPERATION[s.kind]
    step = s.step if s.step is not None else a.get(A.STEP)
    if isinstance(step, int):
        attrs["agentloop.step"] = step
    if s.t1 is None:
        attrs["agentloop.in_flight"] = True
    if s.kind == "run":
        attrs[GA.GEN_AI_AGENT_NAME] = s.name.removeprefix("invoke_agent ").strip()
    for k, out_name in _COPY.get(s.kind, _COPY[""]):
        if a.get(k) is not None:
            attrs[out_name] = _scalar(a[k])
    for k in _SECONDS:
        if isinstance(a.get(k), int | float):
            attrs[f"agentloop.{k}"] = float(a[k])
    return attrs


def _tool_attributes(t: ToolAttrs) -> dict[str, Any]:
    """A finished tool span's own attributes under their OTel names."""
    out: dict[str, Any] = {
        GA.GEN_AI_TOOL_CALL_RESULT: _scalar(t.output),  # "" is an answer: the tool printed none
        "agentloop.tool.ok": t.ok,
    }
    if t.arguments:  # "" only when the span recorded none
        out[GA.GEN_AI_TOOL_CALL_ARGUMENTS] = _scalar(t.arguments)
    for k, v in t.data.items():
        if isinstance(v, bool | int | float | str):
            out[f"agentloop.tool.data.{k}"] = _scalar(v)
    if t.queued_ns:
        out["agentloop.queued_s"] = t.queued_ns / 1e9
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
