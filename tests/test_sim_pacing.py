"""The simulator paces its streams by the profile: TTFT, reasoning delay, output rate, concurrency."""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time

import openai
import pytest

from agentloop.clients._lag import loop_lag
from agentloop.config.tiers import SpeedProfile
from agentloop.model.tokens import MESSAGE_OVERHEAD, count_tokens
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import SimServer
from agentloop.sim._stream import make_schedule
from tests.conftest import within

# the clearly marked wall-clock suite (`-m "not pacing"` leaves it out)
pytestmark = pytest.mark.pacing

# relative tolerance on durations >= 0.3 s: never sooner than that (less the loop's own measured
# lateness, agentloop.clients._lag), later only by a bound about stalls (tests/conftest.py within)
REL = 0.05


WARM = {"warm": SpeedProfile(base_latency_s=0.0, prefill_tps=0, output_tps=100_000)}


async def warm(client: openai.AsyncOpenAI) -> None:
    """One instant call per API first, so the SDK's first-call costs stay out of the timings."""
    async for _ in await client.responses.create(model="warm", input="w", stream=True):
        pass
    await client.responses.create(model="warm", input="w")
    async for _ in await client.chat.completions.create(
        model="warm", messages=[{"role": "user", "content": "w"}], stream=True
    ):
        pass
    await client.chat.completions.create(model="warm", messages=[{"role": "user", "content": "w"}])


def close(measured: float, expected: float, bound_s: float, rel: float = REL) -> bool:
    return within(measured, expected, rel, bound_s)


class Lateness:
    """The event loop's lateness while a block runs (the production client's own sampler):
    ``bound_s`` is the error bound on any duration measured inside it, either way."""

    def __enter__(self) -> Lateness:
        self._lag = loop_lag()
        self._watch = self._lag.watch()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bound_s = self._lag.done(self._watch).bound_ns / 1e9


def rate_within(r: dict, tps: float, rel: float = REL) -> bool:
    """The visible tokens after the first took (visible - first) / tps, to within the bound."""
    return close(r["span"], r["paced"] / tps, r["bound"], rel)


async def timed_responses(client: openai.AsyncOpenAI, **kw) -> dict:
    """Stream one Responses call; arrival instants of the first/last visible delta and more,
    with the loop's lateness while it streamed (``bound``)."""
    with Lateness() as late:
        t_send = time.perf_counter()
        stream = await client.responses.create(stream=True, **kw)
        firsts: list[tuple[float, str]] = []
        t_reasoning = None
        async for ev in stream:
            now = time.perf_counter()
            if ev.type in (
                "response.output_text.delta",
                "response.function_call_arguments.delta",
            ):
                firsts.append((now, ev.delta))
            elif ev.type == "response.output_item.added" and ev.item.type == "reasoning":
                t_reasoning = now - t_send
            elif ev.type == "response.completed":
                usage = ev.response.usage
    visible = sum(count_tokens(d) for _, d in firsts)
    m = count_tokens(firsts[0][1])
    span = firsts[-1][0] - firsts[0][0]
    return {
        "ttft": firsts[0][0] - t_send,
        "span": span,  # first visible delta to the last
        "paced": visible - m,  # the tokens paced over that span
        "bound": late.bound_s,
        "visible": visible,
        "usage": usage,
        "reasoning_at": t_reasoning,
        "deltas": [d for _, d in firsts],
    }


@pytest.fixture
async def client_for():
    clients = []

    async def make(sim: SimServer) -> openai.AsyncOpenAI:
        c = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)
        clients.append(c)
        await warm(c)
        return c

    yield make
    for c in clients:
        await c.close()


async def test_ttft_and_rate_at_60_tps(client_for):
    """At 60 tok/s the first token comes after base + prefill and the rest at 60 tok/s."""
    profile = SpeedProfile(base_latency_s=0.3, prefill_tps=20000, output_tps=60)
    async with SimServer(profile=profile, profiles=WARM, filler_tokens=100) as sim:
        r = await timed_responses((await client_for(sim)), model="sim", input="go")
    prefill = (MESSAGE_OVERHEAD + count_tokens("go")) / 20000
    assert r["visible"] == 100 == r["usage"].output_tokens
    assert close(r["ttft"], 0.3 + prefill, r["bound"])
    assert rate_within(r, 60)


