"""OpenAI's stateless reasoning contract, end to end over real HTTP: the simulator's Responses
endpoint emits reasoning items the way the real API does, and agentloop's client asks for their
encrypted content and passes every item back verbatim in each later request of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from agentloop.api import run_task
from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tasks import load_task
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.errors import ModelAPIError
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import SimServer
from agentloop.trace.reader import load_trace
from agentloop.types import Message, ModelRequest, ToolSpec

FAST = SpeedProfile(base_latency_s=0.02, prefill_tps=0, output_tps=4000)
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
SCRIPT = [
    ScriptTurn(
        text="Reading it.",
        reasoning_tokens=40,
        tool_calls=(ScriptToolCall("read_file", '{"path": "a.txt"}'),),
    ),
    ScriptTurn(
        text="Now the second file.",
        reasoning_tokens=30,
        tool_calls=(ScriptToolCall("read_file", '{"path": "b.txt"}'),),
    ),
    ScriptTurn(text="Both files are fine.", reasoning_tokens=20),
]
STEADY = Path(__file__).parent / "data" / "steady.yaml"


def reasoning_tier(**options: Any) -> Tier:
    opts = {"reasoning_effort": "medium", "reasoning_summary": "auto", **options}
    return Tier(
        name="sim-reasoning",
        base_url="sim",
        model="sim-test",
        api="responses",
        profile=FAST,
        options=opts,
    )


def sdk(sim: SimServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="sim-no-key", base_url=sim.base_url, max_retries=0)


async def first_turn(client: openai.AsyncOpenAI, **kw: Any) -> tuple[list[str], Any]:
    """Stream turn 0 through the SDK's typed events; the event types and the final response."""
    kinds, final = [], None
    stream = await client.responses.create(
        model="sim-test", input=[{"role": "user", "content": "go"}], stream=True, store=False, **kw
    )
    async for ev in stream:
        kinds.append(ev.type)
        if ev.type == "response.completed":
            final = ev.response
    return kinds, final


async def test_reasoning_items_carry_a_summary_and_encrypted_content_only_when_asked() -> None:
    """Through the real SDK: an rs_ id always; the summary streams when reasoning.summary is set;
    encrypted_content is there only with include=["reasoning.encrypted_content"]."""
    async with SimServer(profile=FAST, script=SCRIPT) as sim:
        client = sdk(sim)
        kinds, asked = await first_turn(
            client,
            reasoning={"effort": "medium", "summary": "auto"},
            include=["reasoning.encrypted_content"],
        )
        _, plain = await first_turn(client, reasoning={"effort": "medium"})
        await client.close()
    item = asked.output[0]
    assert ("reasoning", True) == (item.type, item.id.startswith("rs_"))
    assert item.encrypted_content is not None and item.encrypted_content.startswith("gAAAA")
    assert ["summary_text"] == [p.type for p in item.summary]
    assert "Planning turn 1" in item.summary[0].text
    for kind in (
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ):
        assert kind in kinds
    assert kinds.index("response.reasoning_summary_text.delta") < kinds.index(
        "response.output_text.delta"
    )
    bare = plain.output[0]
    assert (None, []) == (bare.encrypted_content, bare.summary)


async def test_the_simulator_tells_passed_back_reasoning_from_missing_or_forged() -> None:
    """Passed back verbatim: counted and served; without encrypted content under store=false:
    404 as the real API; forged: 400; dropped in strict mode: 400 naming the turn."""
    async with SimServer(profile=FAST, script=SCRIPT, require_reasoning=True) as sim:
        client = sdk(sim)
        _, r0 = await first_turn(
            client, reasoning={"effort": "medium"}, include=["reasoning.encrypted_content"]
        )
        rs = r0.output[0].model_dump(exclude_none=True)
        call = r0.output[-1]
        tail = [
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "A"},
        ]

        async def second(items: list[dict[str, Any]]) -> Any:
            return await client.responses.create(
                model="sim-test",
                input=[{"role": "user", "content": "go"}, *items, *tail],
                store=False,
                include=["reasoning.encrypted_content"],
            )

        ok = await second([rs])
        received = sim.reasoning_received
        with pytest.raises(openai.NotFoundError) as missing_content:
            await second([{k: v for k, v in rs.items() if k != "encrypted_content"}])
        with pytest.raises(openai.BadRequestError) as forged:
            await second([{**rs, "encrypted_content": rs["encrypted_content"][:-4] + "AAAA"}])
        with pytest.raises(openai.BadRequestError) as dropped:
            await second([])
        await client.close()
    assert "Now the second file." == ok.output_text
    assert 1 == received
    assert "Items are not persisted when `store` is set to false" in str(missing_content.value)
    assert "invalid_encrypted_content" == forged.value.code
    assert "reasoning_items_missing" == dropped.value.code and "[0]" in str(dropped.value)
    assert 1 == sim.reasoning_missing


