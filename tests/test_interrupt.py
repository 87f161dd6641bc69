"""Ctrl-C of ``run`` and ``suite`` (a real SIGINT to a real process): one line saying where the
trace (or suite.json) is, no stray exception text, exit 130; an interrupted suite.json says so
and keeps its cancelled runs with their closed traces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from agentloop.suite.records import load_suite
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT, reap, sigint_default
from tests.test_e2e import DEMO, wait_for_records
from tests.test_suite import task_file

BAD_DEPLOY = ROOT / "tasks" / "incident" / "bad-deploy.yaml"


def _interrupt(args: list[str], ready: Path, files: int = 1) -> tuple[int, str]:
    """Start ``agentloop ARGS``, wait (bounded) until ``files`` traces in ``ready`` hold a tool
    record, send SIGINT; its exit code and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentloop", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=sigint_default,
    )
    try:
        for _ in range(files):
            wait_for_records(ready, lambda rs: any(r.get("kind") == "tool" for r in rs))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    return proc.returncode, err.decode()


@pytest.mark.slow
def test_ctrl_c_of_a_run_says_where_its_trace_is(tmp_path: Path) -> None:
    code, err = _interrupt(
        ["run", str(DEMO), "--tier", "sim-ultrafast", "--trace-dir", str(tmp_path), "-q"],
        tmp_path,
    )
    path = next(tmp_path.glob("*.jsonl"))
    assert 130 == code
    assert f"agentloop: interrupted; trace at {path} (closed with status cancelled)\n" == err
    trace = load_trace(path)
    assert trace.complete and "cancelled" == trace.end["status"] and [] == trace.in_flight


@pytest.mark.slow
def test_ctrl_c_of_a_suite_keeps_its_cancelled_runs(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    args = ["suite", str(BAD_DEPLOY), "--repeat", "3", "--concurrency", "2"]
    code, err = _interrupt(
        [*args, "--tier", "sim-ultrafast", "--out", str(out)], out / "traces", files=1
    )
    assert 130 == code
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith(f"agentloop: interrupted; suite at {out / 'suite.json'}: ")
    assert "Traceback" not in err and "exception" not in err.lower()
    assert 1 == sum("agentloop:" in line for line in lines)
    data = orjson.loads((out / "suite.json").read_bytes())
    assert data["interrupted"] is True
    suite = load_suite(out)
    cancelled = [r for r in suite.runs if r.status == "cancelled"]
    assert cancelled and suite.not_started == 3 - len(suite.runs)
    for r in cancelled:
        assert r.trace is not None and "interrupted" in r.reason
        trace = load_trace(out / r.trace)
        assert trace.complete and "cancelled" == trace.end["status"]
    assert f"{len(cancelled)} cancelled (their traces kept)" in lines[-1]


def test_reap_closes_the_pipes_of_the_child_it_stops() -> None:
    """A test that fails while its child runs (a timed-out ``communicate``) leaves no pipe to the
    garbage collector, which would warn (an error here) in whichever test runs next."""
    proc = subprocess.Popen(["sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert -signal.SIGTERM == reap(proc)
    assert proc.stdout is not None and proc.stdout.closed
    assert proc.stderr is not None and proc.stderr.closed


def _all_setting_up(folder: Path, runs: int, within_s: float = 120) -> None:
    """Wait (bounded) until ``runs`` traces in ``folder`` each have their setup commands going."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        going = [p for p in folder.glob("*.jsonl") if b'"setup commands"' in p.read_bytes()]
        if len(going) == runs:
            return
        time.sleep(0.02)
    raise AssertionError(f"{runs} runs in {folder} did not all reach their setup commands")


@pytest.mark.slow
def test_ctrl_c_of_a_suite_in_its_set_ups_prints_no_stray_jail_error(tmp_path: Path) -> None:
    """Ctrl-C as a terminal sends it (SIGINT to the whole process group: the jails' bwrap and
    init get it too) while every run's setup command runs: one line, no "Future exception was
    never retrieved ... JailError", exit 130; each run's trace ends cancelled during set-up."""
    runs = 4
    sleep = "python -c 'import time; time.sleep(60)'"
    task = task_file(tmp_path, "slow", extra=f'setup: ["{sleep}"]\n')
    out = tmp_path / "suite"
    args = ["suite", str(task), "--repeat", str(runs), "--concurrency", str(runs)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentloop", *args, "--tier", "sim-ultrafast", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group, as a terminal's foreground job
        preexec_fn=sigint_default,
    )
    try:
        _all_setting_up(out / "traces", runs)
        os.killpg(proc.pid, signal.SIGINT)
        _, err_bytes = proc.communicate(timeout=60)
    finally:
        reap(proc)
    err = err_bytes.decode()
    assert 130 == proc.returncode
    assert "never retrieved" not in err and "JailError" not in err and "Traceback" not in err
    assert 1 == sum("agentloop:" in line for line in err.splitlines())
    suite = load_suite(out)
    assert runs == len(suite.runs) and all("cancelled" == r.status for r in suite.runs)
    for r in suite.runs:
        assert r.trace is not None
        end = load_trace(out / r.trace).end
        assert end is not None and "cancelled during set-up" == end["reason"]
