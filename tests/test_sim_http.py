"""The simulator's HTTP side: clean shutdown mid-stream, client hang-ups, odd requests, curl habits."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import orjson
import pytest

from agentloop.config.tiers import SpeedProfile
from agentloop.errors import SimulatorError
from agentloop.script import ScriptTurn
from agentloop.sim import SimServer

SLOW = SpeedProfile(base_latency_s=0.01, prefill_tps=1_000_000, output_tps=50)
FAST = SpeedProfile(base_latency_s=0.0, prefill_tps=0, output_tps=5000)


async def test_close_with_streams_in_flight_is_prompt_and_clean():
    """Leaving the server's context mid-stream ends every stream at once; clients see the cut.
    Each stream has 10 s left (500 tokens at 50 tok/s): a close that waited for them would take
    that long, so 3 s is a bound about hangs that holds on a busy machine."""
    sim = SimServer(profile=SLOW, filler_tokens=500)
    await sim.start()
    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)
    streaming: set[int] = set()
    all_started = asyncio.Event()

    async def consume(i: int) -> BaseException | None:
        try:
            async for ev in await client.responses.create(model="sim", input="x", stream=True):
                if ev.type == "response.output_text.delta" and i not in streaming:
                    streaming.add(i)
                    if len(streaming) == 5:  # every stream is under way, not just the first
                        all_started.set()
        except openai.APIConnectionError as exc:
            return exc
        return None

    tasks = [asyncio.create_task(consume(i)) for i in range(5)]
    try:
        await asyncio.wait_for(all_started.wait(), 60)
        assert sim.active_streams == 5
        t0 = time.perf_counter()
        await sim.close()
        closed_in = time.perf_counter() - t0
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        for t in tasks:
            t.cancel()
        await client.close()
        await sim.close()
    assert closed_in < 3.0
    assert all(isinstance(r, openai.APIConnectionError) for r in results)
    assert sim.active_streams == 0


async def test_client_hang_up_mid_stream_frees_the_stream():
    """A client that stops reading and closes mid-stream ends that stream; the server serves on."""
    async with SimServer(profile=SpeedProfile(0.0, 0, 200), filler_tokens=400) as sim:
        request = {"model": "sim", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        async with (
            httpx.AsyncClient(base_url=sim.base_url) as http,
            http.stream("POST", "/chat/completions", json=request) as resp,
        ):
            async for line in resp.aiter_lines():
                if '"content":"' in line and sim.active_streams:
                    break
        for _ in range(50):
            if sim.active_streams == 0:
                break
            await asyncio.sleep(0.02)
        assert sim.active_streams == 0
        async with httpx.AsyncClient(base_url=sim.base_url) as http:
            ok = await http.get("/models")
    assert ok.status_code == 200


async def test_odd_requests_get_openai_shaped_errors():
    """Bad JSON, a non-object body, previous_response_id and a wrong method get clear errors."""
    async with (
        SimServer(profile=FAST, filler_tokens=3) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as http,
    ):
        bad_json = await http.post(
            "/responses", content=b"{nope", headers={"content-type": "application/json"}
        )
        not_obj = await http.post("/chat/completions", json=[1, 2])
        chained = await http.post(
            "/responses", json={"model": "m", "input": "x", "previous_response_id": "resp_1"}
        )
        wrong_method = await http.get("/responses")
        model = await http.get("/models/gpt-anything")
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "invalid_json"
    assert not_obj.status_code == 400
    assert "stateless" in chained.json()["error"]["message"]
    assert wrong_method.status_code == 405
    assert model.json()["id"] == "gpt-anything"


async def test_garbage_bytes_get_a_400_and_close():
    """Bytes that are not HTTP get a 400 and the connection is closed."""
    async with SimServer(profile=FAST, filler_tokens=3) as sim:
        reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
        writer.write(b"HELLO\r\n\r\n")
        reply = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await writer.wait_closed()
    assert reply.startswith(b"HTTP/1.1 400 ")


async def test_expect_100_continue_like_curl():
    """A request with Expect: 100-continue gets the interim 100 before it sends its body."""
    body = orjson.dumps({"model": "sim", "input": "hi"})
    async with SimServer(profile=FAST, filler_tokens=3) as sim:
        reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
        writer.write(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nExpect: 100-continue\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
            % len(body)
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.write(body)
        reply = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await writer.wait_closed()
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert orjson.loads(payload)["status"] == "completed"


async def test_port_in_use_is_a_simulator_error():
    """Starting on a port already taken raises SimulatorError naming the address."""
    async with SimServer(profile=FAST) as first:
        second = SimServer(profile=FAST, port=first.port)
        with pytest.raises(SimulatorError, match=f"127.0.0.1:{first.port}"):
            await second.start()
        await second.close()


async def test_every_route_streams_within_the_servers_one_count():
    """Streams on routes and on the server itself are counted together (one write budget), and
    opening or closing a route while they run leaves the count as it is."""
    long = [ScriptTurn(text=" ".join(["word"] * 400))]
    started = asyncio.Event()

    async def consume(base_url: str, until: asyncio.Event) -> None:
        request = {"model": "sim", "stream": True, "input": "x"}
        async with (
            httpx.AsyncClient(base_url=base_url) as http,
            http.stream("POST", "/responses", json=request) as resp,
        ):
            async for line in resp.aiter_lines():
                if "output_text.delta" in line:
                    started.set()
                    await until.wait()
                    return

    async with SimServer(profile=SLOW, filler_tokens=400) as sim:
        stop = asyncio.Event()
        async with sim.route(SLOW, long) as a:
            tasks = [asyncio.create_task(consume(a.base_url, stop)) for _ in range(3)]
            tasks.append(asyncio.create_task(consume(sim.base_url, stop)))
            while sim.active_streams < 4:
                await asyncio.wait_for(started.wait(), 5)
                await asyncio.sleep(0.01)
            async with sim.route(SLOW, long):
                during = (sim.active_streams, sim.routes)
            after_close = sim.active_streams
            stop.set()
            await asyncio.gather(*tasks)
        for _ in range(100):
            if sim.active_streams == 0:
                break
            await asyncio.sleep(0.02)
        assert (4, 2) == during
        assert 4 == after_close
        assert 0 == sim.active_streams
        assert 1 == sim.requests  # the routes' requests are counted by their own answers
