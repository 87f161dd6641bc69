"""The webfix task: its file validates, and its script, played through the real tools, succeeds."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import agentloop_tools as tools
import orjson
import pytest

from agentloop.config.tasks import load_task
from agentloop.sandbox.context import RunContext

TASK = Path(__file__).resolve().parents[1] / "tasks" / "webfix" / "task.yaml"


def test_task_file_validates() -> None:
    """The task loads against the tool registry and its script uses files, tests and browser."""
    task = load_task(TASK, set(tools.registry()))
    used = {c.name for turn in task.script for c in turn.tool_calls}
    assert {"read_file", "edit_file", "run_tests", "browser_open", "browser_text"} <= used
    assert used - {"finish"} <= set(task.tools)
    assert task.workspace is not None and (task.workspace / "status.html").is_file()


@pytest.mark.external
async def test_script_played_through_the_tools_succeeds(tmp_path: Path) -> None:
    """Played turn by turn (a turn's calls concurrently, as the runner does), the script works."""
    task = load_task(TASK, set(tools.registry()))
    assert task.workspace is not None
    work = tmp_path / "run"
    await asyncio.to_thread(shutil.copytree, task.workspace, work)
    registry = tools.registry()
    ctx = RunContext(
        workspace=work.resolve(),
        settings={
            "test_command": task.test_command,
            "allow_hosts": list(task.allow_hosts),
            "tool_timeout_s": task.limits.tool_timeout_s,
            "output_cap": 16_000,
        },
    )
    results = []
    summary = ""
    try:
        for turn in task.script:
            calls = [
                (c.name, orjson.loads(c.arguments.replace("{workspace}", str(work.resolve()))))
                for c in turn.tool_calls
            ]
            summary = next((a["summary"] for name, a in calls if name == "finish"), summary)
            calls = [(name, a) for name, a in calls if name != "finish"]
            outs = await asyncio.gather(*(registry[name](ctx, a) for name, a in calls))
            results.extend(zip([name for name, _ in calls], outs, strict=True))
    finally:
        await ctx.aclose()
    tests = [r for name, r in results if name == "run_tests"]
    assert [(r.data["passed"], r.data["failed"]) for r in tests] == [(2, 2), (4, 0)]
    failures = [(name, r.output) for name, r in results if not r.ok and name != "run_tests"]
    assert failures == []
    texts = [r.output for name, r in results if name == "browser_text"]
    assert texts[0].startswith("All systems operational")
    assert results[-1][1].output.startswith("'Degraded: cache is down' is visible")
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", task.success_command or "false"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert task.success_text is not None and task.success_text in summary
