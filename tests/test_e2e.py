"""End to end through the CLI and the embedding API: real simulator, real tools, real trace files."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentloop import RunEvent, open_task, run_task
from agentloop.analysis.graph import build_graph
from agentloop.analysis.lateness import of_trace
from agentloop.analysis.whatif import Scenario, whatif
from agentloop.cli import main
from agentloop.config.tiers import load_tiers
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT, held_drift_s, instant_tier, reap

DEMO = ROOT / "tasks" / "incident" / "checkout-timeouts.yaml"
STEADY = ROOT / "tests" / "data" / "steady.yaml"


@pytest.mark.slow
def test_demo_playbook_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's demo exits 0, its success check passes, and its trace is whole. On sim-fast:
    the task's own tier (sim-standard) plays its model calls at 60 tok/s for ~20 s, which
    proves nothing here (the pacing tests and the what-if test below run sim-standard)."""
    assert "sim-standard" == open_task(DEMO).tier  # what the README's command runs on
    code = main(["run", str(DEMO), "--tier", "sim-fast", "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert 0 == code, out
    assert "status   ok" in out and "check    passed" in out
    assert "by category (critical path):" in out and "reasoning" in out
    assert (
        "what-if  on sim-ultrafast (750 tok/s, the fastest faster tier you have)" in out
        and "ceiling at infinite output speed" in out
    )
    [path] = list(tmp_path.glob("*.jsonl"))
    trace = load_trace(path)
    assert trace.complete and "ok" == trace.end["status"] and [] == trace.problems
    assert trace.end["success"]["passed"] is True
    assert "checkout-timeouts" == trace.header["task"]["name"]
    assert "sim-fast" == trace.header["tier"]["name"]
    kinds = {s.kind for s in trace.spans.values()}
    assert {"run", "step", "model", "tool"} == kinds
    assert all(s.t1 is not None and s.t1 >= s.t0 for s in trace.spans.values())
    steps = sorted(trace.of_kind("step"), key=lambda s: s.t0)
    assert 7 == len(steps)
    assert all([a.id] == b.after for a, b in itertools.pairwise(steps))
    models = sorted(trace.of_kind("model"), key=lambda s: s.t0)
    assert all(m.after for m in models[1:])
    assert all(t.after for t in trace.of_kind("tool"))
    # the second run_tests (after the first edit) fails, the third passes: a real loop
    tests = [
        t
        for t in sorted(trace.of_kind("tool"), key=lambda s: s.t0)
        if t.attrs["gen_ai.tool.name"] == "run_tests"
    ]
    assert [False, False, True] == [t.attrs["ok"] for t in tests]


@pytest.mark.pacing
def test_whatif_predicts_the_ultrafast_run_within_3_percent(tmp_path: Path) -> None:
    """Run on sim-standard, predict sim-ultrafast, run it: prediction within 3% of measured
    (plus the runs' measured lateness and their drift in the categories the what-if holds)."""

    async def both() -> tuple[Path, Path]:
        a = await run_task(STEADY, tier="sim-standard", trace_dir=tmp_path)
        b = await run_task(STEADY, tier="sim-ultrafast", trace_dir=tmp_path)
        assert ("ok", "ok") == (a.status, b.status)
        return Path(a.trace_path or ""), Path(b.trace_path or "")

    path_a, path_b = asyncio.run(both())
    tiers = load_tiers()
    trace_a, trace_b = load_trace(path_a), load_trace(path_b)
    graph_a = build_graph(trace_a)
    predicted = whatif(graph_a, Scenario.tier("sim-ultrafast", tiers["sim-ultrafast"].profile))
    # the agent time: the run span to the end (the trace's clock starts before the set-up)
    measured_b = build_graph(trace_b).measured_ns / 1e9
    # what a busy machine may have added to the two runs' model calls: their own bounds (the
    # embedded simulator's calls: the loop's lag, which delays the simulator's bytes too)
    late_s = of_trace(trace_a).sum_bound_s + of_trace(trace_b).sum_bound_s
    # and what the two runs measured differently where the what-if holds the recording
    held_s = held_drift_s(graph_a, build_graph(trace_b))
    error_s = abs(predicted.predicted_ns / 1e9 - measured_b)
    assert error_s < 0.03 * measured_b + late_s + held_s, (
        f"predicted {predicted.predicted_ns / 1e9:.3f} s, measured {measured_b:.3f} s, "
        f"the runs' own lateness {late_s:.3f} s, the held categories' drift {held_s:.3f} s"
    )
    assert predicted.speedup > 2.5  # the model dominated the standard run


def wait_for_records(
    folder: Path, done: Callable[[list[dict[str, Any]]], bool], within_s: float = 60
) -> None:
    """Wait until the one trace being written in ``folder`` holds records for which ``done``
    is true (the trace is the run's event log: each record is flushed as it happens)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for path in folder.glob("*.jsonl"):
            data = path.read_bytes()
            lines = data.splitlines() if data.endswith(b"\n") else data.splitlines()[:-1]
            if done([orjson.loads(x) for x in lines]):  # a last line still mid-write waits
                return
        time.sleep(0.02)
    raise AssertionError(f"no trace in {folder} reached the awaited state in {within_s} s")


def second_model_call_open(records: list[dict[str, Any]]) -> bool:
    """The second model call has started and not ended."""
    starts = [r["id"] for r in records if r.get("type") == "span_start" and r["kind"] == "model"]
    ended = {r["id"] for r in records if r.get("type") == "span_end"}
    return len(starts) >= 2 and starts[1] not in ended


@pytest.mark.slow
def test_killed_run_leaves_a_loadable_partial_trace(tmp_path: Path) -> None:
    """SIGKILL mid-run leaves a trace that loads as incomplete, with the spans in flight."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentloop.cli",
            "run",
            str(DEMO),
            "--tier",
            "sim-ultrafast",  # the signal's effect is the point, not the model's latency
            "--trace-dir",
            str(tmp_path),
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_records(tmp_path, second_model_call_open)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    [path] = list(tmp_path.glob("*.jsonl"))
    trace = load_trace(path)
    assert not trace.complete
    assert {"run", "step", "model"} <= {s.kind for s in trace.in_flight}
    assert any("no end record" in p for p in trace.problems)
    assert 0 == main(["report", str(path)])


@pytest.mark.slow
def test_sigterm_cancels_cleanly_with_a_closed_trace(tmp_path: Path) -> None:
    """SIGTERM cancels the run: the trace ends with status cancelled and nothing in flight."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentloop.cli",
            "run",
            str(DEMO),
            "--tier",
            "sim-ultrafast",  # the signal's effect is the point, not the model's latency
            "--trace-dir",
            str(tmp_path),
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )
    try:
        wait_for_records(tmp_path, lambda rs: any(r.get("kind") == "tool" for r in rs))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        reap(proc)
    assert b"Traceback" not in err
    assert 0 != proc.returncode
    trace = load_trace(next(tmp_path.glob("*.jsonl")))
    assert trace.complete and "cancelled" == trace.end["status"]
    assert [] == trace.in_flight


async def test_cancelling_the_caller_cancels_the_run(tmp_path: Path) -> None:
    """Embedding: cancelling the task awaiting run_task closes the trace as cancelled."""
    tool_started = asyncio.Event()

    def on_event(event: RunEvent) -> None:
        if event.kind == "tool_start":
            tool_started.set()

    job = asyncio.create_task(
        run_task(DEMO, tier=instant_tier(), trace_dir=tmp_path, events=on_event)
    )
    await tool_started.wait()
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    trace = load_trace(next(tmp_path.glob("*.jsonl")))
    assert "cancelled" == trace.end["status"] and [] == trace.in_flight


@pytest.mark.slow
async def test_embedded_run_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A library user who configured no logging gets no output from a healthy run."""
    import structlog

    structlog.reset_defaults()
    result = await run_task(STEADY, tier="sim-ultrafast", trace_dir=tmp_path)
    captured = capsys.readouterr()
    assert "ok" == result.status
    assert ("", "") == (captured.out, captured.err)
