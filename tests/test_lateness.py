"""The client's own lateness: a call streamed beside a busy event loop is marked, a quiet one not.

Real parts: the simulator is a real HTTP server, the client the production one; the load is a
CPU-bound task on the same event loop (busy work in chunks, no sleeps), as a run setting up a
jail or redacting a large output would be.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.loop.model_span import lateness_attrs
from agentloop.model.timing import LATE_FRACTION, call_metrics
from agentloop.sim import SimServer
from agentloop.trace import attrs as A
from agentloop.trace.fields import Where
from agentloop.trace.span_attrs import model_attrs
from agentloop.types import Message, ModelRequest, ModelResponse

PROFILE = SpeedProfile(base_latency_s=0.05, prefill_tps=20000, output_tps=100)
REQUEST = ModelRequest((Message("system", "Be brief."), Message("user", "Say a lot.")), (), 0)
TIER = Tier(name="sim-lag", base_url="sim", model="sim-lag", api="chat", profile=PROFILE)


def busy(ms: float) -> None:
    """Hold the event loop's thread with CPU work for ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += 1


async def hog(stop: asyncio.Event, chunk_ms: float) -> None:
    """A CPU-bound task beside the stream: ``chunk_ms`` of busy work, then one loop turn."""
    while not stop.is_set():
        busy(chunk_ms)
        await asyncio.sleep(0)


async def one_call(chunk_ms: float | None) -> ModelResponse:
    async with SimServer(profile=PROFILE, filler_tokens=100) as sim:  # ~1 s of decode
        client = OpenAIClient(TIER, base_url=sim.base_url)
        stop = asyncio.Event()
        try:
            await client.complete(REQUEST)  # warm the connection
            load = asyncio.create_task(hog(stop, chunk_ms)) if chunk_ms else None
            resp = await asyncio.wait_for(client.complete(REQUEST), 30)
            stop.set()
            if load:
                await asyncio.wait_for(load, 5)
        finally:
            stop.set()
            await client.aclose()
    return resp


def span_attrs(resp: ModelResponse) -> dict[str, object]:
    return lateness_attrs(resp, call_metrics(resp.timing, resp.usage))


async def test_a_call_beside_a_busy_loop_is_marked_under_load() -> None:
    resp = await one_call(chunk_ms=60)  # each chunk blocks every read due in it by up to 60 ms
    a = span_attrs(resp)
    assert a[A.TIMING_UNDER_LOAD] is True
    assert a[A.LOOP_LAG_MAX_S] >= 0.04  # type: ignore[operator]
    decode = call_metrics(resp.timing, resp.usage).decode_s
    assert decode and a[A.TIMING_ERROR_S] > LATE_FRACTION * decode  # type: ignore[operator]
    # and the trace's typed view reads it back
    typed = model_attrs(a | {A.WAIT_NS: 0}, Where("t.jsonl", 3))
    assert typed.under_load and typed.timing_error_s == a[A.TIMING_ERROR_S]


@pytest.mark.pacing
async def test_a_quiet_call_is_not_marked() -> None:
    """Generous: a 1 s decode tolerates 20 ms of lag (another core's CPU job does not add it)."""
    resp = await one_call(chunk_ms=None)
    a = span_attrs(resp)
    assert a[A.TIMING_UNDER_LOAD] is False, a
    assert a[A.TIMING_ERROR_S] < 0.02  # type: ignore[operator]


def test_a_call_the_client_did_not_measure_has_no_lateness_keys() -> None:
    from agentloop.types import CallTiming, Usage

    resp = ModelResponse("hi", (), Usage(), CallTiming(t_send=1, t_end=2))
    assert span_attrs(resp) == {}
    typed = model_attrs({A.WAIT_NS: 0}, Where("t.jsonl", 3))  # an old trace's shape
    assert typed.timing_error_s is None and typed.under_load is False


def test_a_damaged_bound_names_its_field() -> None:
    from agentloop.errors import TraceFileError

    with pytest.raises(TraceFileError, match=A.TIMING_ERROR_S):
        model_attrs({A.WAIT_NS: 0, A.TIMING_ERROR_S: "late"}, Where("t.jsonl", 3))
