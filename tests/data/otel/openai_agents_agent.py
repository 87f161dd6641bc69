"""A tool-using openai-agents agent, traced by OpenInference's instrumentation into OTLP JSON.

Run in the openai-agents venv (.ci/install makes it), against an OpenAI-compatible endpoint such
as ``agentloop sim serve --script tests/data/otel/incident_agent.yaml``:

    python openai_agents_agent.py BASE_URL MODEL OUT.json

openai-agents does not write OpenTelemetry itself: ``OpenAIAgentsInstrumentor``
(``openinference-instrumentation-openai-agents``) turns its traces into OTel SDK spans; the file
is the SDK's own OTLP encoding of them (``encode_spans``) in protobuf's JSON mapping. The same
agent and tools as ``pydantic_ai_agent.py``, so the two imports can be compared.
"""

import asyncio
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from agents.tracing import set_trace_processors
from google.protobuf.json_format import MessageToJson
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

RUNBOOK = "checkout-api: every upstream timeout must cover that upstream's p99 latency."
P99_MS = {"payment": 870, "inventory": 140}


@function_tool
async def read_runbook(service: str) -> str:
    """Read the runbook of a service."""
    await asyncio.sleep(0.05)
    return RUNBOOK


@function_tool
async def check_latency(upstream: str) -> str:
    """Measure an upstream's latency percentiles."""
    await asyncio.sleep(0.3)  # the probe takes its time, as a real one would
    return f"{upstream}: p99 {P99_MS[upstream]} ms"


async def main(base_url: str, model: str) -> str:
    """Run the agent once; the OTLP JSON of its spans."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "incident-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    set_trace_processors([])  # nothing goes to OpenAI's own trace endpoint
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    client = AsyncOpenAI(base_url=base_url, api_key="not-a-key", max_retries=0)
    agent = Agent(
        name="incident",
        instructions="You are the on-call engineer's agent.",
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        tools=[read_runbook, check_latency],
    )
    result = await Runner.run(
        agent, "PAGE: checkout 5xx since the last config change. Find out why."
    )
    provider.force_flush()
    print(result.final_output)
    return MessageToJson(encode_spans(spans.get_finished_spans()))


if __name__ == "__main__":
    with open(sys.argv[3], "w") as f:
        f.write(asyncio.run(main(sys.argv[1], sys.argv[2])))
