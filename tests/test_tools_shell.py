"""Shell tools with real subprocesses: run (exit codes, caps, timeouts, cancel) and run_tests."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import agentloop_tools as tools
import pytest
from agentloop_tools.shell import parse_pytest_summary

from agentloop.sandbox.context import RunContext
from agentloop.types import ToolResult
from tests.conftest import jail_survivors, namespace_survivors, pid_namespace


@pytest.fixture
async def ctx(tmp_path: Path):
    """A run context over a fresh workspace with a 20 s tool timeout, closed after the test."""
    ws = tmp_path / "ws"
    ws.mkdir()
    c = RunContext(workspace=ws.resolve(), settings={"tool_timeout_s": 20, "output_cap": 4000})
    yield c
    await c.aclose()


async def call(ctx: RunContext, name: str, **args: Any) -> ToolResult:
    return await tools.registry()[name](ctx, args)


async def test_run_returns_output_and_exit_code(ctx: RunContext) -> None:
    """run runs bash in the workspace and returns stdout, stderr and the exit code."""
    r = await call(ctx, "run", command="pwd; echo oops >&2; exit 3")
    assert r.ok is False
    assert r.data["exit_code"] == 3
    assert f"--- stdout ---\n{ctx.workspace}\n--- stderr ---\noops" in r.output
    assert r.output.startswith("[exit code 3;")
    r = await call(ctx, "run", command="true")
    assert r.ok and "(no output)" in r.output and r.data["exit_code"] == 0


async def test_run_timeout_kills_group(ctx: RunContext, tmp_path: Path) -> None:
    """A command past its timeout is killed with its children, and the result says so."""
    started = time.monotonic()
    r = await call(ctx, "run", command="sleep 60 & echo $! > pid; sleep 60", timeout_s=0.5)
    elapsed = time.monotonic() - started
    assert r.ok is False and r.data["timed_out"] is True
    assert "timed out after 0.5 s" in r.output
    assert elapsed < 5
    pid = int((Path(ctx.workspace) / "pid").read_text())
    assert [] == await jail_survivors(ctx, [pid])


async def test_run_timeout_is_capped_by_settings(tmp_path: Path) -> None:
    """A requested timeout longer than the run's tool timeout is cut to (just under) it."""
    c = RunContext(workspace=tmp_path, settings={"tool_timeout_s": 1.0})
    try:
        started = time.monotonic()
        r = await tools.registry()["run"](c, {"command": "sleep 30", "timeout_s": 100})
        assert r.data["timed_out"] is True
        assert time.monotonic() - started < 5
    finally:
        await c.aclose()


async def test_cancelling_run_kills_the_group(ctx: RunContext) -> None:
    """Cancelling the awaiting task kills the process group before CancelledError propagates."""
    marker = Path(ctx.workspace) / "pids"
    task = asyncio.create_task(
        call(ctx, "run", command="sleep 60 & echo $! >> pids; echo $$ >> pids; wait")
    )
    for _ in range(200):
        if marker.exists() and len(marker.read_text().split()) == 2:
            break
        await asyncio.sleep(0.02)
    pids = [int(x) for x in marker.read_text().split()]
    assert pids == await jail_survivors(ctx, pids, within_s=0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [] == await jail_survivors(ctx, pids)


async def test_background_server_survives_until_run_end(tmp_path: Path) -> None:
    """A redirected background process outlives its command and is killed when the run ends."""
    c = RunContext(workspace=tmp_path, settings={"tool_timeout_s": 20})
    r = await tools.registry()["run"](c, {"command": "sleep 60 > /dev/null 2>&1 & echo $!"})
    pid = int(r.output.split("--- stdout ---\n")[1].split()[0])
    assert "still running" in r.output
    assert [pid] == await jail_survivors(c, [pid], within_s=0)
    ns = pid_namespace((await c.the_jail()).init_pid)
    await c.aclose()
    assert [] == await namespace_survivors(ns)


async def test_pipe_holding_background_is_killed(ctx: RunContext) -> None:
    """A background process still holding the output pipe is killed when the command ends."""
    started = time.monotonic()
    r = await call(ctx, "run", command="sleep 60 & echo $! > pid; echo started")
    assert time.monotonic() - started < 5
    assert r.ok and "started" in r.output and "were killed when the command ended" in r.output
    assert [] == await jail_survivors(ctx, [int((Path(ctx.workspace) / "pid").read_text())])


async def test_run_caps_huge_output(ctx: RunContext) -> None:
    """Tens of MB of output come back capped, head and tail kept, with the cut stated."""
    r = await call(
        ctx, "run", command="echo FIRST; head -c 30000000 /dev/zero | tr '\\0' x; echo; echo LAST"
    )
    assert r.ok
    assert len(r.output) <= 4000
    assert r.data["stdout_bytes"] == 30_000_000 + len("FIRST\n") + len("\nLAST\n")
    assert "FIRST" in r.output and "LAST" in r.output
    assert "bytes cut from the middle of stdout (30,000,012 bytes in all)" in r.output
    assert "output capped at 4,000 chars" in r.output


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "===== 3 passed, 1 failed, 2 errors in 0.52s =====",
            {"passed": 3, "failed": 1, "errors": 2, "skipped": 0},
        ),
        (
            "1 failed, 4 passed, 1 skipped, 2 warnings in 1.02s",
            {"passed": 4, "failed": 1, "errors": 0, "skipped": 1},
        ),
        ("======= 1 error in 0.10s =======", {"passed": 0, "failed": 0, "errors": 1, "skipped": 0}),
        (
            "============ no tests ran in 0.01s ============",
            {"passed": 0, "failed": 0, "errors": 0, "skipped": 0},
        ),
        ("all good", None),
    ],
)
def test_parse_pytest_summary(line: str, expected: dict[str, int] | None) -> None:
    """pytest's summary line (quiet or not) gives pass/fail/error counts."""
    assert parse_pytest_summary(f"noise\n{line}\n") == expected


TESTS = """\
def test_one():
    assert 1 + 1 == 2

def test_two():
    assert 2 * 2 == 5

def test_three():
    assert True
"""


@pytest.mark.slow
async def test_run_tests_counts_real_pytest(ctx: RunContext) -> None:
    """run_tests runs the task's pytest command and returns its pass/fail counts."""
    (Path(ctx.workspace) / "test_m.py").write_text(TESTS)
    ctx.settings = replace(
        ctx.settings, test_command=f"{sys.executable} -m pytest -q -p no:cacheprovider"
    )
    r = await call(ctx, "run_tests")
    assert r.ok is False
    assert r.data["passed"] == 2 and r.data["failed"] == 1 and r.data["errors"] == 0
    assert r.data["exit_code"] == 1
    assert r.output.startswith("[tests: 2 passed, 1 failed, 0 errors]")
    r = await call(ctx, "run_tests", selector="test_m.py::test_one")
    assert r.ok and (r.data["passed"], r.data["failed"]) == (1, 0)


async def test_run_tests_without_command(ctx: RunContext) -> None:
    """run_tests says so when the task has no test command."""
    r = await call(ctx, "run_tests")
    assert r.ok is False and "no test command" in r.output


async def test_run_tests_non_pytest(ctx: RunContext) -> None:
    """A test command that is not pytest still reports its exit code, with no counts."""
    ctx.settings = replace(ctx.settings, test_command="echo checking; exit 0")
    r = await call(ctx, "run_tests")
    assert r.ok and r.data["exit_code"] == 0 and r.data["passed"] is None
    assert "no pytest summary line" in r.output


def test_tool_settings_are_typed_with_one_set_of_defaults() -> None:
    """Settings come from a mapping of known names only; the output cap has one default."""
    from agentloop.errors import ConfigError
    from agentloop.sandbox.context import DEFAULT_OUTPUT_CAP, ToolSettings

    s = ToolSettings.of({"allow_hosts": "example.com", "tool_timeout_s": 5})
    assert (("example.com",), 5.0, DEFAULT_OUTPUT_CAP) == (
        s.allow_hosts,
        s.tool_timeout_s,
        s.output_cap,
    )
    with pytest.raises(ConfigError, match=r"unknown tool setting.*output_kap"):
        ToolSettings.of({"output_kap": 10})
