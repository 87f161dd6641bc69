"""Exports of agentloop traces: Perfetto, OpenTelemetry (OTLP JSON and HTTP, both ways), HTML."""
