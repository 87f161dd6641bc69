"""MCP servers as a run's tools (issue 25): the real reference servers and the failure cases.

``tests/data/mcp-git.yaml`` runs ``mcp-server-git`` and ``mcp-server-time`` (from PyPI, stdio, in
the run's jail) under a scripted simulator run; ``tests/data/mcp_fault/fault_server.py`` answers
with an error, a malformed result, never, or by dying, and the run goes on each time.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import orjson
import pytest

from agentloop import run_task
from agentloop.cli import main
from agentloop.trace import attrs as A
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT, instant_tier

GIT_TASK = ROOT / "tests" / "data" / "mcp-git.yaml"
FAULT_WS = ROOT / "tests" / "data" / "mcp_fault"


def tool_spans(trace_path: str) -> dict[str, list]:
    trace = load_trace(trace_path)
    out: dict[str, list] = {}
    for s in trace.spans.values():
        if s.kind == "tool":
            out.setdefault(s.attrs[A.GEN_AI_TOOL_NAME], []).append(s)
    return out


async def test_git_and_time_servers_answer_in_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mcp-server-git sees the workspace's repository (status, log, diff) and mcp-server-time
    the clock; every call is a tool span naming its server, and the report counts them as
    tools."""
    result = await run_task(GIT_TASK, tier=instant_tier(), trace_dir=tmp_path)
    assert "ok" == result.status
    spans = tool_spans(result.trace_path)
    [status], [log], [diff], [now] = (
        spans[n] for n in ("git_status", "git_log", "git_diff_unstaged", "get_current_time")
    )
    assert all(s.attrs[A.OK] for s in (status, log, diff, now))
    assert "git" == status.attrs[A.MCP_SERVER] == diff.attrs[A.MCP_SERVER]
    assert "time" == now.attrs[A.MCP_SERVER]
    assert "modified:" in status.attrs[A.OUTPUT] and "calc.py" in status.attrs[A.OUTPUT]
    assert "first" in log.attrs[A.OUTPUT]
    assert "+    # an empty list sums to 0" in diff.attrs[A.OUTPUT]
    assert '"timezone": "UTC"' in now.attrs[A.OUTPUT]
    assert '"repo_path"' in status.attrs[A.ARGUMENTS]
    header = load_trace(result.trace_path).header
    servers = {s["name"]: s for s in header["mcp_servers"]}
    assert {"git", "time"} == set(servers)
    assert "git_status" in servers["git"]["tools"] and servers["git"]["error"] is None
    assert servers["time"]["setup_s"] > 0
    offered = {t["name"] for t in header["tools"]}
    assert {
        "git_status",
        "git_log",
        "git_diff_unstaged",
        "get_current_time",
        "convert_time",
    } <= offered
    assert "git_commit" not in offered  # mcp:git/TOOL names one tool only
    trace = load_trace(result.trace_path)
    parts = {s.name: s for s in trace.outside.values() if s.kind == "setup"}
    assert {"set-up", "model client", "mcp git", "mcp time"} <= set(parts)
    git, setup = parts["mcp git"], parts["set-up"]
    assert "ok" == git.status and "git_status" in git.attrs[A.MCP_TOOLS]
    assert "git" == git.attrs[A.MCP_SERVER] and git.parent == setup.id
    assert parts["model client"].t1 is not None and parts["model client"].t1 <= git.t0
    # the trace opened at the run's first moment: line 1 lists the tools known then (none of
    # the servers'), the setup span's end the tools as offered, which the reader puts back
    line1 = orjson.loads(Path(result.trace_path).read_bytes().splitlines()[0])
    assert "mcp_servers" not in line1 and "git_status" not in {t["name"] for t in line1["tools"]}
    assert [t["name"] for t in header["tools"]] == [t["name"] for t in setup.attrs["tools"]]
    assert 0 == await asyncio.to_thread(main, ["report", result.trace_path])
    text = capsys.readouterr().out
    assert "tool:git_status" in text and "tool:get_current_time" in text


