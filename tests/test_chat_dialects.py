"""Chat Completions as real servers speak it (llama.cpp, vLLM, DeepSeek, bare servers), each
reproduced by a simulator dialect and read by agentloop's client over real HTTP."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from agentloop.api import run_task
from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tasks import load_task
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.errors import ConfigError
from agentloop.model.tokens import chat_input_tokens, count_tokens
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import SimServer
from agentloop.trace.reader import load_trace
from agentloop.types import Message, ModelRequest, ModelResponse, ToolSpec

PROFILE = SpeedProfile(base_latency_s=0.05, prefill_tps=0, output_tps=500)
TIER = Tier(name="chat-server", base_url="sim", model="local-model", api="chat", profile=PROFILE)
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
ARGS = '{"path": "src/app.py", "lines": [1, 20], "note": "é ✓"}'
TEXT_TURN = ScriptTurn(text="The config is fine, nothing to change.", reasoning_tokens=50)
TOOL_TURN = ScriptTurn(reasoning_tokens=40, tool_calls=(ScriptToolCall("read_file", ARGS),))
MESSAGES = (Message("system", "You are careful."), Message("user", "Check the config."))
STEADY = Path(__file__).parent / "data" / "steady.yaml"


async def call(dialect: str, turn: ScriptTurn) -> ModelResponse:
    async with SimServer(profile=PROFILE, script=[turn], dialect=dialect) as sim:
        client = OpenAIClient(TIER, base_url=sim.base_url)
        try:
            return await client.complete(ModelRequest(MESSAGES, (READ,), 1))
        finally:
            await client.aclose()


def seconds(a: int | None, b: int | None) -> float:
    assert a is not None and b is not None
    return (b - a) / 1e9


async def test_reasoning_content_deltas_are_hidden_reasoning() -> None:
    """vLLM/DeepSeek reasoning_content: kept as reasoning text, not answer text; it starts the
    first-chunk clock after the base latency, the visible clock waits for the answer."""
    r = await call("vllm", TEXT_TURN)
    assert TEXT_TURN.text == r.text
    assert (50, 50, False) == (
        count_tokens(r.reasoning_text),
        r.usage.reasoning_tokens,
        r.usage.estimated,
    )
    ttft = seconds(r.timing.t_send, r.timing.t_first)
    ttft_visible = seconds(r.timing.t_send, r.timing.t_first_visible)
    # deadlines are absolute, so load can only delay them: the first reasoning delta comes after
    # the base latency, the first visible one not before base + 50 reasoning tokens at 500 tok/s
    assert (True, True, True) == (
        ttft >= 0.05,
        ttft_visible >= 0.05 + 50 / 500 - 0.002,
        ttft < ttft_visible,
    )


async def test_llama_cpp_reasoning_is_counted_by_the_tokenizer_and_marked_estimated() -> None:
    """llama.cpp's usage has no reasoning count: agentloop counts the reasoning text itself and
    says so; the server's own timings object is kept beside ours."""
    r = await call("llama.cpp", TEXT_TURN)
    visible = count_tokens(TEXT_TURN.text)
    assert (50 + visible, 50, True) == (
        r.usage.output_tokens,
        r.usage.reasoning_tokens,
        r.usage.estimated,
    )
    assert r.server_timings is not None
    assert r.server_timings["predicted_n"] == 50 + visible
    assert r.server_timings["predicted_per_second"] == pytest.approx(500, rel=0.02)


async def test_tool_call_arguments_in_one_chunk_are_assembled_exactly() -> None:
    """llama.cpp sends a tool call whole (id, name, all arguments in one delta) once generated."""
    r = await call("llama.cpp", TOOL_TURN)
    assert [("call_0_0", "read_file", ARGS)] == [(c.id, c.name, c.arguments) for c in r.tool_calls]
    assert r.timing.t_first_visible == r.timing.t_last  # one visible chunk
    assert "tool_calls" == r.finish_reason


async def test_a_stream_without_usage_or_done_ends_by_finish_reason_and_is_estimated() -> None:
    """No usage chunk and no [DONE]: the call ends at the body's end after finish_reason, with
    token counts from agentloop's tokenizer, flagged as estimated (never passed off as real)."""
    r = await call("bare", TEXT_TURN)
    body_messages = [{"role": m.role, "content": m.content} for m in MESSAGES]
    assert (TEXT_TURN.text, "stop") == (r.text, r.finish_reason)
    assert r.timing.t_end is not None
    assert (chat_input_tokens(body_messages), count_tokens(TEXT_TURN.text), True) == (
        r.usage.input_tokens,
        r.usage.output_tokens,
        r.usage.estimated,
    )


async def test_the_sdk_reads_every_dialect_too() -> None:
    """The official SDK's typed chat stream parses each dialect (a fidelity check of the sim)."""
    contents = {}
    for dialect in ("llama.cpp", "bare"):
        async with SimServer(profile=PROFILE, script=[TEXT_TURN], dialect=dialect) as sim:
            sdk = openai.AsyncOpenAI(api_key="sim-no-key", base_url=sim.base_url, max_retries=0)
            stream = await sdk.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            contents[dialect] = "".join(
                [c.choices[0].delta.content or "" async for c in stream if c.choices]
            )
            await sdk.close()
    assert {"llama.cpp": TEXT_TURN.text, "bare": TEXT_TURN.text} == contents


def test_an_unknown_dialect_is_refused_naming_the_known_ones() -> None:
    """A typo in a dialect name is a ConfigError listing presets and flags."""
    with pytest.raises(ConfigError) as exc:
        SimServer(profile=PROFILE, dialect="llama.cp")
    assert "llama.cpp" in str(exc.value) and "no_done" in str(exc.value)


async def test_a_run_records_estimates_reasoning_text_and_server_timings(tmp_path: Path) -> None:
    """A whole run against a llama.cpp-dialect server: every model span says usage_estimated,
    carries the reasoning text and the server's timings, and the run ends ok."""
    task = load_task(STEADY)
    tier = Tier(
        name="llama-like",
        base_url="sim",
        model="m",
        api="chat",
        profile=SpeedProfile(base_latency_s=0.02, prefill_tps=0, output_tps=3000),
    )
    async with SimServer(
        profile=tier.profile,
        script=list(task.script),  # type: ignore[arg-type]
        dialect="llama.cpp",
    ) as sim:
        client = OpenAIClient(tier, base_url=sim.base_url)
        try:
            result = await run_task(task, tier=tier, client=client, trace_dir=tmp_path)
        finally:
            await client.aclose()
    assert "ok" == result.status
    spans = load_trace(Path(str(result.trace_path))).of_kind("model")
    assert [True] * 3 == [s.attrs["usage_estimated"] for s in spans]
    assert [90, 60, 120] == [s.attrs["gen_ai.usage.reasoning.output_tokens"] for s in spans]
    assert [90, 60, 120] == [count_tokens(s.attrs["output"]["reasoning_text"]) for s in spans]
    assert all(s.attrs["server_timings"]["predicted_per_second"] > 0 for s in spans)
