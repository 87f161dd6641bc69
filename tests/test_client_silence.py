"""The first-token bound: a call silent before its first token for longer than stall_timeout_s,
but within the bound its prefill and hidden reasoning allow, is not retried; a real hang still is.

Real simulator (or a raw loopback server) over real HTTP with the real SDK. Timeouts are
fractions of a second; the asserts are on attempts and their errors, and on durations only as
lower bounds (a silence that did happen) or as hang bounds (seconds), never on speed.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from agentloop.api import run_task
from agentloop.clients._silence import FACTOR, REASONING_ALLOWANCE, first_token_timeout
from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tasks import load_task
from agentloop.config.tiers import SpeedProfile, Tier, parse_tiers
from agentloop.errors import ModelRetryError, TierFileError
from agentloop.script import ScriptTurn
from agentloop.sim import Fault, SimServer
from agentloop.trace.reader import load_trace
from agentloop.types import Message, ModelRequest, ModelResponse

APIS = ("responses", "chat")
REQUEST = ModelRequest((Message("user", "Read this long prompt, then answer."),), (), 0)
STALL = 0.4  # the tests' stall_timeout_s
HANG = 5.0  # an attempt that takes this long was not caught by its bound
SLOW_START = SpeedProfile(base_latency_s=1.2, prefill_tps=0, output_tps=400)  # 1.2 s > STALL
QUICK = SpeedProfile(base_latency_s=0.05, prefill_tps=0, output_tps=400)
STEADY = Path(__file__).parent / "data" / "steady.yaml"


def tier(api: str, profile: SpeedProfile, **kw: object) -> Tier:
    return Tier(
        name=f"silent-{api}",
        base_url="sim",
        model="sim-test",
        api=api,  # type: ignore[arg-type]
        profile=profile,
        stall_timeout_s=STALL,
        max_attempts=2,
        **kw,  # type: ignore[arg-type]
    )


async def call(t: Tier, sim: SimServer) -> ModelResponse:
    client = OpenAIClient(t, base_url=sim.base_url, backoff_initial_s=0.02)
    try:
        return await client.complete(REQUEST)
    finally:
        await client.aclose()


def seconds(a: int | None, b: int | None) -> float:
    assert a is not None and b is not None
    return (b - a) / 1e9


def test_the_bound_is_the_stall_timeout_plus_twice_the_predicted_prefill_and_reasoning() -> None:
    """first = stall + FACTOR * (base + prefill(N) + decode(N, R)), N from the body's bytes, R
    the effort's allowance capped at max_output_tokens; explicit wins; no profile: the stall."""
    profile = SpeedProfile(base_latency_s=1.0, prefill_tps=1000, output_tps=100)
    t = replace(tier("chat", profile), options={"reasoning_effort": "low"})
    n, r = 1000, REASONING_ALLOWANCE["low"]  # 3,000 body bytes at 3 bytes a token
    expected = STALL + FACTOR * (1.0 + n / 1000 + profile.decode_s(n, r))
    assert expected == pytest.approx(first_token_timeout(t, STALL, 3000))
    capped = replace(t, options={"reasoning_effort": "low", "max_output_tokens": 500})
    expected = STALL + FACTOR * (1.0 + n / 1000 + profile.decode_s(n, 500))
    assert expected == pytest.approx(first_token_timeout(capped, STALL, 3000))
    assert STALL == first_token_timeout(replace(t, profile=None), STALL, 3000)
    assert 7.5 == first_token_timeout(replace(t, first_token_timeout_s=7.5), STALL, 3000)
    assert 9.0 == first_token_timeout(replace(t, first_token_timeout_s=7.5), 9.0, 3000)