async def test_the_client_sends_every_reasoning_item_back_in_every_later_request() -> None:
    """OpenAIClient asks for encrypted content (the simulator only signs items when asked) and
    re-sends turn 0's item in request 2 and both items in request 3: strict mode never refuses."""
    tier = reasoning_tier()
    messages = [Message("system", "Be careful."), Message("user", "Read both files.")]
    responses = []
    async with SimServer(profile=FAST, script=SCRIPT, require_reasoning=True) as sim:
        client = OpenAIClient(tier, base_url=sim.base_url)
        try:
            for _ in SCRIPT:
                resp = await client.complete(ModelRequest(tuple(messages), (READ,), 1))
                responses.append(resp)
                messages.append(resp.as_message())
                messages += [
                    Message("tool", "contents", tool_call_id=c.id, name=c.name)
                    for c in resp.tool_calls
                ]
        finally:
            await client.aclose()
        received, missing = sim.reasoning_received, sim.reasoning_missing
    assert (1 + 2, 0) == (received, missing)
    assert ["Both files are fine."] == [responses[-1].text]
    assert [(True, True)] * 3 == [
        (r.reasoning[0].encrypted, r.reasoning[0].id.startswith("rs_")) for r in responses
    ]
    assert [f"**Planning turn {i}**" for i in (1, 2, 3)] == [
        r.reasoning[0].summary[0].split("\n")[0] for r in responses
    ]
    raw = orjson.loads(responses[0].reasoning[0].raw)
    assert ("reasoning", True) == (raw["type"], raw["encrypted_content"].startswith("gAAAA"))


async def test_without_reasoning_on_the_client_does_not_ask_and_strict_mode_notices() -> None:
    """A tier without reasoning_effort never asks for encrypted content, so it cannot pass the
    items back: the strict simulator refuses turn 2, naming the reasoning turn it lost."""
    tier = Tier(name="sim-plain", base_url="sim", model="sim-test", api="responses", profile=FAST)
    async with SimServer(profile=FAST, script=SCRIPT, require_reasoning=True) as sim:
        client = OpenAIClient(tier, base_url=sim.base_url)
        try:
            r0 = await client.complete(ModelRequest((Message("user", "go"),), (READ,), 1))
            history = (
                Message("user", "go"),
                r0.as_message(),
                Message("tool", "A", tool_call_id=r0.tool_calls[0].id, name="read_file"),
            )
            with pytest.raises(ModelAPIError) as refused:
                await client.complete(ModelRequest(history, (READ,), 2))
        finally:
            await client.aclose()
    assert (False, 400) == (r0.reasoning[0].encrypted, refused.value.status)
    assert "model turn(s) [0] reasoned" in refused.value.message


async def test_a_whole_run_passes_reasoning_back_and_records_summaries_in_the_trace(
    tmp_path: Path,
) -> None:
    """A task run through run_task against the strict simulator ends ok; each model span's
    output lists its reasoning item with its summary (the encrypted content is not traced)."""
    task = load_task(STEADY)
    tier = reasoning_tier()
    async with SimServer(profile=FAST, script=list(task.script), require_reasoning=True) as sim:
        client = OpenAIClient(tier, base_url=sim.base_url)
        try:
            result = await run_task(task, tier=tier, client=client, trace_dir=tmp_path)
        finally:
            await client.aclose()
        received = sim.reasoning_received
    assert ("ok", 3) == (result.status, result.steps)
    assert 1 + 2 == received
    trace = load_trace(Path(str(result.trace_path)))
    outputs = [s.attrs["output"] for s in trace.of_kind("model")]
    assert [[True]] * 3 == [[r["encrypted"] for r in o["reasoning"]] for o in outputs]
    assert all(o["reasoning"][0]["summary"][0].startswith("**Planning turn") for o in outputs)
    assert "gAAAA" not in Path(str(result.trace_path)).read_text()
