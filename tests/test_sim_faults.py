"""Every injected fault is observable from a client, and a script mismatch is a clear 400."""

from __future__ import annotations

import itertools
import time

import httpx
import openai
import pytest

from agentloop.clients._lag import loop_lag
from agentloop.config.tiers import SpeedProfile
from agentloop.errors import ConfigError
from agentloop.model.tokens import count_tokens
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import Fault, SimServer

FAST = SpeedProfile(base_latency_s=0.01, prefill_tps=1_000_000, output_tps=2000)
SCRIPT = [
    ScriptTurn(text="Reading.", tool_calls=(ScriptToolCall("read_file", '{"path": "a"}'),)),
    ScriptTurn(text="Done."),
]


def client_of(sim: SimServer, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=retries)


async def collect(
    client: openai.AsyncOpenAI,
) -> tuple[list[str], list[float], BaseException | None]:
    """Stream one Responses call; text deltas, their arrival instants, and the error if any."""
    deltas, stamps = [], []
    try:
        async for ev in await client.responses.create(model="sim", input="go", stream=True):
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
                stamps.append(time.perf_counter())
            if ev.type == "response.completed":
                deltas.append("<completed>")
    except Exception as exc:
        return deltas, stamps, exc
    return deltas, stamps, None


@pytest.mark.parametrize(
    ("kind", "error", "status"),
    [
        ("429", openai.RateLimitError, 429),
        ("500", openai.InternalServerError, 500),
        ("503", openai.InternalServerError, 503),
    ],
)
async def test_status_faults(kind, error, status):
    """429/500/503 faults reach the SDK as its typed status errors in OpenAI's error shape."""
    async with SimServer(
        profile=FAST, filler_tokens=5, faults=[Fault(kind, on_request=1, retry_after_s=0.25)]
    ) as sim:
        client = client_of(sim)
        with pytest.raises(error) as info:
            await client.responses.create(model="sim", input="go")
        ok = await client.responses.create(model="sim", input="go")
        await client.close()
    assert info.value.status_code == status
    assert info.value.body["message"]
    assert ok.output_text and sim.requests == 2
    if kind == "429":
        assert info.value.response.headers["retry-after"] == "0.25"


async def test_429_retry_after_is_honoured_by_sdk_retries():
    """With retries on, the SDK waits Retry-After and the second request succeeds."""
    async with SimServer(
        profile=FAST, filler_tokens=5, faults=[Fault("429", on_request=1, retry_after_s=0.4)]
    ) as sim:
        client = client_of(sim, retries=1)
        t0 = time.perf_counter()
        resp = await client.responses.create(model="sim", input="go")
        took = time.perf_counter() - t0
        await client.close()
    assert resp.output_text
    assert sim.requests == 2
    assert took >= 0.4


async def test_reset_before_headers():
    """A reset fault drops the connection before any header: the SDK sees a connection error."""
    async with SimServer(profile=FAST, filler_tokens=5, faults=[Fault("reset", every=True)]) as sim:
        client = client_of(sim)
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "go"}]
            )
        await client.close()
    assert sim.requests == 1


async def test_cut_stops_stream_without_terminal_event():
    """A cut fault ends the stream after exactly after_tokens tokens with no completed event."""
    async with SimServer(
        profile=FAST, filler_tokens=40, faults=[Fault("cut", on_request=1, after_tokens=7)]
    ) as sim:
        client = client_of(sim)
        deltas, _, exc = await collect(client)
        again, _, exc2 = await collect(client)
        await client.close()
    assert isinstance(exc, openai.APIConnectionError)
    assert sum(count_tokens(d) for d in deltas) == 7
    assert "<completed>" not in deltas
    assert exc2 is None and again[-1] == "<completed>"


async def test_cut_after_all_tokens_loses_only_the_end():
    """A cut at the turn's length delivers every token but never the terminal event (Chat)."""
    async with SimServer(
        profile=FAST, filler_tokens=10, faults=[Fault("cut", every=True, after_tokens=10)]
    ) as sim:
        client = client_of(sim)
        text = ""
        with pytest.raises(openai.APIConnectionError):
            async for chunk in await client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "go"}], stream=True
            ):
                assert not (chunk.choices and chunk.choices[0].finish_reason)
                text += chunk.choices[0].delta.content or "" if chunk.choices else ""
        await client.close()
    assert count_tokens(text) == 10