def test_first_token_timeout_s_is_validated_and_written_into_the_trace_header() -> None:
    """The field must be > 0 and not below stall_timeout_s; when set, the tier summary (the
    trace header's tier) carries it, and when unset the summary is as before."""
    raw = {
        "base_url": "sim",
        "model": "m",
        "profile": {"base_latency_s": 0.1, "prefill_tps": 0, "output_tps": 50},
    }
    ok = parse_tiers({"tiers": {"t": {**raw, "first_token_timeout_s": 600}}}, "t.toml")["t"]
    assert 600 == ok.first_token_timeout_s and 600 == ok.summary()["first_token_timeout_s"]
    plain = parse_tiers({"tiers": {"t": raw}}, "t.toml")["t"]
    assert None is plain.first_token_timeout_s and "first_token_timeout_s" not in plain.summary()
    with pytest.raises(TierFileError) as info:
        parse_tiers({"tiers": {"t": {**raw, "first_token_timeout_s": 0}}}, "t.toml")
    assert "first_token_timeout_s" in str(info.value) and "greater than 0" in str(info.value)
    with pytest.raises(TierFileError) as info:
        parse_tiers(
            {"tiers": {"t": {**raw, "stall_timeout_s": 60, "first_token_timeout_s": 10}}}, "t.toml"
        )
    assert "shorter than stall_timeout_s (60)" in str(info.value)


@pytest.mark.parametrize("api", APIS)
async def test_a_silent_start_within_the_first_token_bound_is_not_retried(api: str) -> None:
    """A server that sends nothing, headers included, for 1.2 s while it reads the prompt
    (stall_timeout_s 0.4; the profile's bound 0.4 + 2 * 1.2): one attempt, the whole answer."""
    async with SimServer(profile=SLOW_START, filler_tokens=12, headers_after_prefill=True) as sim:
        r = await call(tier(api, SLOW_START), sim)
    assert [None] == [a.error for a in r.attempts]
    assert 12 == r.usage.output_tokens and r.text
    assert seconds(r.timing.t_send, r.timing.t_hdr) > STALL  # the silence did outlast the stall


@pytest.mark.parametrize("api", APIS)
async def test_the_same_silent_start_without_a_first_token_allowance_is_a_stall(api: str) -> None:
    """first_token_timeout_s = stall_timeout_s takes the allowance away: the same 1.2 s silent
    start now fails every attempt, each error naming the header wait and its bound."""
    async with SimServer(profile=SLOW_START, filler_tokens=12, headers_after_prefill=True) as sim:
        with pytest.raises(ModelRetryError) as info:
            await call(tier(api, SLOW_START, first_token_timeout_s=STALL), sim)
    errors = [a.error for a in info.value.attempts]
    assert ["timeout: no response headers within 0.4 s"] * 2 == errors


@pytest.mark.parametrize("api", APIS)
async def test_hidden_reasoning_within_the_bound_of_its_effort_is_not_retried(api: str) -> None:
    """Headers at once, then 1 s of silent reasoning (400 tokens at 400 tok/s) before the first
    visible token: with reasoning_effort set, the bound lasts until that token; one attempt."""
    script = [ScriptTurn(text="The answer is 42.", reasoning_tokens=400)]
    async with SimServer(profile=QUICK, script=script) as sim:
        r = await call(tier(api, QUICK, options={"reasoning_effort": "low"}), sim)
    assert [None] == [a.error for a in r.attempts]
    assert ("The answer is 42.", 400) == (r.text, r.usage.reasoning_tokens)
    assert seconds(r.timing.t_hdr, r.timing.t_first_visible) > STALL  # silent longer than stall


@pytest.mark.parametrize("api", APIS)
async def test_hidden_reasoning_the_tier_does_not_ask_for_is_a_stall(api: str) -> None:
    """The same silent reasoning from a tier without reasoning_effort: its bound (0.4 + 2 *
    0.05 s) ends at the first token of any kind, so 1 s of silence fails each attempt."""
    script = [ScriptTurn(text="The answer is 42.", reasoning_tokens=400)]
    async with SimServer(profile=QUICK, script=script) as sim:
        with pytest.raises(ModelRetryError) as info:
            await call(tier(api, QUICK), sim)
        assert 2 == sim.requests
    errors = [a.error for a in info.value.attempts]
    assert ["stall: no first token within 0.5 s (first-token bound)"] * 2 == errors