async def test_rate_at_750_tps_chat(client_for):
    """At 750 tok/s (Chat API) the measured rate over 400 tokens is within 5% of the target."""
    profile = SpeedProfile(base_latency_s=0.05, prefill_tps=100000, output_tps=750)
    async with SimServer(profile=profile, profiles=WARM, filler_tokens=400) as sim:
        client = await client_for(sim)
        with Lateness() as late:
            stream = await client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "go"}], stream=True
            )
            stamps = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    stamps.append((time.perf_counter(), chunk.choices[0].delta.content))
    visible = sum(count_tokens(d) for _, d in stamps)
    paced = visible - count_tokens(stamps[0][1])
    assert visible == 400
    assert close(stamps[-1][0] - stamps[0][0], paced / 750, late.bound_s)


async def test_reasoning_elapses_before_first_visible_token(client_for):
    """Hidden reasoning starts after base+prefill and delays the first visible token by R/tps."""
    profile = SpeedProfile(base_latency_s=0.2, prefill_tps=1_000_000, output_tps=200)
    turn = ScriptTurn(text="Answer: 42.", reasoning_tokens=120)  # 0.6 s of reasoning
    async with SimServer(profile=profile, profiles=WARM, script=[turn]) as sim:
        r = await timed_responses((await client_for(sim)), model="sim", input="q")
    assert close(r["reasoning_at"], 0.2, r["bound"], rel=0.15)
    assert close(r["ttft"], 0.2 + 0.6, r["bound"])
    assert r["usage"].output_tokens_details.reasoning_tokens == 120
    assert r["usage"].output_tokens == 120 + count_tokens(turn.text)


async def test_prefill_scales_with_input_tokens(client_for):
    """A long input adds input_tokens / prefill_tps to the time to first token."""
    profile = SpeedProfile(base_latency_s=0.1, prefill_tps=10000, output_tps=500)
    big = " word" * 4000  # 4000 tokens -> 0.4 s of prefill
    async with SimServer(profile=profile, profiles=WARM, filler_tokens=5) as sim:
        r = await timed_responses((await client_for(sim)), model="sim", input=big)
    assert r["usage"].input_tokens == MESSAGE_OVERHEAD + 4000
    assert close(r["ttft"], 0.1 + (MESSAGE_OVERHEAD + 4000) / 10000, r["bound"])


async def test_tool_argument_tokens_are_paced_as_output(client_for):
    """Tool-call argument tokens stream at the output rate like text tokens."""
    args = "{" + ", ".join(f'"k{i}": {i}' for i in range(60)) + "}"
    turn = ScriptTurn(tool_calls=(ScriptToolCall("write", args),))
    profile = SpeedProfile(base_latency_s=0.05, prefill_tps=1_000_000, output_tps=400)
    async with SimServer(profile=profile, profiles=WARM, script=[turn]) as sim:
        r = await timed_responses((await client_for(sim)), model="sim", input="q")
    assert "".join(r["deltas"]) == args
    assert r["visible"] == count_tokens(args) > 300
    assert rate_within(r, 400)


async def test_concurrent_streams_keep_their_pace(client_for):
    """Sixteen simultaneous streams each hold the target rate and TTFT."""
    profile = SpeedProfile(base_latency_s=0.2, prefill_tps=1_000_000, output_tps=100)
    # 3 s streams: the loop's lateness in parsing 16 streams at once (tens of ms, at their start
    # and end) is a fixed error, so a 0.6 s stream read it as a 5% slower rate
    async with SimServer(profile=profile, profiles=WARM, filler_tokens=300) as sim:
        client = await client_for(sim)
        # sixteen connections open before the clocks start: a TCP connect per stream is not pacing
        await asyncio.gather(*(client.responses.create(model="warm", input="w") for _ in range(16)))
        results = await asyncio.gather(
            *(timed_responses(client, model="sim", input="go") for _ in range(16))
        )
    for r in results:
        assert rate_within(r, 100)
        # never early; late by the SDK building and parsing 16 streams on this one loop, and
        # by whatever else the machine runs (a bound about stalls)
        assert 0.19 <= r["ttft"] and close(r["ttft"], 0.2, r["bound"])


