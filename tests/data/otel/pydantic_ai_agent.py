"""A tool-using pydantic-ai agent whose own OpenTelemetry instrumentation writes OTLP JSON.

Run in pydantic-ai's venv (.ci/install makes it), against an OpenAI-compatible endpoint such as
``agentloop sim serve --script tests/data/otel/incident_agent.yaml``:

    python pydantic_ai_agent.py BASE_URL MODEL OUT.json

Spans come from pydantic-ai's instrumentation (its ``Instrumentation`` capability) into the OTel SDK;
the file is the SDK's own OTLP encoding of them (``encode_spans``) in protobuf's JSON mapping.
"""

import asyncio
import sys

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

RUNBOOK = "checkout-api: every upstream timeout must cover that upstream's p99 latency."
P99_MS = {"payment": 870, "inventory": 140}


async def main(base_url: str, model: str) -> str:
    """Run the agent once; the OTLP JSON of its spans."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "incident-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    agent = Agent(
        OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key="not-a-key")),
        name="incident",
        capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))],
        system_prompt="You are the on-call engineer's agent.",
    )

    @agent.tool_plain
    async def read_runbook(service: str) -> str:
        """Read the runbook of a service."""
        await asyncio.sleep(0.05)
        return RUNBOOK

    @agent.tool_plain
    async def check_latency(upstream: str) -> str:
        """Measure an upstream's latency percentiles."""
        await asyncio.sleep(0.3)  # the probe takes its time, as a real one would
        return f"{upstream}: p99 {P99_MS[upstream]} ms"

    result = await agent.run("PAGE: checkout 5xx since the last config change. Find out why.")
    provider.force_flush()
    print(result.output)
    return MessageToJson(encode_spans(spans.get_finished_spans()))


if __name__ == "__main__":
    with open(sys.argv[3], "w") as f:
        f.write(asyncio.run(main(sys.argv[1], sys.argv[2])))
