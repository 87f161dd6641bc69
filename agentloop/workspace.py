"""A run's working directory: a fresh copy of the task's workspace, its setup, its success check."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from agentloop.context import scrubbed_env
from agentloop.errors import TaskFileError
from agentloop.tasks import Task


async def run_command(cmd: str, cwd: Path, env: dict[str, str],
                      timeout_s: float) -> tuple[int, str]:
    """Run ``bash -c cmd`` in its own process group; kill the group on timeout or cancellation.

    Output goes to a temporary file, not a pipe, so a background process the command leaves
    behind (a server started by a setup step) cannot hold the call open after bash exits.
    Returns (exit code, combined output); exit code 124 on timeout, as coreutils' timeout does.
    """
    with tempfile.TemporaryFile() as out:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", cmd, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        try:
            async with asyncio.timeout(timeout_s):
                code = await proc.wait()
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(proc.pid)
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return 124, f"timed out after {timeout_s:g} s"
        out.seek(0)
        return code, out.read().decode("utf-8", "replace")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


async def prepare(task: Task, root: Path | None = None) -> Path:
    """Copy the task's workspace into a new temporary folder and run its setup commands there."""
    made = await asyncio.to_thread(tempfile.mkdtemp, prefix=f"agentloop-{task.name}-", dir=root)
    work = Path(await asyncio.to_thread(os.path.realpath, made))
    if task.workspace is not None:
        await asyncio.to_thread(shutil.copytree, task.workspace, work, symlinks=True,
                                dirs_exist_ok=True)
    env = scrubbed_env()
    for i, cmd in enumerate(task.setup):
        try:
            code, out = await run_command(cmd, work, env, task.limits.tool_timeout_s)
        except BaseException:
            await asyncio.to_thread(remove, work)
            raise
        if code != 0:
            await asyncio.to_thread(remove, work)
            tail = out.strip().splitlines()[-5:]
            raise TaskFileError(task.source or task.name,
                                f"setup command failed with exit code {code}: {cmd!r}"
                                + (f"; last output: {' | '.join(tail)}" if tail else ""),
                                field=f"setup[{i}]")
    return work


async def check_success(task: Task, work: Path, final_text: str) -> dict[str, Any]:
    """The task's success check: its command must exit 0 and/or its text must be in the answer."""
    result: dict[str, Any] = {"passed": True, "detail": ""}
    details = []
    if task.success_command:
        code, out = await run_command(task.success_command, work, scrubbed_env(),
                                      task.limits.tool_timeout_s)
        result.update(command=task.success_command, exit_code=code, output=out[-2000:])
        if code != 0:
            result["passed"] = False
        details.append(f"`{task.success_command}` exited {code}")
    if task.success_text is not None:
        found = task.success_text in final_text
        result["expect_text"] = task.success_text
        result["passed"] = result["passed"] and found
        details.append(f"expected text {'found' if found else 'not found'} in the final answer")
    if not details:
        return {"passed": None, "detail": "no success check"}
    result["detail"] = "; ".join(details)
    return result


def remove(work: Path) -> None:
    """Delete a run's working copy (blocking; call through ``asyncio.to_thread``)."""
    shutil.rmtree(work, ignore_errors=True)
