"""The process's run gate: a set-up run waits for the others' set-ups (bounded), then passes spaced."""

from __future__ import annotations

import asyncio

from agentloop.loop.loadgate import RunGate, gate_for_loop


async def test_a_lone_run_passes_at_once() -> None:
    gate = RunGate()
    await asyncio.wait_for(gate.start(gate.arrive()), 1)
    assert gate.held == 0


async def test_a_set_up_run_waits_for_the_others_then_they_pass() -> None:
    gate = RunGate(spacing_s=0.0)
    a, b = gate.arrive(), gate.arrive()
    first = asyncio.create_task(gate.start(a))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not first.done()  # b is still setting up
    gate.leave(b)  # b's set-up failed: it no longer holds a
    await asyncio.wait_for(first, 1)
    assert gate.held == 1 and gate.setting_up == 0


async def test_the_hold_is_bounded() -> None:
    gate = RunGate(max_hold_s=0.05)
    gate.arrive()  # never set up
    await asyncio.wait_for(gate.start(gate.arrive()), 2)


async def test_the_environment_turns_it_off(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert gate_for_loop() is gate_for_loop()  # one per loop
    monkeypatch.setenv("AGENTLOOP_LOAD_GATE", "off")
    assert gate_for_loop() is None
