"""Request bodies the OpenAI client sends: neutral messages and tier options mapped to each API."""

from __future__ import annotations

import openai
import orjson
import pytest

from agentloop.clients._wire import BodyBuilder
from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.errors import ConfigError
from agentloop.sim import SimServer
from agentloop.types import Message, ModelRequest, ToolCall, ToolSpec

OPTIONS = {
    "reasoning_effort": "high",
    "service_tier": "priority",
    "max_output_tokens": 900,
    "temperature": 0.3,
}
CALLS = (ToolCall("call_1", "read_file", '{"path": "a.py"}'), ToolCall("call_2", "ls", "{}"))
CONVO = (
    Message("system", "Be brief."),
    Message("user", "Fix it."),
    Message("assistant", "Reading.", tool_calls=CALLS),
    Message("tool", "print(1)", tool_call_id="call_1", name="read_file"),
    Message("tool", "a.py", tool_call_id="call_2", name="ls"),
    Message("assistant", "Done."),
    Message("user", "Thanks."),
)
TOOLS = (
    ToolSpec(
        "read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}
    ),
)


def test_responses_body_is_stateless_with_function_call_items() -> None:
    """Responses: full input each call, function_call / function_call_output items, store off."""
    body = orjson.loads(BodyBuilder("responses", "m1", OPTIONS).build(CONVO, TOOLS))
    assert {
        k: body[k]
        for k in (
            "model",
            "stream",
            "store",
            "reasoning",
            "service_tier",
            "max_output_tokens",
            "temperature",
        )
    } == {
        "model": "m1",
        "stream": True,
        "store": False,
        "reasoning": {"effort": "high"},
        "service_tier": "priority",
        "max_output_tokens": 900,
        "temperature": 0.3,
    }
    assert body["input"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "Reading."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "read_file",
            "arguments": '{"path": "a.py"}',
        },
        {"type": "function_call", "call_id": "call_2", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "print(1)"},
        {"type": "function_call_output", "call_id": "call_2", "output": "a.py"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file.",
            "parameters": TOOLS[0].parameters,
        }
    ]


def test_chat_body_maps_options_and_tool_messages() -> None:
    """Chat: usage requested in the stream, max_completion_tokens, tool_calls and tool messages."""
    body = orjson.loads(BodyBuilder("chat", "m2", OPTIONS).build(CONVO, TOOLS))
    assert body["stream_options"] == {"include_usage": True}
    assert body["reasoning_effort"] == "high" and body["max_completion_tokens"] == 900
    assert "max_output_tokens" not in body and "store" not in body
    assert body["messages"][2] == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"}
    assert body["tools"][0]["function"]["name"] == "read_file"


def test_reused_prefix_builds_the_same_bytes_as_a_fresh_builder() -> None:
    """Growing, rewriting and shrinking the conversation never leaves stale items in the body."""
    builder = BodyBuilder("responses", "m", {})
    steps = [CONVO[:2], CONVO[:5], CONVO, (*CONVO[:3], Message("user", "other")), CONVO[:1]]
    for messages in steps:
        fresh = BodyBuilder("responses", "m", {}).build(messages, ())
        assert builder.build(messages, ()) == fresh
    assert "tools" not in orjson.loads(builder.build(CONVO, ()))


async def test_an_injected_sdk_client_is_used_and_left_open() -> None:
    """With an injected AsyncOpenAI the client uses it and aclose() does not close it."""
    profile = SpeedProfile(0.01, 0, 2000)
    async with SimServer(profile=profile, filler_tokens=5) as sim:
        sdk = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)
        client = OpenAIClient(Tier("inj", "sim", "m", "chat", profile), client=sdk)
        try:
            r = await client.complete(ModelRequest((Message("user", "hi"),), (), 0))
            await client.aclose()
            assert not sdk.is_closed()
            assert client.endpoint == f"{sim.base_url}/chat/completions"
        finally:
            await sdk.close()
    assert r.usage.output_tokens == 5


def test_a_simulated_tier_without_a_base_url_is_a_config_error() -> None:
    """A sim tier needs a running simulator's URL; without one the error says so."""
    t = Tier("sim-only", "sim", "m", "responses", SpeedProfile(0.1, 0, 100))
    with pytest.raises(ConfigError) as info:
        OpenAIClient(t)
    assert "sim-only" in info.value.message and "SimServer" in info.value.message