async def test_stall_pauses_then_continues():
    """A stall fault leaves a stall_s gap after after_tokens tokens, then the stream completes."""
    async with SimServer(
        profile=FAST,
        filler_tokens=30,
        faults=[Fault("stall", on_request=1, after_tokens=12, stall_s=0.5)],
    ) as sim:
        client = client_of(sim)
        lag = loop_lag()
        watch = lag.watch()  # the loop's own lateness: each instant below is taken by the loop
        deltas, stamps, exc = await collect(client)
        late = lag.done(watch).bound_ns / 1e9
        await client.close()
    assert exc is None and deltas[-1] == "<completed>"
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    big = max(range(len(gaps)), key=gaps.__getitem__)
    assert sum(count_tokens(d) for d in deltas[: big + 1]) == 12
    assert 0.5 - late <= gaps[big] <= 0.6 + late, (gaps[big], late)
    assert sum(count_tokens(d) for d in deltas[:-1]) == 30


async def test_malformed_event_breaks_the_sdk_parse():
    """A malformed fault sends an SSE event whose data is not JSON; the SDK fails to decode it."""
    async with SimServer(
        profile=FAST, filler_tokens=20, faults=[Fault("malformed", on_request=1, after_tokens=3)]
    ) as sim:
        client = client_of(sim)
        deltas, _, exc = await collect(client)
        await client.close()
        async with httpx.AsyncClient(base_url=sim.base_url) as http:
            raw = await http.post(
                "/responses", json={"model": "sim", "input": "go", "stream": True}
            )
    assert exc is not None and "<completed>" not in deltas
    assert sum(count_tokens(d) for d in deltas) == 3
    assert "unterminated" not in raw.text  # only request 1 was faulted


async def test_every_fault_hits_each_request():
    """every=True faults every request, and requests counts each model request once."""
    async with SimServer(profile=FAST, filler_tokens=5, faults=[Fault("503", every=True)]) as sim:
        client = client_of(sim)
        for _ in range(3):
            with pytest.raises(openai.InternalServerError):
                await client.responses.create(model="sim", input="go")
        await client.models.list()
        await client.close()
    assert sim.requests == 3


def test_fault_validation():
    """An unknown fault kind, or one that never fires, is a ConfigError naming the problem."""
    with pytest.raises(ConfigError, match="unknown fault kind 'boom'"):
        Fault("boom", on_request=1)
    with pytest.raises(ConfigError, match="on_request=N or every=True"):
        Fault("cut")


async def test_script_mismatch_is_a_400_naming_the_turn():
    """A conversation whose recorded turn calls other tools than the script gets a clear 400."""
    wrong = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "call_0_0",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0_0", "content": "ok"},
    ]
    async with SimServer(profile=FAST, script=SCRIPT) as sim:
        client = client_of(sim)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="sim", messages=wrong)
        await client.close()
    msg = info.value.message
    assert info.value.body["code"] == "script_mismatch"
    assert "turn 0" in msg and "['write_file']" in msg and "['read_file']" in msg


async def test_script_arguments_mismatch_and_past_the_end():
    """Different arguments, or a conversation longer than the script, are 400s saying so."""

    def history(args: str, extra_turns: int = 0) -> list[dict]:
        items = [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c", "name": "read_file", "arguments": args},
            {"type": "function_call_output", "call_id": "c", "output": "x"},
        ]
        for _ in range(extra_turns):
            items += [
                {"type": "message", "role": "assistant", "content": "Done."},
                {"role": "user", "content": "more"},
            ]
        return items

    async with SimServer(profile=FAST, script=SCRIPT) as sim:
        client = client_of(sim)
        with pytest.raises(openai.BadRequestError) as bad_args:
            await client.responses.create(model="sim", input=history('{"path": "b"}'))
        same = await client.responses.create(model="sim", input=history('{"path":"a"}'))
        with pytest.raises(openai.BadRequestError) as past:
            await client.responses.create(model="sim", input=history('{"path": "a"}', 1))
        await client.close()
    assert "tool call 0 (read_file)" in bad_args.value.message
    assert same.output_text == "Done."
    assert "holds 2 model turn(s)" in past.value.message
    assert "only 2 turn(s)" in past.value.message