async def test_a_server_that_never_answers_is_caught_at_the_first_token_bound() -> None:
    """A server that reads the request and never sends a byte: every attempt ends at the
    first-token bound (0.8 s here), not later, and the call fails naming it."""
    release, open_ = asyncio.Event(), [0]
    ended = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        open_[0] += 1
        try:
            await reader.read(1 << 16)
            await release.wait()  # the hang: nothing is ever sent
        finally:
            writer.close()
            open_[0] -= 1
            if not open_[0]:
                ended.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    t = replace(tier("chat", QUICK, first_token_timeout_s=0.8), base_url=url)
    async with server:
        client = OpenAIClient(t, backoff_initial_s=0.02)
        try:
            with pytest.raises(ModelRetryError) as info:
                await client.complete(REQUEST)
        finally:
            await client.aclose()
            release.set()
        await asyncio.wait_for(ended.wait(), HANG)  # no handler outlives the test
    attempts = info.value.attempts
    assert ["timeout: no response headers within 0.8 s (first-token bound)"] * 2 == [
        a.error for a in attempts
    ]
    for a in attempts:
        assert 0.75 <= (a.t_end - a.t_start) / 1e9 < HANG


@pytest.mark.parametrize("api", APIS)
async def test_silence_after_the_headers_with_no_token_is_caught_at_the_first_token_bound(
    api: str,
) -> None:
    """Headers (and Responses' created events) come, then nothing for 30 s: the watch ends the
    attempt at the profile's bound (0.4 + 2 * 0.05 s), the retry answers."""
    async with SimServer(
        profile=QUICK, filler_tokens=12, faults=[Fault("stall", on_request=1, stall_s=30)]
    ) as sim:
        r = await call(tier(api, QUICK), sim)
    failed, ok = r.attempts
    assert "stall: no first token within 0.5 s (first-token bound)" == failed.error
    assert (failed.t_end - failed.t_start) / 1e9 < HANG
    assert None is ok.error and 12 == r.usage.output_tokens


@pytest.mark.parametrize("effort", [None, "high"])
@pytest.mark.parametrize("api", APIS)
async def test_a_stall_mid_stream_is_caught_at_the_stall_timeout_not_the_first_bound(
    api: str, effort: str | None
) -> None:
    """A first-token bound of 30 s does not loosen the stream after its first visible token: a
    10 s stall after 4 tokens ends the attempt at stall_timeout_s (0.4 s), the retry answers."""
    options = {"reasoning_effort": effort} if effort else {}
    async with SimServer(
        profile=QUICK,
        filler_tokens=12,
        faults=[Fault("stall", on_request=1, after_tokens=4, stall_s=10)],
    ) as sim:
        r = await call(tier(api, QUICK, first_token_timeout_s=30.0, options=options), sim)
    failed, ok = r.attempts
    assert "stall: no event for 0.4 s" == failed.error
    assert (failed.t_end - failed.t_start) / 1e9 < HANG  # neither 30 s nor the 10 s stall
    assert None is ok.error and 12 == r.usage.output_tokens


@pytest.mark.slow
async def test_the_trace_names_the_bound_that_ended_an_attempt(tmp_path: Path) -> None:
    """In a whole run, the model span's attempts record the silent attempt's error with the
    first-token bound it ran out of, then the answered retry."""
    task = load_task(STEADY)
    t = tier("responses", QUICK)
    async with SimServer(
        profile=QUICK, script=list(task.script), faults=[Fault("stall", on_request=1, stall_s=30)]
    ) as sim:
        client = OpenAIClient(t, base_url=sim.base_url, backoff_initial_s=0.02)
        try:
            result = await run_task(task, tier=t, client=client, trace_dir=tmp_path)
        finally:
            await client.aclose()
    assert "ok" == result.status
    first = load_trace(Path(str(result.trace_path))).of_kind("model")[0]
    assert [
        "stall: no first token within 0.5 s (first-token bound)",
        None,
    ] == [a["error"] for a in first.attrs["attempts"]]


async def test_a_call_cancelled_in_its_silent_wait_ends_cancelled_not_as_a_stall() -> None:
    """Cancelling a call while it waits out a long first-token bound (a run being stopped)
    raises CancelledError at once: the watch turns only its own cancellation into a stall."""
    async with SimServer(
        profile=QUICK, filler_tokens=12, faults=[Fault("stall", on_request=1, stall_s=30)]
    ) as sim:
        client = OpenAIClient(
            tier("responses", QUICK, first_token_timeout_s=20.0), base_url=sim.base_url
        )
        try:
            task = asyncio.create_task(client.complete(REQUEST))
            async with asyncio.timeout(HANG):
                while not sim.active_streams:  # the headers are out, the silence has begun
                    await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, HANG)
        finally:
            await client.aclose()
        assert 1 == sim.requests