def fault_task(
    tmp_path: Path, calls: list[str], *, servers: str = "", tools: str = "", timeout: float = 20
) -> Path:
    marker = uuid.uuid4().hex
    turns = "\n".join(
        f"  - text: calling {c}\n    tool_calls:\n      - {{name: {c}, arguments: {{text: hi}}}}"
        for c in calls
    )
    servers = servers or (
        f"  fault: {{command: python, args: [fault_server.py, --marker, {marker}]}}"
    )
    path = tmp_path / "fault.yaml"
    path.write_text(
        f"name: fault\nprompt: p\nworkspace: {FAULT_WS}\n"
        f"mcp_servers:\n{servers}\n"
        f"tools: [{tools or 'mcp:fault'}]\n"
        f"limits: {{max_steps: 10, timeout_s: 60, tool_timeout_s: {timeout}}}\n"
        f"script:\n{turns}\n  - text: done\n    tool_calls:\n"
        f"      - {{name: finish, arguments: {{summary: done}}}}\n"
    )
    return path


async def test_error_malformed_and_death_give_error_results(tmp_path: Path) -> None:
    """Each failure is an error result the model sees, with a clear record in the span; the
    run goes on to its end; after the server died, its tools say so."""
    task = fault_task(tmp_path, ["echo", "fail", "malformed", "echo", "die", "echo"])
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path)
    assert "ok" == result.status
    calls = [
        s
        for s in sorted(load_trace(result.trace_path).spans.values(), key=lambda s: s.t0)
        if s.kind == "tool" and s.attrs[A.GEN_AI_TOOL_NAME] != "finish"
    ]
    outs = [(s.attrs[A.GEN_AI_TOOL_NAME], s.attrs[A.OK], s.attrs[A.OUTPUT]) for s in calls]
    assert ("echo", True, "echo: hi") == outs[0]
    assert ("fail", False, "no such table: users") == outs[1]
    assert outs[2][1] is False and "MCP server 'fault' failed" in outs[2][2]
    assert ("echo", True, "echo: hi") == outs[3]  # a malformed answer does not end the server
    assert outs[4][1] is False and "exited (code 9)" in outs[4][2]
    assert "dying on request" in outs[4][2]  # its stderr, for the person reading
    assert outs[5][1] is False and "is not running" in outs[5][2]
    assert all("fault" == s.attrs[A.MCP_SERVER] for s in calls)
    assert {"tool", "protocol", "down"} == {
        s.attrs[A.DATA].get("error") for s in calls if not s.attrs[A.OK]
    }


async def test_a_hung_call_is_cut_at_the_tool_timeout(tmp_path: Path) -> None:
    """A server that never answers: the call ends just under the tool timeout with an error
    naming the server, and the run goes on."""
    result = await run_task(
        fault_task(tmp_path, ["hang"], timeout=2), tier=instant_tier(), trace_dir=tmp_path
    )
    assert "ok" == result.status
    [hang] = tool_spans(result.trace_path)["hang"]
    assert hang.attrs[A.OK] is False and "timeout" == hang.attrs[A.DATA]["error"]
    assert "MCP server 'fault' did not answer hang within 1.8 s" in hang.attrs[A.OUTPUT]


async def test_a_server_that_cannot_start_leaves_the_run_going(tmp_path: Path) -> None:
    """A missing program and a server that exits at start: the header records why, the named
    tool answers with the error, and the run ends ok."""
    servers = (
        "  gone: {command: no-such-mcp-server-here}\n"
        "  quits: {command: python, args: [fault_server.py, --exit-at-start]}"
    )
    task = fault_task(tmp_path, ["echo"], servers=servers, tools='"mcp:gone/echo", "mcp:quits"')
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path)
    assert "ok" == result.status
    trace = load_trace(result.trace_path)
    rec = {s["name"]: s for s in trace.header["mcp_servers"]}
    assert "exited (code 127)" in rec["gone"]["error"]
    assert "exited (code 3)" in rec["quits"]["error"] and "no database" in rec["quits"]["error"]
    [echo] = tool_spans(result.trace_path)["echo"]
    assert echo.attrs[A.OK] is False and "MCP server 'gone' is not running" in echo.attrs[A.OUTPUT]
    parts = {s.name: s for s in trace.outside.values()}  # each server's start, a timed part
    gone, quits = parts["mcp gone"], parts["mcp quits"]
    assert ("error", "error") == (gone.status, quits.status)
    assert rec["gone"]["error"] == gone.attrs[A.ERROR] and [] == gone.attrs[A.MCP_TOOLS]
    assert "no database" in quits.attrs[A.ERROR] and quits.t1 is not None


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


