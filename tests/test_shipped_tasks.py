"""Every shipped task file loads, runs offline on the simulator, and passes its own success check."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop import run_task
from agentloop.api import open_task
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT

SHIPPED = sorted([*ROOT.glob("tasks/incident/*.yaml"), *ROOT.glob("tasks/*/task.yaml")])


def test_there_are_incident_playbooks() -> None:
    """At least two incident-response playbooks ship with agentloop."""
    assert len([p for p in SHIPPED if p.parent.name == "incident"]) >= 2


@pytest.mark.parametrize("path", SHIPPED, ids=[p.relative_to(ROOT).as_posix() for p in SHIPPED])
async def test_shipped_task_succeeds_offline(path: Path, tmp_path: Path) -> None:
    """The task's script runs to 'finish' on sim-ultrafast and its success check passes."""
    task = open_task(path)
    assert task.script, "a shipped task carries a script so it runs offline"
    result = await run_task(task, tier="sim-ultrafast", trace_dir=tmp_path)
    assert ("ok", True) == (result.status, result.success), result.success_detail
    trace = load_trace(result.trace_path or "")
    used = {t.attrs["gen_ai.tool.name"] for t in trace.of_kind("tool")}
    assert used <= set(task.tools) | {"finish"}
    assert all(t.attrs["ok"] or t.attrs["gen_ai.tool.name"] in ("run", "run_tests")
               for t in trace.of_kind("tool")), "only checks may fail (before the fix)"


def test_webfix_uses_read_edit_tests_and_browser(tmp_path: Path) -> None:
    """The webfix task exercises read, edit, run_tests and the browser in one run."""
    task = open_task(ROOT / "tasks" / "webfix" / "task.yaml")
    scripted = {c.name for turn in task.script for c in turn.tool_calls}
    assert {"read_file", "edit_file", "run_tests", "browser_open"} <= scripted
