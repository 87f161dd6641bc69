"""A team of openai-agents agents, traced by OpenInference's instrumentation into OTLP JSON.

The triage agent reads the runbook, asks the latency agent (an agent as a tool,
``Agent.as_tool``) for the upstreams' latency, then hands off to the fixer agent (a handoff),
which proposes the change. Run in the openai-agents venv (.ci/install makes it) against two
OpenAI-compatible endpoints, one per conversation (the handoff continues the triage agent's):

    python openai_agents_team.py MAIN_BASE_URL LATENCY_BASE_URL MODEL OUT.json

with ``agentloop sim serve --script tests/data/otel/team_main.yaml`` and ``--script
tests/data/otel/team_latency.yaml`` behind them. The file is the OTel SDK's own OTLP encoding
of the spans (``encode_spans``) in protobuf's JSON mapping, as in ``openai_agents_agent.py``.
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


@function_tool
async def propose_change(setting: str, value: int) -> str:
    """Propose a config change to the owning team."""
    await asyncio.sleep(0.1)
    return f"proposed {setting} = {value}"


async def main(main_url: str, latency_url: str, model: str) -> str:
    """Run the team once; the OTLP JSON of its spans."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "incident-team"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    set_trace_processors([])  # nothing goes to OpenAI's own trace endpoint
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    def on(url: str) -> OpenAIChatCompletionsModel:
        client = AsyncOpenAI(base_url=url, api_key="not-a-key", max_retries=0)
        return OpenAIChatCompletionsModel(model=model, openai_client=client)

    latency = Agent(
        name="latency",
        instructions="You measure upstream latency.",
        model=on(latency_url),
        tools=[check_latency],
    )
    fixer = Agent(
        name="fixer",
        instructions="You propose the config change that fixes the incident.",
        model=on(main_url),
        tools=[propose_change],
    )
    triage = Agent(
        name="triage",
        instructions="You are the on-call engineer's agent.",
        model=on(main_url),
        tools=[
            read_runbook,
            latency.as_tool("ask_latency", "Ask the latency agent about upstream latency."),
        ],
        handoffs=[fixer],
    )
    result = await Runner.run(
        triage, "PAGE: checkout 5xx since the last config change. Find out why."
    )
    provider.force_flush()
    print(result.final_output)
    return MessageToJson(encode_spans(spans.get_finished_spans()))


if __name__ == "__main__":
    with open(sys.argv[4], "w") as f:
        f.write(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3])))
