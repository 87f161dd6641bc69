"""The suite's start gate holds the first wave's runs until all are set up, then spaces them."""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import Iterator

import pytest

from agentloop.suite.gate import StartGate, Ticket


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # a gate opened here without the suite's close()


async def _run(gate: StartGate, arrive_after_s: float | None, passed: list[float]) -> None:
    ticket = Ticket()
    try:
        if arrive_after_s is not None:
            await asyncio.sleep(arrive_after_s)
            await gate.wait(ticket)
            passed.append(time.perf_counter())
    finally:
        gate.leave(ticket)


async def test_gate_waits_for_every_run_then_lets_them_through_spaced() -> None:
    """Two runs arrive at once and a third 0.3 s later: none passes before the third arrives,
    then all three pass 0.05 s apart."""
    gate = StartGate(3, spacing_s=0.05)
    passed: list[float] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_run(gate, s, passed) for s in (0.0, 0.0, 0.3)))
    offsets = [p - t0 for p in passed]
    assert 3 == len(offsets)
    assert min(offsets) >= 0.3
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert all(g >= 0.045 for g in gaps)


async def test_a_run_that_ends_before_arriving_is_not_waited_for() -> None:
    """A run that fails in its set-up (never takes a route) opens the gate for the others."""
    gate = StartGate(2, spacing_s=0.0)
    passed: list[float] = []
    t0 = time.perf_counter()
    await asyncio.wait_for(
        asyncio.gather(_run(gate, 0.0, passed), _run(gate, None, passed)), timeout=5
    )
    assert 1 == len(passed)
    assert passed[0] - t0 < 1.0


async def test_a_run_held_too_long_is_let_go() -> None:
    """When a first-wave run never arrives nor ends, the others go max_wait_s after the last arrival."""
    gate = StartGate(2, max_wait_s=0.2, spacing_s=0.0)
    t0 = time.perf_counter()
    await gate.wait(Ticket())
    assert 0.19 <= time.perf_counter() - t0 < 2.0


async def test_runs_after_the_first_wave_pass_at_once() -> None:
    """Once open, the gate holds no one: a later run passes without waiting."""
    gate = StartGate(1, spacing_s=10.0)
    await gate.wait(Ticket())
    t0 = time.perf_counter()
    await gate.wait(Ticket())
    assert time.perf_counter() - t0 < 0.5


async def test_the_gate_freezes_the_wave_s_set_up_for_the_collector_until_closed() -> None:
    """Asked to (freeze_gc), opening moves what exists out of the collector's sight; close()
    gives it back; a run of the first wave is held (will_hold) only while the gate is shut."""
    gate = StartGate(1, spacing_s=0.0, freeze_gc=True)
    first = Ticket()
    assert gate.will_hold(first) and gc.get_freeze_count() == 0
    await gate.wait(first)
    assert not gate.will_hold(Ticket())
    assert gc.get_freeze_count() > 0
    gate.close()
    assert gc.get_freeze_count() == 0


async def test_the_gate_leaves_the_collector_alone_unless_asked() -> None:
    """A library does not decide for its process: without freeze_gc nothing is frozen."""
    gate = StartGate(1, spacing_s=0.0)
    await gate.wait(Ticket())
    assert gc.get_freeze_count() == 0
    gate.close()
    assert gc.get_freeze_count() == 0


async def test_a_ticket_that_arrived_passes_again_at_once() -> None:
    """A run arrives once: a second wait with its ticket is not counted nor held."""
    gate = StartGate(2, max_wait_s=10.0, spacing_s=0.0)
    ticket = Ticket(arrived=True)
    assert not gate.will_hold(ticket)
    await asyncio.wait_for(gate.wait(ticket), timeout=5)  # held, it would wait 10 s
    assert 0 == gate.arrived