async def test_cancel_stops_the_server(tmp_path: Path) -> None:
    """A run cancelled while its server hangs in a call leaves no server process behind."""
    task = fault_task(tmp_path, ["hang"], timeout=60)
    marker = task.read_text().split("--marker, ")[1].split("]")[0]
    run = asyncio.create_task(run_task(task, tier=instant_tier(), trace_dir=tmp_path))
    async with asyncio.timeout(30):
        while not _processes_with(marker):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # inside the hanging call by now (the bound: the run's 60 s)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert [] == _processes_with(marker)


def test_name_clash_is_exit_2_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two servers offering one tool name, or a server's tool named like a listed built-in or
    a sub-agent: each error names both, as what they are."""
    two = (
        "  a: {command: python, args: [fault_server.py]}\n"
        "  b: {command: python, args: [fault_server.py]}"
    )
    task = fault_task(tmp_path, ["echo"], servers=two, tools='"mcp:a", "mcp:b"')
    assert 2 == main(["run", str(task), "--trace-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert "'echo' of MCP server 'b' and of MCP server 'a'" in err
    [path] = tmp_path.glob("*.jsonl")  # the clash is known once both listed their tools
    end = load_trace(path).end
    assert end is not None and "error" == end["status"]
    assert end["reason"].startswith("set-up failed: tool name clash: 'echo' of MCP server 'b'")
    path.unlink()
    builtin = "  a: {command: python, args: [fault_server.py, --also, read_file]}"
    task = fault_task(tmp_path, ["echo"], servers=builtin, tools='read_file, "mcp:a"')
    assert 2 == main(["run", str(task), "--trace-dir", str(tmp_path)])
    assert (
        "'read_file' of MCP server 'a' and the built-in tool 'read_file'" in capsys.readouterr().err
    )
    agent = fault_task(tmp_path, [], servers=builtin, tools='"mcp:a", echo')
    agent.write_text(
        agent.read_text()
        + "agents:\n  - {name: echo, description: d, system: s, prompt: '{input}'}\n"
    )
    assert 2 == main(["run", str(agent), "--trace-dir", str(tmp_path)])
    assert "'echo' of MCP server 'a' and the sub-agent 'echo'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("servers", "tools", "says"),
    [
        (
            "  a: {command: x}",
            '"mcp:b"',
            "'mcp:b' names MCP server 'b', which mcp_servers does not define",
        ),
        ("  a: {command: x, env: [API_TOKEN]}", '"mcp:a"', "API_TOKEN looks like a secret"),
        ("  a: {command: x, url: 'http://h/mcp'}", '"mcp:a"', "either command"),
        ("  a: {command: x, cwd: ../up}", '"mcp:a"', "inside the workspace"),
    ],
)
def test_bad_mcp_entries_are_exit_2_with_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], servers: str, tools: str, says: str
) -> None:
    task = fault_task(tmp_path, ["echo"], servers=servers, tools=tools)
    assert 2 == main(["run", str(task), "--trace-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert says in err and "fault.yaml" in err and "line" in err


async def test_a_streamable_http_server_with_headers_from_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A url: server (the SDK's own MCPServer over streamable HTTP, served here) is called with
    the header its variable fills in; the token never reaches the trace."""
    import socket

    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("tickets")

    @server.tool()
    def count_open(queue: str) -> str:
        """How many tickets are open in a queue."""
        return f"3 open in {queue}"

    inner = server.streamable_http_app()
    seen: list[bytes | None] = []

    async def app(scope, receive, send):  # records the Authorization header of each request
        if scope["type"] == "http":
            seen.append(dict(scope["headers"]).get(b"authorization"))
        await inner(scope, receive, send)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(http.serve())
    try:
        async with asyncio.timeout(20):
            while not http.started:
                await asyncio.sleep(0.02)
        token = "tok-" + uuid.uuid4().hex
        monkeypatch.setenv("MCP_TEST_TOKEN", token)
        servers = (
            f"  tickets: {{url: 'http://127.0.0.1:{port}/mcp', "
            "headers: {Authorization: 'Bearer ${MCP_TEST_TOKEN}'}}"
        )
        task = tmp_path / "http.yaml"
        task.write_text(
            f"name: http\nprompt: p\nworkspace: {FAULT_WS}\nmcp_servers:\n{servers}\n"
            'tools: ["mcp:tickets"]\nscript:\n  - tool_calls:\n'
            "      - {name: count_open, arguments: {queue: ops}}\n"
            "  - tool_calls:\n      - {name: finish, arguments: {summary: done}}\n"
        )
        result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path)
    finally:
        http.should_exit = True
        await serving
    assert "ok" == result.status
    [call] = tool_spans(result.trace_path)["count_open"]
    assert call.attrs[A.OK] and "3 open in ops" == call.attrs[A.OUTPUT]
    assert "tickets" == call.attrs[A.MCP_SERVER]
    assert seen and all(f"Bearer {token}".encode() == h for h in seen)
    assert token not in Path(result.trace_path).read_text()


