"""The set-up is recorded as a root span of kind ``setup`` before the run span, in a trace opened
at the run's first moment (issue 24): the reader keeps it out of the analysis, so the figures are
the same with it or without it, and a run killed while setting up leaves a loadable trace."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from pathlib import Path

import orjson
import pytest

from agentloop.api import run_task
from agentloop.trace.reader import load_trace
from tests.conftest import instant_tier, sigint_default
from tests.test_check_span import figures
from tests.test_suite import task_file

SETTING_UP = b'"setup commands"'  # in the trace once the setup commands' part has begun


async def test_the_setup_is_a_span_outside_the_agent_time(tmp_path: Path) -> None:
    task = task_file(
        tmp_path, "setup", extra="setup: [\"python -c 'import time; time.sleep(0.2)'\"]\n"
    )
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path / "traces")
    assert result.success is True
    path = Path(str(result.trace_path))
    trace = load_trace(path)
    setups = [s for s in trace.outside.values() if s.kind == "setup"]
    [setup] = [s for s in setups if s.parent is None]
    parts = sorted((s for s in setups if s.parent == setup.id), key=lambda s: s.t0)
    assert ["venv", "copy", "jail", "setup commands", "model client"] == [s.name for s in parts]
    assert len(setups) == 1 + len(parts)
    assert all(a.t1 is not None and a.t1 <= b.t0 for a, b in itertools.pairwise(parts))
    assert parts[3].t1 is not None and parts[3].t1 - parts[3].t0 >= 200_000_000  # the sleep
    assert setup.t1 is not None and setup.t1 - setup.t0 >= 200_000_000
    run = next(s for s in trace.spans.values() if s.kind == "run")
    assert setup.t1 <= run.t0  # before the run span, not in it
    assert all(s.kind != "setup" for s in trace.spans.values())
    assert trace.run.raw["workspace"] == setup.attrs["workspace"]  # learnt by the set-up
    lines = path.read_bytes().splitlines()
    ids = {s.id for s in setups}
    without = [line for line in lines if orjson.loads(line).get("id") not in ids]
    assert len(without) == len(lines) - 2 * len(setups)
    assert figures(lines) == figures(without)  # as a trace written before the setup span


async def test_a_run_killed_in_its_setup_leaves_a_trace(tmp_path: Path) -> None:
    task = task_file(
        tmp_path, "slow", extra="setup: [\"python -c 'import time; time.sleep(60)'\"]\n"
    )
    traces = tmp_path / "traces"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentloop", "run", str(task), "--tier", "sim-ultrafast",
        "--trace-dir", str(traces),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        env=os.environ, start_new_session=True,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            while not any(SETTING_UP in p.read_bytes() for p in traces.glob("*.jsonl")):
                await asyncio.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    [path] = traces.glob("*.jsonl")
    trace = load_trace(path)
    assert not trace.complete and trace.run.task.name == "slow"
    open_parts = {s.name for s in trace.outside.values() if s.t1 is None}
    assert {"set-up", "setup commands"} == open_parts
    assert not trace.spans
    from agentloop.analysis import build_graph, build_report
    from agentloop.analysis.report_text import render_report

    assert "wall time: not known (the run was stopped in its set-up" in render_report(
        build_report(build_graph(trace))
    )


async def test_report_shows_both_times_labelled(tmp_path: Path) -> None:
    """Agent time (the run span) and wall time (set-up + agent + check), in text, JSON and
    HTML; a trace without the setup and check spans says its wall time was not recorded."""
    from agentloop.analysis import build_graph, build_report
    from agentloop.analysis.report import report_document
    from agentloop.analysis.report_text import render_report
    from agentloop.export.html import report_html
    from agentloop.trace.reader import parse_lines

    task = task_file(
        tmp_path,
        "timed",
        check="python -c 'import time; time.sleep(0.2)'",
        extra="setup: [\"python -c 'import time; time.sleep(0.2)'\"]\n",
    )
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path / "traces")
    path = Path(str(result.trace_path))
    trace = load_trace(path)
    r = build_report(build_graph(trace))
    assert r.setup_ns is not None and r.setup_ns >= 200_000_000
    assert r.check_ns is not None and r.check_ns >= 200_000_000
    assert r.wall_ns is not None and r.wall_ns >= r.setup_ns + r.measured_ns + r.check_ns
    text = render_report(r)
    assert f"agent time {r.measured_ns / 1e9:.3f} s" in text
    assert f"wall time {r.wall_ns / 1e9:.3f} s (set-up " in text and "success check" in text
    doc = report_document(trace)
    assert doc["agent_s"] == r.measured_ns / 1e9 and doc["wall_s"] == r.wall_ns / 1e9
    assert f"wall time {r.wall_ns / 1e9:.3f} s" in report_html(trace)
    lines = path.read_bytes().splitlines()
    outside = set(trace.outside)
    old = parse_lines([line for line in lines if orjson.loads(line).get("id") not in outside])
    r_old = build_report(build_graph(old))
    assert r_old.wall_ns is None and r_old.measured_ns == r.measured_ns
    assert "wall time: not recorded" in render_report(r_old)
    assert report_document(old)["wall_s"] is None


async def test_ctrl_c_in_the_setup_ends_its_trace_cancelled_in_the_set_up(tmp_path: Path) -> None:
    """SIGINT while the setup commands run: exit 130, one line naming the trace, and a trace
    that loads complete: the setup span and its part cancelled, the end record saying the run
    was cancelled during the set-up, no run span; the report says so."""
    task = task_file(
        tmp_path, "slow", extra="setup: [\"python -c 'import time; time.sleep(60)'\"]\n"
    )
    traces = tmp_path / "traces"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentloop", "run", str(task), "--tier", "sim-ultrafast",
        "--trace-dir", str(traces), "-q",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env=os.environ, start_new_session=True, preexec_fn=sigint_default,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            while not any(SETTING_UP in p.read_bytes() for p in traces.glob("*.jsonl")):
                await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            assert proc.stderr is not None
            err = (await proc.stderr.read()).decode()
            assert 130 == await proc.wait()
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    [path] = traces.glob("*.jsonl")
    said = f"agentloop: interrupted; trace at {path} (stopped in its set-up: closed with status "
    assert err.startswith(said) and 1 == len(err.splitlines())
    trace = load_trace(path)
    assert trace.complete and not trace.spans and [] == trace.problems
    assert ("cancelled", "cancelled during set-up", 0) == (
        trace.end["status"], trace.end["reason"], trace.end["steps"]
    )  # fmt: skip
    [setup] = [s for s in trace.outside.values() if s.parent is None]
    assert setup.kind == "setup" and setup.status == "cancelled"
    [commands] = [s for s in trace.outside.values() if s.name == "setup commands"]
    assert "cancelled" == commands.status and commands.t1 is not None
    from agentloop.analysis import build_graph, build_report
    from agentloop.analysis.report_text import render_report

    r = build_report(build_graph(trace))
    assert 0 == r.measured_ns and r.setup_ns == setup.t1 - setup.t0  # no agent time: set-up
    assert r.wall_ns is not None and r.wall_ns >= r.setup_ns
    text = render_report(r)
    assert "agent time 0.000 s" in text and "status cancelled, 0 steps" in text
    assert f"wall time {r.wall_ns / 1e9:.3f} s (set-up " in text


async def test_a_failed_setup_command_ends_the_trace_as_a_set_up_failure(tmp_path: Path) -> None:
    """A setup command that exits 3: the run raises the task file error, and its trace ends
    with status error, the reason naming the set-up and the command, the failed part marked."""
    from agentloop.errors import TaskFileError

    task = task_file(tmp_path, "broken", extra='setup: ["exit 3"]\n')
    traces = tmp_path / "traces"
    with pytest.raises(TaskFileError, match="exit code 3"):
        await run_task(task, tier=instant_tier(), trace_dir=traces)
    [path] = traces.glob("*.jsonl")
    trace = load_trace(path)
    assert trace.complete and "error" == trace.end["status"]
    assert trace.end["reason"].startswith("set-up failed: ")
    assert "exit code 3" in trace.end["reason"]
    [commands] = [s for s in trace.outside.values() if s.name == "setup commands"]
    assert "error" == commands.status and "exit code 3" in commands.attrs["error"]
    assert "model client" not in {s.name for s in trace.outside.values()}
