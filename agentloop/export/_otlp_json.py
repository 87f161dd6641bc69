"""An OTLP/JSON file read into plain spans (:class:`OtelSpan`), for the importer.

The file is an ``ExportTraceServiceRequest`` in OTLP/JSON (one object, or one per line as a
collector's file exporter writes them), parsed by protobuf's own JSON mapping into the OTLP
message, so a malformed file is refused with the file, line and field at fault.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA

from agentloop.errors import TraceFileError


@dataclass(slots=True)
class OtelSpan:
    """One span of the file, decoded: ids as hex, times as epoch ns, attributes as values."""

    trace_id: str
    span_id: str
    parent: str | None
    name: str
    t0: int
    t1: int
    attrs: dict[str, Any]
    error: bool
    status_message: str
    resource: dict[str, Any]
    children: list[OtelSpan] = field(default_factory=list)

    @property
    def operation(self) -> str:
        op = self.attrs.get(GA.GEN_AI_OPERATION_NAME)
        if isinstance(op, str) and op:
            return op
        return self.name.split(" ", 1)[0]


def _value(v: Any) -> Any:
    """An OTLP ``AnyValue`` (as parsed to a protobuf message) as a plain Python value."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    x = getattr(v, kind)
    if kind == "array_value":
        return [_value(e) for e in x.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in x.values}
    if kind == "bytes_value":
        return x.hex()
    return x


def _hex_ids_to_b64(obj: Any) -> None:
    """OTLP/JSON spells ids in hex; protobuf's JSON mapping reads bytes as base64."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                # not hex: already base64 (protobuf's own mapping), left as it is
                with contextlib.suppress(ValueError):
                    obj[k] = base64.b64encode(bytes.fromhex(v)).decode() if v else v
            else:
                _hex_ids_to_b64(v)
    elif isinstance(obj, list):
        for v in obj:
            _hex_ids_to_b64(v)


def _requests(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        yield 1, orjson.loads(data)
        return
    except orjson.JSONDecodeError:
        pass
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TraceFileError(
                f"{path}, line {lineno}: not JSON ({exc}); expected an OTLP "
                f"ExportTraceServiceRequest per line or one for the file"
            ) from None


def read_otlp_json(path: str | Path) -> list[OtelSpan]:
    """Every span of an OTLP/JSON file, decoded; bad input names the file, line and field."""
    from google.protobuf.json_format import ParseDict, ParseError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    p = Path(path)
    out: list[OtelSpan] = []
    for lineno, obj in _requests(p):
        if not isinstance(obj, dict) or "resourceSpans" not in obj:
            raise TraceFileError(
                f"{p}, line {lineno}: field 'resourceSpans' missing: not an "
                f"OTLP ExportTraceServiceRequest in JSON"
            )
        _hex_ids_to_b64(obj)
        try:
            req = ParseDict(obj, ExportTraceServiceRequest())
        except (ParseError, binascii.Error) as exc:
            raise TraceFileError(
                f"{p}, line {lineno}: not a valid OTLP trace request: {exc}"
            ) from None
        for rs in req.resource_spans:
            res = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(
                        OtelSpan(
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex() or None,
                            s.name,
                            int(s.start_time_unix_nano),
                            max(int(s.start_time_unix_nano), int(s.end_time_unix_nano)),
                            {kv.key: _value(kv.value) for kv in s.attributes},
                            s.status.code == 2,
                            s.status.message,
                            res,
                        )
                    )
    if not out:
        raise TraceFileError(f"{p}: no spans in the file")
    return out
