"""Shared fixtures: small real tools for runner tests, and a trace built from memory records."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agentloop.sandbox.context import RunContext
from agentloop.testing import trace_of
from agentloop.trace.reader import Trace
from agentloop.types import ToolResult, ToolSpec

ROOT = Path(__file__).resolve().parent.parent


class SleepTool:
    """A real tool that sleeps for ``seconds`` (its argument) and reports when it ran."""

    spec = ToolSpec(
        "sleep",
        "Sleep for some seconds.",
        {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]},
    )

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        t0 = time.perf_counter()
        await asyncio.sleep(float(arguments["seconds"]))
        self.intervals.append((t0, time.perf_counter()))
        return ToolResult(ok=True, output=f"slept {arguments['seconds']}")


class ShellSleepTool:
    """A real tool that runs ``sleep N`` as a subprocess and records its pid."""

    spec = ToolSpec(
        "shell_sleep",
        "Run sleep in a subprocess.",
        {"type": "object", "properties": {"seconds": {"type": "number"}}},
    )

    def __init__(self) -> None:
        self.pids: list[int] = []

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        proc = await asyncio.create_subprocess_exec(
            "sleep", str(arguments.get("seconds", 30)), start_new_session=True
        )
        self.pids.append(proc.pid)
        try:
            await proc.wait()
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise
        return ToolResult(ok=True, output="done")


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


async def wait_dead(pids: list[int], within_s: float = 5.0) -> list[int]:
    """The pids still alive after waiting up to ``within_s`` (the kernel delivers SIGKILL async)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        await asyncio.sleep(0.05)
    return [p for p in pids if alive(p)]


async def terminate(
    proc: asyncio.subprocess.Process, within_s: float = 30.0
) -> tuple[bytes, bytes]:
    """Stop a child with SIGTERM and reap it: its remaining (stdout, stderr).

    SIGTERM, not SIGINT: a suite started in the background by a shell hands its children SIGINT
    ignored, so a SIGINT would be lost. A child still running after ``within_s`` (a bound about
    hangs) is killed and reaped, and TimeoutError raised: for use in ``finally``."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.communicate(), within_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise


def reap(proc: subprocess.Popen[Any], within_s: float = 30.0) -> int:
    """:func:`terminate` for a ``subprocess.Popen`` child, in ``finally``: its exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(within_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return proc.returncode


def records_to_trace(records: list[dict[str, Any]]) -> Trace:
    """A MemorySink's records as a trace (the public helper's one implementation)."""
    return trace_of(records)


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return RunContext(workspace=tmp_path)


async def jail_survivors(ctx: RunContext, pids: list[int], within_s: float = 5.0) -> list[int]:
    """Of ``pids`` (as seen inside the run's jail), those still alive there after ``within_s``."""
    import agentloop_tools as tools

    check = "for p in " + " ".join(map(str, pids)) + "; do kill -0 $p 2>/dev/null && echo $p; done"
    deadline = time.monotonic() + within_s
    while True:
        r = await tools.registry()["run"](ctx, {"command": check + "; true"})
        left = [int(x) for x in r.output.split("--- stdout ---\n")[-1].split() if x.isdigit()]
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.1)


def pid_namespace(pid: int) -> str:
    """The PID namespace of a host process (``pid:[4026532...]``)."""
    return os.readlink(f"/proc/{pid}/ns/pid")


async def namespace_survivors(ns: str, within_s: float = 5.0) -> list[int]:
    """Host pids still in PID namespace ``ns`` after waiting up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.readlink(f"/proc/{name}/ns/pid") == ns and alive(int(name)):
                        left.append(int(name))
                except OSError:
                    pass
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.05)


def html_response(body: bytes) -> bytes:
    """A whole HTTP/1.1 200 answer carrying ``body`` as HTML, for the tests' raw page servers."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )
