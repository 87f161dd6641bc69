"""OpenAIClient against the real simulator over HTTP: timing, reasoning split, tool calls, usage."""

from __future__ import annotations

import pytest

from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.model.tokens import count_tokens
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import SimServer
from agentloop.types import CallTiming, Message, ModelRequest, ToolSpec
from tests.conftest import within

APIS = ("responses", "chat")
SYSTEM = Message("system", "You are a careful engineer.")
USER = Message("user", "Fix the failing test in calc.py.")
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)

# arguments with nesting, escapes, unicode and numbers: every streamed piece must land exactly
ARGS_A = '{"path": "src/calc.py", "lines": [1, 2, 30], "note": "a \\"quoted\\" é ✓ \\n end"}'
ARGS_B = '{"pattern": "def (add|sub)\\\\(", "max": 1e3, "flags": {"i": true, "m": null}}'


def tier(api: str, profile: SpeedProfile) -> Tier:
    return Tier(
        name=f"sim-test-{api}",
        base_url="sim",
        model="sim-test",
        api=api,  # type: ignore[arg-type]
        profile=profile,
    )


def seconds(a: int | None, b: int | None) -> float:
    assert a is not None and b is not None
    return (b - a) / 1e9


def bound(t: CallTiming) -> float:
    """The call's own timing error bound (its stamps', or its loop's lateness while it streamed:
    the simulator here writes on the test's own loop, ``server_on_loop``), in seconds: what a
    busy machine may add to or take from any duration between two of its instants."""
    assert t.error_bound_ns is not None
    return t.error_bound_ns / 1e9


@pytest.mark.parametrize("api", APIS)
@pytest.mark.pacing
async def test_ttft_and_output_tps_match_the_pacing(api: str) -> None:
    """ttft ~ base + input/prefill and output_tps ~ the profile's rate, within a few percent."""
    profile = SpeedProfile(base_latency_s=0.5, prefill_tps=20000, output_tps=150)
    async with SimServer(profile=profile, filler_tokens=300) as sim:  # 2 s of decode
        client = OpenAIClient(tier(api, profile), base_url=sim.base_url, server_on_loop=True)
        try:
            await client.complete(ModelRequest((SYSTEM, USER), (), 0))  # warm the connection
            r = await client.complete(ModelRequest((SYSTEM, USER), (), 0))
        finally:
            await client.aclose()
    t, u = r.timing, r.usage
    assert u.output_tokens == 300 and u.reasoning_tokens == 0
    expected_ttft = 0.5 + u.input_tokens / 20000
    # the call's own error bound (the loop's measured lateness) covers what a busy machine adds
    assert within(seconds(t.t_send, t.t_first), expected_ttft, 0.08, bound(t))
    assert t.t_first == t.t_first_visible
    decode = seconds(t.t_first_visible, t.t_last)  # 150 tok/s: (visible - 1) / 150 s
    assert within(decode, (u.visible_tokens - 1) / 150, 0.04, bound(t))
    assert t.t_send <= t.t_hdr <= t.t_first <= t.t_last <= t.t_end  # type: ignore[operator]
    # headers come before the tokens
    assert seconds(t.t_send, t.t_hdr) < 0.5 * expected_ttft + bound(t)
    # a chunk per token, unless the loop woke later than a token's interval and read several
    assert (t.chunks >= 250 or bound(t) > 1 / 150) and 0 < t.chunks <= 300 and t.build_ns > 0
    assert r.attempts[-1].error is None and len(r.attempts) == 1


@pytest.mark.pacing
@pytest.mark.parametrize("api", APIS)
async def test_hidden_reasoning_delays_the_first_visible_token(api: str) -> None:
    """With R reasoning tokens, ttft_visible ~ base + R / output_tps and usage reports R."""
    profile = SpeedProfile(base_latency_s=0.3, prefill_tps=0, output_tps=200)
    script = [ScriptTurn(text="The bug is in add(); " * 10, reasoning_tokens=120)]
    async with SimServer(profile=profile, script=script) as sim:
        client = OpenAIClient(tier(api, profile), base_url=sim.base_url, server_on_loop=True)
        try:
            r = await client.complete(ModelRequest((SYSTEM, USER), (), 0))
        finally:
            await client.aclose()
    t, u = r.timing, r.usage
    assert u.reasoning_tokens == 120
    assert u.output_tokens == 120 + count_tokens(script[0].text)
    assert within(seconds(t.t_send, t.t_first_visible), 0.3 + 120 / 200, 0.06, bound(t))
    assert r.text == script[0].text
    assert r.finish_reason == "stop"