async def test_git_server_writes_a_commit_in_the_workspace(tmp_path: Path) -> None:
    """mcp-server-git also writes: git_add and git_commit from inside the jail make a commit in
    the run's repository, which the task's success check reads back."""
    task = tmp_path / "commit.yaml"
    repo = '{repo_path: "{workspace}"'
    task.write_text(
        f"name: commit\nprompt: p\nworkspace: {GIT_TASK.parent / 'mcp_git'}\n"
        "setup:\n  - git init -q -b main . && git add -A && "
        "git -c user.name=t -c user.email=t@t commit -qm first && echo x >> calc.py\n"
        "  - git config user.name agent && git config user.email agent@example.com\n"
        "mcp_servers:\n  git: {command: mcp-server-git}\n"
        'tools: ["mcp:git/git_add", "mcp:git/git_commit"]\n'
        "success:\n  command: test \"$(git log -1 --format=%s)\" = 'fix calc'\n"
        "script:\n  - tool_calls:\n"
        f"      - {{name: git_add, arguments: {repo}, files: [calc.py]}}}}\n"
        "  - tool_calls:\n"
        f"      - {{name: git_commit, arguments: {repo}, message: fix calc}}}}\n"
        "  - tool_calls:\n      - {name: finish, arguments: {summary: done}}\n"
    )
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path)
    assert "ok" == result.status and result.success is True, result.success_detail
    [commit] = tool_spans(result.trace_path)["git_commit"]
    assert commit.attrs[A.OK] and "Changes committed" in commit.attrs[A.OUTPUT]


async def test_a_sub_agent_uses_the_runs_mcp_server(tmp_path: Path) -> None:
    """A sub-agent's tools: take mcp: entries: the historian reads the log through the run's git
    server (one server per run, shared), its call a tool span of the historian's sub-run naming
    the server; the main agent, which lists no git tool, is not offered one."""
    task = tmp_path / "historian.yaml"
    repo = '{repo_path: "{workspace}", max_count: 3}'
    task.write_text(
        f"""name: historian-run
prompt: What was the last commit?
workspace: {GIT_TASK.parent / "mcp_git"}
setup:
  - git init -q -b main . && git add -A && git -c user.name=t -c user.email=t@t commit -qm first
mcp_servers:
  git: {{command: mcp-server-git}}
tools: [historian]
agents:
  - name: historian
    description: Reads the repository's history.
    system: You read git history.
    prompt: "{{input}}"
    tools: ["mcp:git/git_log"]
    script:
      - tool_calls:
          - {{name: git_log, arguments: {repo}}}
      - text: The last commit is 'first'.
script:
  - tool_calls:
      - {{name: historian, arguments: {{input: the last commit}}}}
  - tool_calls:
      - {{name: finish, arguments: {{summary: "first"}}}}
"""
    )
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path)
    assert "ok" == result.status
    trace = load_trace(result.trace_path)
    [log] = tool_spans(result.trace_path)["git_log"]
    assert log.attrs[A.OK] and "first" in log.attrs[A.OUTPUT]
    assert ("historian", "git") == (log.start_attrs[A.GEN_AI_AGENT_NAME], log.attrs[A.MCP_SERVER])
    [historian] = tool_spans(result.trace_path)["historian"]
    assert "The last commit is 'first'." == historian.attrs[A.OUTPUT]
    assert "git_log" not in {t["name"] for t in trace.header["tools"]}
    [server] = trace.header["mcp_servers"]  # started once, for the run
    assert ("git", None) == (server["name"], server["error"])


