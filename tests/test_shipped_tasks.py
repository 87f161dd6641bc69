"""Every shipped task file loads, runs offline on the simulator, and passes its own success check.

The incident playbooks also leave nothing running, and their tools really saw the incident
before the fix (a live service answering 500, an expired certificate served, a spinning worker).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agentloop import run_task
from agentloop.api import open_task
from agentloop.script import ScriptTurn
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT, instant_tier

SHIPPED = sorted([*ROOT.glob("tasks/incident/*.yaml"), *ROOT.glob("tasks/*/task.yaml")])
PLAYBOOKS = [p for p in SHIPPED if p.parent.name == "incident"]

# What a playbook's tool saw before its fix: proof that the incident was really there.
BROKEN_BEFORE = {
    "checkout-timeouts": ("run_tests", "1 failed"),
    "disk-full": ("run", "OVER BUDGET"),
    "bad-deploy": ("run", "500 GET /orders/1001"),  # the service setup started, on loopback
    "tls-expired": ("run", "Verify return code: 10 (certificate has expired)"),
    "runaway-worker": ("run", "-m worker.main"),  # ps shows the worker setup started
    "slow-query": ("run", "plan: SCAN orders"),
    "intrusion": ("run", "backup@build-7"),
    "status-page": ("browser_text", "search: Operational"),  # the lie, as rendered by Chromium
    "fleet-triage": ("run", "FLEET DEGRADED"),  # the fleet check, before the pool is fixed
    "bad-config": ("git_show", "+acquirer_timeout_ms = 300"),  # mcp-server-git shows the push
}

# The indicators the intrusion playbook plants; its final answer must name every one.
PLANTED_IOCS = [
    "203.0.113.77",
    "198.51.100.23",
    "/var/tmp/.cache/kworkerd",
    "0db5dc5d343b333c672874b77ed2ad9eab1e4864efdb58c2697552539dbbea9a",
    "/etc/cron.d/.sysupdate",
    "/etc/systemd/system/dbus-helper.service",
    "SHA256:tyD5HoDUdthX4SMXrVqLI+5MBfE0iPp6aCl3OUKjNU8",
]


def processes_in(folder: Path) -> list[str]:
    """Live processes (zombies aside) working in ``folder`` or naming it on their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if state != "Z" and (
            cwd == str(folder) or cwd.startswith(f"{folder}/") or str(folder) in cmd
        ):
            found.append(f"pid {entry.name}: {cmd.strip()}")
    return found


def test_there_are_incident_playbooks() -> None:
    """At least six incident-response playbooks ship with agentloop, each with a runbook."""
    assert len(PLAYBOOKS) >= 6
    assert [] == [p.stem for p in PLAYBOOKS if not (p.with_suffix("") / "RUNBOOK.md").is_file()]


def test_playbooks_cover_a_background_service_the_browser_git_and_mcp() -> None:
    """One playbook's setup starts a background service, one uses the browser, one git, one
    an MCP server's tools (which it installs in its own venv, so a wheel install runs it)."""
    tasks = [open_task(p) for p in PLAYBOOKS]

    def scripts_started_by_setup(task):  # the shell scripts a setup command runs
        return [
            (task.workspace / word).read_text()
            for cmd in task.setup
            for word in cmd.split()
            if word.endswith(".sh")
        ]

    calls = [[c for turn in t.script for c in turn.tool_calls] for t in tasks]
    assert any(" &\n" in script for t in tasks for script in scripts_started_by_setup(t))
    assert any(c.name == "browser_open" for cs in calls for c in cs)
    assert any(c.name == "run" and "git revert" in c.arguments for cs in calls for c in cs)
    with_mcp = [t for t in tasks if t.mcp_servers]
    assert any(
        any(s.command and s.command in " ".join(t.requirements) for s in t.mcp_servers)
        for t in with_mcp
    )
    assert set(BROKEN_BEFORE) == {t.name for t in tasks}


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED, ids=[p.relative_to(ROOT).as_posix() for p in SHIPPED])
async def test_shipped_task_succeeds_offline(path: Path, tmp_path: Path) -> None:
    """The script runs to 'finish' on the simulator, the check passes, the incident was real,
    and nothing the run started survives it. On sim-instant (tests/conftest.py): the scripts'
    speed is not what this proves, and at sim-ultrafast's a playbook waits ~3 s on its model."""
    task = open_task(path)
    assert task.script, "a shipped task carries a script so it runs offline"
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path, keep_workspace=True)
    work = Path(result.workspace or "")
    try:
        left = processes_in(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    trace = load_trace(result.trace_path or "")
    check = (trace.end or {}).get("success") or {}
    assert ("ok", True) == (result.status, result.success), (
        f"{result.success_detail}\n{check.get('output', '')}"
    )
    assert [] == left, "a process the run started outlived it"
    tools = trace.of_kind("tool")
    used = {t.attrs["gen_ai.tool.name"] for t in tools}
    assert used <= {t["name"] for t in trace.header["tools"]}  # mcp: entries as their tools
    servers = {s["name"]: s for s in trace.header.get("mcp_servers", [])}
    assert [] == [s["error"] for s in servers.values() if s["error"]]
    assert {s.name for s in task.mcp_servers} == {
        t.attrs["mcp.server"] for t in tools if "mcp.server" in t.attrs
    }, "every MCP server the playbook names is used in its run"
    assert all(
        t.attrs["ok"] or t.attrs["gen_ai.tool.name"] in ("run", "run_tests") for t in tools
    ), "only checks may fail (before the fix)"
    if task.name in BROKEN_BEFORE:
        tool, seen = BROKEN_BEFORE[task.name]
        assert any(
            seen in t.attrs["output"] for t in tools if t.attrs["gen_ai.tool.name"] == tool
        ), f"{tool} never saw {seen!r}"
    if task.name == "intrusion":  # its answer names every indicator of compromise it planted
        assert [] == [ioc for ioc in PLANTED_IOCS if ioc not in result.final_text]


@pytest.mark.slow
@pytest.mark.parametrize("path", PLAYBOOKS, ids=[p.stem for p in PLAYBOOKS])
async def test_playbook_check_fails_while_the_incident_lasts(path: Path, tmp_path: Path) -> None:
    """A model that finishes at once with the right words fails the check: the fix is verified."""
    task = open_task(path)
    give_up = ScriptTurn.from_dict(
        {
            "tool_calls": [
                {"name": "finish", "arguments": {"summary": f"{task.success_text}: nothing to do."}}
            ]
        }
    )
    result = await run_task(
        task, tier=instant_tier(), trace_dir=tmp_path, script=[give_up], keep_workspace=True
    )
    work = Path(result.workspace or "")
    try:
        left = processes_in(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert ("ok", False) == (result.status, result.success), result.success_detail
    assert [] == left, "a process setup started outlived the run"


def test_webfix_uses_read_edit_tests_and_browser(tmp_path: Path) -> None:
    """The webfix task exercises read, edit, run_tests and the browser in one run."""
    task = open_task(ROOT / "tasks" / "webfix" / "task.yaml")
    scripted = {c.name for turn in task.script for c in turn.tool_calls}
    assert {"read_file", "edit_file", "run_tests", "browser_open"} <= scripted