@pytest.mark.parametrize("api", APIS)
async def test_tool_calls_are_assembled_exactly_across_turns(api: str) -> None:
    """Several streamed tool calls come back byte-exact, and the next turn carries them back."""
    profile = SpeedProfile(base_latency_s=0.05, prefill_tps=0, output_tps=2000)
    script = [
        ScriptTurn(
            text="Looking.",
            tool_calls=(ScriptToolCall("read_file", ARGS_A), ScriptToolCall("grep", ARGS_B)),
        ),
        ScriptTurn(text="Fixed."),
    ]
    async with SimServer(profile=profile, script=script) as sim:
        client = OpenAIClient(tier(api, profile), base_url=sim.base_url, server_on_loop=True)
        try:
            r1 = await client.complete(ModelRequest((SYSTEM, USER), (READ,), 0))
            results = tuple(
                Message("tool", f"output of {c.name}", tool_call_id=c.id, name=c.name)
                for c in r1.tool_calls
            )
            # the simulator answers turn 1 only if it recognises our replay of turn 0's calls
            r2 = await client.complete(
                ModelRequest((SYSTEM, USER, r1.as_message(), *results), (READ,), 1)
            )
        finally:
            await client.aclose()
    assert [(c.name, c.arguments) for c in r1.tool_calls] == [
        ("read_file", ARGS_A),
        ("grep", ARGS_B),
    ]
    assert len({c.id for c in r1.tool_calls}) == 2 and all(c.id for c in r1.tool_calls)
    assert r1.text == "Looking." and r1.finish_reason == "tool_calls"
    assert r1.usage.output_tokens == sum(count_tokens(s) for s in ("Looking.", ARGS_A, ARGS_B))
    assert r2.text == "Fixed." and r2.tool_calls == ()
    assert r2.usage.input_tokens > r1.usage.input_tokens


@pytest.mark.pacing
@pytest.mark.parametrize("api", APIS)
async def test_tool_only_turn_starts_the_visible_clock_at_the_first_argument(api: str) -> None:
    """A turn with only tool calls: t_first_visible is the first argument delta, not the header."""
    profile = SpeedProfile(base_latency_s=0.5, prefill_tps=0, output_tps=100)
    args = '{"paths": [' + ", ".join(f'"src/mod{i}.py"' for i in range(12)) + "]}"  # 103 tokens
    script = [ScriptTurn(tool_calls=(ScriptToolCall("read_file", args),))]
    async with SimServer(profile=profile, script=script) as sim:
        client = OpenAIClient(tier(api, profile), base_url=sim.base_url, server_on_loop=True)
        try:
            r = await client.complete(ModelRequest((SYSTEM, USER), (READ,), 0))
        finally:
            await client.aclose()
    assert r.text == "" and r.tool_calls[0].arguments == args
    assert r.usage.output_tokens == count_tokens(args)
    t, v = r.timing, r.usage.visible_tokens
    assert within(seconds(t.t_send, t.t_first_visible), 0.5, 0.08, bound(t))
    assert within(seconds(t.t_first_visible, t.t_last), (v - 1) / 100, 0.05, bound(t))


async def test_tier_options_reach_the_endpoint_and_service_tier_comes_back() -> None:
    """service_tier from the tier's options is sent, and the server's answer is recorded."""
    profile = SpeedProfile(base_latency_s=0.01, prefill_tps=0, output_tps=5000)
    t = Tier(
        name="opt",
        base_url="sim",
        model="sim-opt",
        api="responses",
        profile=profile,
        options={
            "service_tier": "priority",
            "reasoning_effort": "low",
            "max_output_tokens": 500,
            "temperature": 0.2,
        },
    )
    async with SimServer(profile=profile, filler_tokens=5) as sim:
        client = OpenAIClient(t, base_url=sim.base_url)
        try:
            r = await client.complete(ModelRequest((USER,), (), 0))
        finally:
            await client.aclose()
    assert r.service_tier == "priority" and r.model == "sim-opt"


@pytest.mark.parametrize("api", APIS)
async def test_one_connection_serves_every_call_of_a_client(api: str) -> None:
    """The body's end after the terminal event is read, so the connection goes back to the pool:
    three calls, one TCP connection (closed mid-body, each call would connect anew)."""
    profile = SpeedProfile(base_latency_s=0.01, prefill_tps=0, output_tps=5000)
    async with SimServer(profile=profile, filler_tokens=20) as sim:
        client = OpenAIClient(tier(api, profile), base_url=sim.base_url, server_on_loop=True)
        try:
            for step in range(3):
                r = await client.complete(ModelRequest((SYSTEM, USER), (), step))
                assert r.usage.output_tokens == 20
        finally:
            await client.aclose()
        assert sim.requests == 3 and sim.connections == 1
