"""The simulator speaks both OpenAI APIs as the official SDK and a plain HTTP client parse them."""

from __future__ import annotations

import httpx
import openai
import orjson
import pydantic
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from agentloop.config.tiers import SpeedProfile
from agentloop.model.tokens import count_tokens
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import SimServer

FAST = SpeedProfile(base_latency_s=0.01, prefill_tps=1_000_000, output_tps=5000)
ARGS_A = '{"path": "src/app.py", "lines": [1, 20]}'
ARGS_B = '{"pattern": "def \\\\w+\\\\(", "glob": "*.py"}'
SCRIPT = [
    ScriptTurn(
        text="Let me read two files.",
        reasoning_tokens=12,
        tool_calls=(ScriptToolCall("read_file", ARGS_A), ScriptToolCall("search", ARGS_B)),
    ),
    ScriptTurn(text="All done:\nthe bug is fixed.", reasoning_tokens=0),
]
VISIBLE_0 = count_tokens(SCRIPT[0].text) + count_tokens(ARGS_A) + count_tokens(ARGS_B)


@pytest.fixture
async def sim():
    async with SimServer(profile=FAST, script=SCRIPT) as server:
        yield server


@pytest.fixture
async def client(sim):
    c = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)
    yield c
    await c.close()


async def test_responses_stream_typed_events(client):
    """A streamed Responses turn yields the SDK's typed events in order, with exact text and arguments."""
    stream = await client.responses.create(
        model="sim", input="fix it", stream=True, service_tier="priority"
    )
    events = [ev async for ev in stream]
    types = [e.type for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert events[2].item.type == "reasoning"
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == SCRIPT[0].text
    args: dict[int, str] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            args[e.output_index] = args.get(e.output_index, "") + e.delta
    assert list(args.values()) == [ARGS_A, ARGS_B]
    added = [
        e.item
        for e in events
        if e.type == "response.output_item.added" and e.item.type == "function_call"
    ]
    assert [(i.name, i.call_id) for i in added] == [
        ("read_file", "call_0_0"),
        ("search", "call_0_1"),
    ]
    final = events[-1].response
    assert final.service_tier == "priority"
    assert final.usage.output_tokens_details.reasoning_tokens == 12
    assert final.usage.output_tokens == 12 + VISIBLE_0
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens


async def test_responses_stream_helper_accumulates(client):
    """The SDK's responses.stream() accumulator rebuilds the full response from the events."""
    async with client.responses.stream(model="sim", input="fix it") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.output_text == SCRIPT[0].text
    calls = [o for o in final.output if o.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [("read_file", ARGS_A), ("search", ARGS_B)]


async def test_responses_non_streaming_second_turn(client):
    """A non-streamed Responses call holding one model turn gets script turn 1 with usage."""
    history = [
        {"role": "user", "content": "fix it"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": SCRIPT[0].text}],
        },
        {"type": "function_call", "call_id": "call_0_0", "name": "read_file", "arguments": ARGS_A},
        {"type": "function_call", "call_id": "call_0_1", "name": "search", "arguments": ARGS_B},
        {"type": "function_call_output", "call_id": "call_0_0", "output": "print('hi')"},
        {"type": "function_call_output", "call_id": "call_0_1", "output": "no match"},
    ]
    resp = await client.responses.create(model="sim", input=history)
    assert resp.output_text == SCRIPT[1].text
    assert resp.usage.output_tokens == count_tokens(SCRIPT[1].text)
    assert resp.usage.input_tokens > count_tokens(ARGS_A) + count_tokens(ARGS_B)


async def test_chat_stream_typed_chunks(client):
    """A streamed Chat turn gives a role chunk, content and tool-call deltas, finish and usage chunks."""
    stream = await client.chat.completions.create(
        model="sim",
        messages=[{"role": "user", "content": "fix it"}],
        stream=True,
        stream_options={"include_usage": True},
        service_tier="flex",
    )
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    text = "".join(c.choices[0].delta.content or "" for c in chunks[1:] if c.choices)
    assert text == SCRIPT[0].text
    calls: dict[int, dict[str, str]] = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
            entry["id"] += tc.id or ""
            entry["name"] += (tc.function.name or "") if tc.function else ""
            entry["args"] += (tc.function.arguments or "") if tc.function else ""
    assert calls == {
        0: {"id": "call_0_0", "name": "read_file", "args": ARGS_A},
        1: {"id": "call_0_1", "name": "search", "args": ARGS_B},
    }
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 12 + VISIBLE_0
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 12
    assert chunks[-1].service_tier == "flex"


async def test_chat_stream_helper_and_non_streaming(client):
    """The chat.completions.stream() helper and a plain create() both return the scripted turn."""
    messages = [{"role": "user", "content": "fix it"}]
    async with client.chat.completions.stream(model="sim", messages=messages) as stream:
        async for _ in stream:
            pass
        streamed = (await stream.get_final_completion()).choices[0].message
    whole = await client.chat.completions.create(model="sim", messages=messages)
    for msg in (streamed, whole.choices[0].message):
        assert msg.content == SCRIPT[0].text
        assert [(t.id, t.function.name, t.function.arguments) for t in msg.tool_calls] == [
            ("call_0_0", "read_file", ARGS_A),
            ("call_0_1", "search", ARGS_B),
        ]
    assert whole.choices[0].finish_reason == "tool_calls"
    assert whole.usage.completion_tokens_details.reasoning_tokens == 12


async def test_chat_second_turn_stops(client):
    """A Chat conversation holding one assistant turn gets the final text with finish_reason stop."""
    messages = [
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": SCRIPT[0].text,
            "tool_calls": [
                {
                    "id": "call_0_0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": ARGS_A},
                },
                {
                    "id": "call_0_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": ARGS_B},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_0_0", "content": "x"},
        {"role": "tool", "tool_call_id": "call_0_1", "content": "y"},
    ]
    resp = await client.chat.completions.create(model="sim", messages=messages)
    assert resp.choices[0].message.content == SCRIPT[1].text
    assert resp.choices[0].finish_reason == "stop"


async def test_raw_http_sse(sim):
    """A plain httpx client reads the chunked SSE stream curl-style: data lines, then [DONE]."""
    async with httpx.AsyncClient(base_url=sim.base_url) as http:
        async with http.stream(
            "POST",
            "/chat/completions",
            json={"model": "sim", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            assert resp.headers["transfer-encoding"] == "chunked"
            lines = [line async for line in resp.aiter_lines() if line]
        assert lines[-1] == "data: [DONE]"
        payloads = [orjson.loads(line[6:]) for line in lines[:-1]]
        text = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads)
        assert text == SCRIPT[0].text
        async with http.stream(
            "POST", "/responses", json={"model": "sim", "stream": True, "input": "hi"}
        ) as resp:
            raw = (await resp.aread()).decode()
        blocks = [b for b in raw.split("\n\n") if b]
        names = [b.split("\n")[0].removeprefix("event: ") for b in blocks]
        datas = [orjson.loads(b.split("\n")[1].removeprefix("data: ")) for b in blocks]
        assert names == [d["type"] for d in datas]
        assert names[-1] == "response.completed"


async def test_models_and_unknown_path(sim):
    """GET /v1/models lists models and an unknown path is a 404 in OpenAI's error shape."""
    async with httpx.AsyncClient(base_url=sim.base_url) as http:
        models = (await http.get("/models")).json()
        missing = await http.post("/embeddings", json={})
    assert [m["id"] for m in models["data"]] == ["sim"]
    assert missing.status_code == 404
    assert set(missing.json()["error"]) >= {"message", "type", "code"}
    assert "/v1/embeddings" in missing.json()["error"]["message"]


async def test_keep_alive_reuses_connection(sim):
    """Several requests, streamed and not, travel over one kept-alive connection."""
    async with httpx.AsyncClient(base_url=sim.base_url) as http:
        ports = set()
        for stream in (True, False, True):
            resp = await http.post(
                "/responses", json={"model": "sim", "input": "hi", "stream": stream}, extensions={}
            )
            assert resp.status_code == 200
            ports.add(resp.extensions["network_stream"].get_extra_info("client_addr"))
    assert len(ports) == 1
    assert sim.requests == 3


async def test_every_payload_validates_strictly_against_sdk_types(sim):
    """Each raw event and body passes strict pydantic validation against the SDK's own types."""
    stream_event = pydantic.TypeAdapter(ResponseStreamEvent)
    tools = [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read.",
            "strict": False,
            "parameters": {"type": "object", "properties": {}},
        }
    ]
    async with httpx.AsyncClient(base_url=sim.base_url) as http:
        raw = (
            await http.post(
                "/responses", json={"model": "sim", "input": "x", "stream": True, "tools": tools}
            )
        ).text
        whole = (await http.post("/responses", json={"model": "sim", "input": "x"})).content
        chat_raw = (
            await http.post(
                "/chat/completions",
                json={
                    "model": "sim",
                    "messages": [{"role": "user", "content": "x"}],
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
            )
        ).text
        chat_whole = (
            await http.post(
                "/chat/completions",
                json={"model": "sim", "messages": [{"role": "user", "content": "x"}]},
            )
        ).content
    events = [
        stream_event.validate_python(orjson.loads(block.split("\n", 1)[1][6:]))
        for block in raw.split("\n\n")
        if block
    ]
    chunks = [
        ChatCompletionChunk.model_validate(orjson.loads(block[6:]))
        for block in chat_raw.split("\n\n")
        if block and "[DONE]" not in block
    ]
    assert events[-1].response.tools[0].name == "read_file"
    assert Response.model_validate(orjson.loads(whole)).output_text == SCRIPT[0].text
    assert chunks[-1].usage.completion_tokens == 12 + VISIBLE_0
    assert (
        ChatCompletion.model_validate(orjson.loads(chat_whole)).choices[0].finish_reason
        == "tool_calls"
    )


async def test_output_token_limit_truncates_like_an_endpoint(client):
    """A limit below the turn's size cuts it: Responses ends incomplete, Chat says "length"."""
    events = [
        ev
        async for ev in await client.responses.create(
            model="sim", input="go", stream=True, max_output_tokens=12 + 3
        )
    ]
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage.output_tokens == 15
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Let me read"
    assert not [e for e in events if e.type == "response.function_call_arguments.delta"]
    chat = await client.chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "go"}], max_completion_tokens=12 + 10
    )
    choice = chat.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.content == SCRIPT[0].text
    assert [t.function.arguments for t in choice.message.tool_calls] == ['{"path"']
    assert chat.usage.completion_tokens == 22
