"""OpenAIClient retries and refusals against the real simulator's injected faults, over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import AsyncIterator

import orjson
import pytest

from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.errors import ModelAPIError, ModelRetryError
from agentloop.script import ScriptTurn
from agentloop.sim import Fault, SimServer
from agentloop.types import Message, ModelRequest

PROFILE = SpeedProfile(base_latency_s=0.05, prefill_tps=0, output_tps=400)
REQUEST = ModelRequest((Message("user", "Say something."),), (), 0)
SECRET = "sk-test-0123456789abcdefSECRET"


def tier(api: str = "responses", **kw: object) -> Tier:
    return Tier(
        name="flaky-tier",
        base_url="sim",
        model="sim-test",
        api=api,  # type: ignore[arg-type]
        profile=PROFILE,
        **kw,
    )  # type: ignore[arg-type]


async def run(
    faults: list[Fault],
    api: str = "responses",
    the_tier: Tier | None = None,  # type: ignore[no-untyped-def]
    **kw: object,
):
    async with SimServer(profile=PROFILE, filler_tokens=20, faults=faults) as sim:
        kw.setdefault("backoff_initial_s", 0.05)
        client = OpenAIClient(the_tier or tier(api), base_url=sim.base_url, **kw)  # type: ignore[arg-type]
        try:
            return await client.complete(REQUEST)
        finally:
            await client.aclose()


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_429_is_retried_after_the_retry_after_header(api: str) -> None:
    """A 429 is recorded as a failed attempt and the client waits Retry-After before retrying."""
    r = await run([Fault("429", on_request=1, retry_after_s=0.6)], api)
    assert [(a.status, a.error is None) for a in r.attempts] == [(429, False), (200, True)]
    assert "HTTP 429" in (r.attempts[0].error or "")
    assert r.attempts[0].wait_ns / 1e9 == pytest.approx(0.6, rel=0.1)
    assert r.attempts[1].t_start - r.attempts[0].t_end >= r.attempts[0].wait_ns
    assert r.timing.t_send == r.attempts[1].t_start  # timing is the successful attempt's
    assert r.usage.output_tokens == 20


async def test_retry_after_is_capped() -> None:
    """A Retry-After longer than the cap is shortened to the cap."""
    r = await run([Fault("429", on_request=1, retry_after_s=30)], retry_after_cap_s=0.3)
    assert r.attempts[0].wait_ns / 1e9 == pytest.approx(0.3, rel=0.15)


@pytest.mark.parametrize("kind", ["500", "503"])
async def test_server_errors_are_retried_with_backoff(kind: str) -> None:
    """5xx replies are retried; the back-off wait is recorded on the failed attempt."""
    r = await run([Fault(kind, on_request=1), Fault(kind, on_request=2)], backoff_initial_s=0.2)
    assert [a.status for a in r.attempts] == [int(kind), int(kind), 200]
    assert all(a.wait_ns > 0 for a in r.attempts[:2]) and r.attempts[2].wait_ns == 0
    assert r.attempts[1].wait_ns > r.attempts[0].wait_ns * 1.2  # exponential, even with jitter


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        (Fault("reset", on_request=1), "connection"),
        (Fault("cut", on_request=1, after_tokens=5), "stream broken"),
        (Fault("malformed", on_request=1, after_tokens=3), "malformed"),
    ],
)
@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_broken_connections_and_streams_are_retried(
    fault: Fault, words: str, api: str
) -> None:
    """Reset connections, cut streams and malformed events each cost one attempt, then succeed."""
    r = await run([fault], api)
    assert len(r.attempts) == 2 and words in (r.attempts[0].error or "")
    assert r.attempts[1].error is None and r.usage.output_tokens == 20
    assert len(r.text) > 0


async def test_a_stalled_stream_is_abandoned_after_the_stall_timeout() -> None:
    """A stream silent for longer than stall_timeout_s is given up and retried."""
    r = await run([Fault("stall", on_request=1, after_tokens=4, stall_s=5.0)], stall_timeout_s=0.5)
    assert len(r.attempts) == 2 and "stall" in (r.attempts[0].error or "")
    failed = r.attempts[0]
    assert (failed.t_end - failed.t_start) / 1e9 < 2.0  # gave up long before the 5 s stall ended
    assert r.attempts[1].error is None


async def test_retries_exhausted_raise_model_retry_error_naming_tier_and_endpoint() -> None:
    """When every attempt fails, ModelRetryError names the tier, endpoint, count and last error."""
    async with SimServer(
        profile=PROFILE, filler_tokens=5, faults=[Fault("503", every=True)]
    ) as sim:
        client = OpenAIClient(tier(), base_url=sim.base_url, max_attempts=3, backoff_initial_s=0.02)
        try:
            with pytest.raises(ModelRetryError) as info:
                await client.complete(REQUEST)
        finally:
            await client.aclose()
        assert sim.requests == 3
    msg = info.value.message
    assert "flaky-tier" in msg and f"{sim.base_url}/responses" in msg
    assert "3 attempts" in msg and "HTTP 503" in msg and "overloaded" in msg
    assert len(info.value.attempts) == 3  # type: ignore[attr-defined]


async def test_an_unknown_endpoint_path_is_not_retried() -> None:
    """A 404 is a refusal: ModelAPIError at once, naming tier, endpoint and the server's words."""
    async with SimServer(profile=PROFILE, filler_tokens=5) as sim:
        client = OpenAIClient(tier(), base_url=sim.base_url.replace("/v1", "/v9"))
        try:
            with pytest.raises(ModelAPIError) as info:
                await client.complete(REQUEST)
        finally:
            await client.aclose()
    assert info.value.status == 404
    assert "flaky-tier" in info.value.message and "/v9/responses" in info.value.message
    assert "Unknown request URL" in info.value.message


