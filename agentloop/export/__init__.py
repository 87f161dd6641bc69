"""Exports of agentloop traces: Perfetto, OpenTelemetry (OTLP JSON and HTTP, both ways), HTML."""

from __future__ import annotations

from typing import Any


def live_sinks(otlp: str | None = None) -> list[Any]:
    """The extra trace sinks a run streams to while it runs: an OTLP/HTTP collector, if given.

    The OpenTelemetry SDK is imported only when a sink is asked for.
    """
    if not otlp:
        return []
    from agentloop.export.otlp_sink import OtlpSink

    return [OtlpSink(otlp)]
