"""The simulator's silent start (``headers_after_prefill``): nothing, headers included, until base
latency and prefill have passed, then the same stream; over real HTTP with the real SDK.

Durations are asserted only as lower bounds (a silence the server must have kept) and as an
order of events, never as speed.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from agentloop.config.tiers import SpeedProfile
from agentloop.model.tokens import count_tokens
from agentloop.sim import SimServer

PROFILE = SpeedProfile(base_latency_s=0.3, prefill_tps=0, output_tps=400)


async def first_byte_and_token(sdk: openai.AsyncOpenAI, api: str) -> tuple[float, float, str]:
    """Seconds from the request to its headers and to its first text delta, and the text."""
    t0 = time.perf_counter()
    stream: Any
    if api == "responses":
        stream = await sdk.responses.create(model="m", input="Read this.", stream=True)
    else:
        stream = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Read this."}], stream=True
        )
    t_hdr = time.perf_counter() - t0
    t_first, text = None, []
    async for ev in stream:
        delta = (
            getattr(ev, "delta", None)
            if api == "responses" and ev.type == "response.output_text.delta"
            else (ev.choices[0].delta.content if api == "chat" and ev.choices else None)
        )
        if delta:
            t_first = t_first or time.perf_counter() - t0
            text.append(delta)
    assert t_first is not None
    return t_hdr, t_first, "".join(text)


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_headers_after_prefill_holds_every_byte_until_the_prompt_is_read(api: str) -> None:
    """With the option the headers come no sooner than base latency + prefill (0.3 s), and the
    answer is the one streamed without it; without it the headers come before the first token."""
    results = {}
    for held in (False, True):
        async with SimServer(profile=PROFILE, filler_tokens=8, headers_after_prefill=held) as sim:
            sdk = openai.AsyncOpenAI(api_key="sim-no-key", base_url=sim.base_url, max_retries=0)
            try:
                results[held] = await first_byte_and_token(sdk, api)
            finally:
                await sdk.close()
    (hdr, first, text), (held_hdr, held_first, held_text) = results[False], results[True]
    assert hdr < first and 0.3 <= first  # headers at once, the token after the prefill
    assert 0.3 <= held_hdr <= held_first  # nothing at all before the prefill has passed
    assert text == held_text and 8 == count_tokens(text)