async def test_a_bad_request_is_not_retried() -> None:
    """A 400 from the server (here: a conversation the script does not fit) is not retried."""
    async with SimServer(profile=PROFILE, script=[ScriptTurn(text="only turn")]) as sim:
        client = OpenAIClient(tier("chat"), base_url=sim.base_url)
        convo = (Message("user", "hi"), Message("assistant", "hello"), Message("user", "again"))
        try:
            with pytest.raises(ModelAPIError) as info:
                await client.complete(ModelRequest(convo, (), 1))
        finally:
            await client.aclose()
        assert sim.requests == 1
    assert info.value.status == 400 and "HTTP 400" in info.value.message
    assert "flaky-tier" in info.value.message and "script" in info.value.message


async def _read_request(reader: asyncio.StreamReader) -> None:
    """Read one HTTP request (head and Content-Length body) off a raw test server's stream."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    await reader.readexactly(length)


async def _refusing_server(
    status: int, message: str, code: str = "invalid_api_key"
) -> tuple[asyncio.Server, str]:
    """A real loopback HTTP server answering every request with an OpenAI-style error."""
    body = orjson.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 %d Refused\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (status, len(body), body)
        )
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


@pytest.fixture
async def refusing() -> AsyncIterator[str]:
    server, url = await _refusing_server(401, f"Incorrect API key provided: {SECRET}.")
    async with server:
        yield url


async def test_401_raises_model_api_error_and_never_shows_the_key(
    refusing: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A rejected key gives ModelAPIError naming the tier; the key is nowhere in error or logs."""
    monkeypatch.setenv("AGENTLOOP_TEST_KEY", SECRET)
    t = Tier(
        name="remote-tier",
        base_url=refusing,
        model="m",
        api="responses",
        profile=PROFILE,
        api_key_env="AGENTLOOP_TEST_KEY",
    )
    caplog.set_level(logging.DEBUG)
    client = OpenAIClient(t)
    try:
        with pytest.raises(ModelAPIError) as info:
            await client.complete(REQUEST)
    finally:
        await client.aclose()
    err = info.value
    assert err.status == 401 and "remote-tier" in err.message and "HTTP 401" in err.message
    assert "Incorrect API key provided" in err.message
    shown = "".join(traceback.format_exception(err)) + repr(err) + caplog.text
    assert SECRET not in shown
    assert SECRET not in repr(vars(client))


async def test_a_missing_key_names_the_tier_and_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tier whose key variable is unset fails before any request, naming tier and variable."""
    monkeypatch.delenv("AGENTLOOP_UNSET_KEY", raising=False)
    t = Tier(
        name="keyless",
        base_url="http://127.0.0.1:9/v1",
        model="m",
        api="chat",
        profile=PROFILE,
        api_key_env="AGENTLOOP_UNSET_KEY",
    )
    with pytest.raises(ModelAPIError) as info:
        OpenAIClient(t)
    assert "keyless" in info.value.message and "AGENTLOOP_UNSET_KEY" in info.value.message


async def test_retried_errors_echoing_the_key_keep_it_out_of_attempts_errors_and_logs(
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 503 whose message echoes the key: attempts, the final error and the logs never show it."""
    monkeypatch.setenv("AGENTLOOP_TEST_KEY", SECRET)
    server, url = await _refusing_server(503, f"overloaded for key {SECRET}", "server_error")
    t = Tier(
        name="echo-tier",
        base_url=url,
        model="m",
        api="chat",
        profile=PROFILE,
        api_key_env="AGENTLOOP_TEST_KEY",
    )
    caplog.set_level(logging.DEBUG)
    async with server:
        client = OpenAIClient(t, max_attempts=2, backoff_initial_s=0.01)
        try:
            with pytest.raises(ModelRetryError) as info:
                await client.complete(REQUEST)
        finally:
            await client.aclose()
    err = info.value
    attempts = err.attempts  # type: ignore[attr-defined]
    assert [a.status for a in attempts] == [503, 503]
    assert all("overloaded for key [REDACTED]" in (a.error or "") for a in attempts)
    out, errout = capfd.readouterr()
    shown = "".join(traceback.format_exception(err)) + out + errout + caplog.text
    assert SECRET not in shown and "echo-tier" in err.message


