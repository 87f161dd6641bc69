"""The suite's simulator process: routes over a pipe, served to the real SDK, gone with its parent."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.script import ScriptTurn
from agentloop.sim.child import SimProcess
from agentloop.types import Message, ModelRequest
from tests.conftest import alive, wait_dead

FAST = SpeedProfile(base_latency_s=0.01, prefill_tps=0, output_tps=3000)
SECRET = "sk-proj-child-must-never-see-this-0123456789"


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


async def test_a_route_on_the_child_serves_the_sdk_and_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two routes, two scripts, two profiles, answered over loopback by another process with
    none of the parent's secrets; a closed route answers 404; the child ends with the context."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    slow = SpeedProfile(base_latency_s=0.01, prefill_tps=0, output_tps=200)
    async with SimProcess(FAST, 500.0) as sim:
        pid = sim.pid
        assert pid != os.getpid() and alive(pid)
        env = _environ(pid)
        assert set(env) <= {"PATH", "LANG", "PYTHONPATH"} and SECRET not in str(env)
        answers = {}
        async with (
            sim.route(FAST, [ScriptTurn(text="first route answers")]) as a,
            sim.route(slow, [ScriptTurn(text=" ".join(["slow"] * 40))]) as b,
        ):
            assert a.key != b.key
            for route, profile in ((a, FAST), (b, slow)):
                tier = Tier(name="t", base_url="sim", model="sim", api="chat", profile=profile)
                client = OpenAIClient(tier, base_url=route.base_url)
                try:
                    answers[route.key] = await client.complete(
                        ModelRequest((Message("user", "go"),), (), 0)
                    )
                finally:
                    await client.aclose()
            assert (await sim.stats())["routes"] == 2
        assert answers[a.key].text == "first route answers"
        t = answers[b.key].timing
        assert t.t_first_visible is not None and t.t_last is not None
        decode_s = (t.t_last - t.t_first_visible) / 1e9
        assert 39 / decode_s == pytest.approx(200, rel=0.15)  # its own profile, not the first's
        async with httpx.AsyncClient() as http:
            gone = await http.get(f"{a.base_url}/models")
        assert gone.status_code == 404 and "unknown_route" in gone.text
        assert await sim.stats() == {"connections": 3, "routes": 0}  # each client, and the GET
    assert await wait_dead([pid]) == []


PARENT = """
import asyncio, sys
from agentloop.sim.child import SimProcess
from agentloop.config.tiers import SpeedProfile
async def main():
    async with SimProcess(SpeedProfile(0.01, 0, 1000), 500.0) as sim:
        print(sim.pid, flush=True)
        await asyncio.sleep(60)
asyncio.run(main())
"""


async def test_the_child_ends_when_its_parent_is_killed() -> None:
    """SIGKILL of the suite's process (no cleanup runs) closes the pipe: the child exits."""
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert parent.stdout is not None
        child = int(await asyncio.wait_for(parent.stdout.readline(), 30))
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        await asyncio.wait_for(parent.wait(), 10)
        assert await wait_dead([child], within_s=10) == []
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


async def test_a_dead_child_is_a_simulator_error_not_a_hang() -> None:
    """The child killed under a suite: a run asking for a route gets SimulatorError at once."""
    from agentloop.errors import SimulatorError

    async with SimProcess(FAST, 500.0) as sim:
        os.kill(sim.pid, signal.SIGKILL)
        with pytest.raises(SimulatorError) as info:
            for _ in range(100):  # until the parent has seen the pipe close
                async with asyncio.timeout(5), sim.route(FAST, [ScriptTurn(text="x")]):
                    await asyncio.sleep(0.02)
    assert "simulator process" in info.value.message