async def test_profiles_by_model_name(client_for):
    """The request's model picks its pacing profile from ``profiles``; others use the default."""
    slow = SpeedProfile(base_latency_s=0.05, prefill_tps=1_000_000, output_tps=100)
    fast = SpeedProfile(base_latency_s=0.05, prefill_tps=1_000_000, output_tps=1000)
    async with SimServer(profile=slow, profiles={"turbo": fast, **WARM}, filler_tokens=60) as sim:
        client = await client_for(sim)
        with Lateness() as late:
            t0 = time.perf_counter()
            await client.responses.create(model="turbo", input="go")
            fast_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            await client.responses.create(model="other", input="go")
            slow_s = time.perf_counter() - t0
        names = [m.id async for m in client.models.list()]
    assert names == ["sim", "turbo", "warm"]
    assert close(slow_s, 0.05 + 59 / 100, late.bound_s, rel=0.1)
    # turbo: 0.05 + 59 / 1000 s, a sixth of the slow call (and never early, so the bound is
    # what load may add to it)
    assert fast_s < slow_s / 3 + late.bound_s


async def test_non_streaming_answer_arrives_when_last_token_is_due(client_for):
    """A non-streamed call takes base + prefill + reasoning + (V - 1) / output_tps."""
    profile = SpeedProfile(base_latency_s=0.1, prefill_tps=1_000_000, output_tps=100)
    turn = ScriptTurn(text=" ".join(["token"] * 60), reasoning_tokens=20)
    async with SimServer(profile=profile, profiles=WARM, script=[turn]) as sim:
        client = await client_for(sim)
        with Lateness() as late:
            t0 = time.perf_counter()
            resp = await client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "go"}]
            )
            took = time.perf_counter() - t0
    assert resp.usage.completion_tokens == 80
    assert close(took, 0.1 + 0.2 + 59 / 100, late.bound_s)


async def test_tokens_per_chunk_groups_tokens(client_for):
    """With tokens_per_chunk=4 each delta carries four tokens and the rate holds."""
    profile = SpeedProfile(base_latency_s=0.05, prefill_tps=1_000_000, output_tps=400)
    async with SimServer(
        profile=profile, profiles=WARM, filler_tokens=201, tokens_per_chunk=4
    ) as sim:
        r = await timed_responses((await client_for(sim)), model="sim", input="go")
    sizes = [count_tokens(d) for d in r["deltas"]]
    assert min(sizes[:-1]) >= 4  # more only when the loop woke late and caught up
    # four a delta, unless the loop woke later than a delta's interval (4 / 400 s) and caught up
    assert statistics.median(sizes) == 4 or r["bound"] > 4 / 400
    assert sum(sizes) == 201
    assert rate_within(r, 400)


async def test_jitter_keeps_the_mean_rate(client_for):
    """Seeded jitter varies token intervals but keeps the mean rate near the target."""
    profile = SpeedProfile(base_latency_s=0.05, prefill_tps=1_000_000, output_tps=200)
    async with SimServer(
        profile=profile, profiles=WARM, filler_tokens=120, jitter=0.5, seed=7
    ) as sim:
        r = await timed_responses((await client_for(sim)), model="sim", input="go")
    assert rate_within(r, 200, rel=0.1)


def test_jittered_schedule_is_seeded():
    """The same seed gives the same jittered deadlines; another seed gives others."""

    def offsets(seed: int) -> list[float]:
        s = make_schedule(0.0, 0.1, 0.0, 0.01, 50, 0.3, random.Random(seed))
        return [s.due(i) for i in range(50)]

    assert offsets(1) == offsets(1)
    assert offsets(1) != offsets(2)
    gaps = [b - a for a, b in itertools.pairwise(offsets(1))]
    assert min(gaps) >= 0.007 - 1e-12 and max(gaps) <= 0.013 + 1e-12


async def test_wide_write_spacing_keeps_the_last_token_on_time(client_for):
    """Writes spaced 0.7 s apart (a suite's write budget) still send the last of 100 tokens at
    100 tok/s when it is due, 0.99 s after the first: three deltas, the rate held."""
    profile = SpeedProfile(base_latency_s=0.05, prefill_tps=1_000_000, output_tps=100)
    async with SimServer(
        profile=profile, profiles=WARM, filler_tokens=100, write_budget=1 / 0.7
    ) as sim:
        r = await timed_responses((await client_for(sim)), model="sim", input="go")
    assert 100 == r["visible"]
    assert 3 == len(r["deltas"])
    assert rate_within(r, 100)