async def test_the_tier_sets_stall_timeout_and_attempts() -> None:
    """A tier's stall_timeout_s and max_attempts from tiers.toml drive the client's retries."""
    from agentloop.config.tiers import parse_tiers

    tiers = parse_tiers(
        {
            "tiers": {
                "slow-thinker": {
                    "base_url": "sim",
                    "model": "m",
                    "stall_timeout_s": 0.4,
                    "max_attempts": 2,
                    "profile": {"base_latency_s": 0.05, "prefill_tps": 0, "output_tps": 400},
                }
            }
        },
        "t.toml",
    )
    with pytest.raises(ModelRetryError) as info:
        await run(
            [Fault("stall", every=True, after_tokens=2, stall_s=5.0)],
            the_tier=tiers["slow-thinker"],
        )
    attempts = info.value.attempts  # type: ignore[attr-defined]
    assert 2 == len(attempts)
    assert all((a.t_end - a.t_start) / 1e9 < 2.0 for a in attempts)


async def test_retry_after_as_an_http_date_is_honoured() -> None:
    """Retry-After given as an HTTP date (RFC 9110) is waited out, not replaced by back-off."""
    r = await run([Fault("429", on_request=1, retry_after_s=2.0, retry_after_date=True)])
    waited = r.attempts[0].wait_ns / 1e9
    assert [429, 200] == [a.status for a in r.attempts]
    assert 1.0 <= waited <= 2.3  # whole-second resolution, and a sleep may overshoot


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_gzip_body_that_does_not_decompress_is_a_retried_attempt(api: str) -> None:
    """Content-Encoding: gzip over bytes that are not gzip: one failed attempt, then success."""
    r = await run([Fault("badgzip", on_request=1)], api)
    assert 2 == len(r.attempts) and "undecodable response body (gzip)" in (
        r.attempts[0].error or ""
    )
    assert (None, 20) == (r.attempts[1].error, r.usage.output_tokens)


async def test_a_body_that_never_decompresses_ends_in_a_clear_error_not_a_traceback() -> None:
    """Every reply undecodable: ModelRetryError naming the cause after the attempt budget."""
    with pytest.raises(ModelRetryError) as info:
        await run([Fault("badgzip", every=True)], max_attempts=2)
    assert "2 attempts" in info.value.message and "undecodable" in info.value.message


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_stream_that_never_ends_is_capped_in_what_one_call_buffers(api: str) -> None:
    """An endless stream ends the attempt once the call holds max_response_chars, with a clear
    error, not retried; memory stays within a small multiple of the cap meanwhile."""
    import tracemalloc

    profile = SpeedProfile(base_latency_s=0.0, prefill_tps=0, output_tps=200_000)
    cap = 200_000
    tracemalloc.start()
    try:
        async with SimServer(
            profile=profile,
            filler_tokens=20,
            tokens_per_chunk=200,
            faults=[Fault("endless", on_request=1, after_tokens=5)],
        ) as sim:
            client = OpenAIClient(tier(api), base_url=sim.base_url, max_response_chars=cap)
            try:
                with pytest.raises(ModelAPIError) as info:
                    await client.complete(REQUEST)
            finally:
                await client.aclose()
            requests = sim.requests
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 1 == requests  # not retried: an endless answer would only repeat
    assert f"more than {cap} characters in one response" in info.value.message
    assert "max_response_chars" in info.value.message
    assert peak < 20 * cap  # ~4 MB: bounded by the cap, not by how long the stream runs


async def test_a_server_that_sends_on_after_the_terminal_event_does_not_hold_the_call() -> None:
    """After ``[DONE]`` a hostile server keeps sending: the call still ends at once with its
    answer, the rest is read only up to a bound, and that connection is not kept."""
    sent, ended = asyncio.Event(), asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        delta = {"choices": [{"index": 0, "delta": {"content": "hello"}}]}
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        for event in (orjson.dumps(delta), orjson.dumps(end), b"[DONE]"):
            data = b"data: %b\n\n" % event
            writer.write(b"%x\r\n%b\r\n" % (len(data), data))
        await writer.drain()
        try:
            with contextlib.suppress(ConnectionError):
                for _ in range(2000):  # 20 s of junk unless the client hangs up
                    junk = b": junk " + b"x" * 1000 + b"\n"
                    writer.write(b"%x\r\n%b\r\n" % (len(junk), junk))
                    await writer.drain()
                    sent.set()
                    await asyncio.sleep(0.01)
        finally:
            writer.close()
            ended.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    t = Tier(name="chatty", base_url=url, model="m", api="chat", profile=PROFILE)
    async with server:
        client = OpenAIClient(t)
        try:
            t0 = time.perf_counter()
            r = await client.complete(REQUEST)
            took = time.perf_counter() - t0
            pool = client._client._client._transport._pool  # what is kept alive
            kept = len(pool.connections)
        finally:
            await client.aclose()
        await asyncio.wait_for(ended.wait(), 5)  # the junk stops once the client has hung up
    assert r.text == "hello" and sent.is_set()
    assert took < 1.5, f"the call waited {took:.2f} s on bytes after its terminal event"
    assert kept == 0