def test_a_sub_agents_mcp_entry_names_a_defined_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sub-agent's mcp: entry naming no server of mcp_servers is exit 2 with its line."""
    task = tmp_path / "bad.yaml"
    task.write_text(
        "name: bad\nprompt: p\nmcp_servers:\n  git: {command: mcp-server-git}\n"
        "tools: [helper]\nagents:\n  - name: helper\n    description: d\n"
        "    system: s\n    prompt: p\n    tools: ['mcp:gti']\n"
    )
    assert 2 == main(["run", str(task), "--trace-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert "'mcp:gti' names MCP server 'gti'" in err and "line 11" in err


@pytest.mark.slow
async def test_sqlite_server_from_the_task_venv_writes_a_table(tmp_path: Path) -> None:
    """mcp-server-sqlite (the reference server that writes a database) is built on the SDK's v1
    server API and exits at start beside mcp 2; the task installs it in its own venv with the
    mcp 1 it needs (requirements:), so the server is its own program, and agentloop's mcp 2
    client drives it: a table created and a row written in the workspace, read back by the
    task's success check."""
    row = "('payments', '2026-12-02T09:12Z')"
    task = tmp_path / "sqlite.yaml"
    task.write_text(
        f"""name: sqlite
prompt: p
workspace: {GIT_TASK.parent / "mcp_git"}
requirements: [mcp-server-sqlite==2025.4.25, "mcp<2"]
mcp_servers:
  db: {{command: mcp-server-sqlite, args: [--db-path, incidents.db]}}
tools: ["mcp:db"]
success:
  command: >-
    python -c "import sqlite3, sys; sys.exit(sqlite3.connect('incidents.db')
    .execute('SELECT service, opened FROM pages').fetchall() != [{row}])"
script:
  - tool_calls:
      - name: create_table
        arguments: {{query: "CREATE TABLE pages (id INTEGER PRIMARY KEY, service TEXT, opened TEXT)"}}
  - tool_calls:
      - {{name: write_query, arguments: {{query: "INSERT INTO pages (service, opened) VALUES {row}"}}}}
  - tool_calls:
      - {{name: read_query, arguments: {{query: "SELECT service, opened FROM pages"}}}}
  - tool_calls:
      - {{name: finish, arguments: {{summary: done}}}}
"""
    )
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path)
    assert "ok" == result.status and result.success is True, result.success_detail
    spans = tool_spans(result.trace_path)
    [write], [read] = spans["write_query"], spans["read_query"]
    assert write.attrs[A.OK] and "'affected_rows': 1" in write.attrs[A.OUTPUT]
    assert "'service': 'payments'" in read.attrs[A.OUTPUT]
    assert {"db"} == {
        s.attrs[A.MCP_SERVER] for v in spans.values() for s in v if A.MCP_SERVER in s.attrs
    }


@pytest.mark.slow
async def test_sigkill_of_agentloop_leaves_no_server(tmp_path: Path) -> None:
    """agentloop killed outright (SIGKILL, no clean-up runs) while its server hangs in a call:
    the jail dies with its parent (bwrap's --die-with-parent), and the server with it."""
    import signal
    import sys

    task = fault_task(tmp_path, ["hang"], timeout=60)
    marker = task.read_text().split("--marker, ")[1].split("]")[0]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentloop",
        "run",
        str(task),
        "--trace-dir",
        str(tmp_path),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(60):
            while not _processes_with(marker):
                await asyncio.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    async with asyncio.timeout(10):  # the kernel tears the namespace down as bwrap dies
        while _processes_with(marker):
            await asyncio.sleep(0.05)
    assert [] == _processes_with(marker)
