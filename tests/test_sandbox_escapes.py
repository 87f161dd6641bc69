"""The escape battery: every way out of the sandbox we could think of, each refused (zero escapes)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import agentloop_tools as tools
import orjson
import pytest
from agentloop_tools.browser import session

from agentloop import run_task
from agentloop.clients.scripted import ScriptedClient
from agentloop.config.tasks import Limits, Task
from agentloop.sandbox import workspace
from agentloop.sandbox.context import RunContext, scrubbed_env
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.trace.reader import load_trace
from agentloop.types import ToolResult
from tests.conftest import html_response, jail_survivors, namespace_survivors, pid_namespace, reap

SECRET = "TOP-SECRET-CONTENT-7f3a"


@pytest.fixture
async def ctx(tmp_path: Path):
    """A workspace inside tmp_path with symlinks pointing in and out; 'outside' holds a secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (tmp_path / "outside.txt").write_text(SECRET + "\n")
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "inside.txt").write_text("inside\n")
    (ws / "link_in").symlink_to(ws / "inside.txt")
    (ws / "link_out").symlink_to(tmp_path / "outside.txt")
    (ws / "rel_out").symlink_to("../outside.txt")
    (ws / "dir_out").symlink_to(outside)
    (ws / "dangling_out").symlink_to(tmp_path / "not-yet.txt")
    (ws / "chain").symlink_to("link_out")
    (ws / "sub" / "deep_out").symlink_to("../../outside")
    c = RunContext(
        workspace=ws.resolve(),
        settings={
            "tool_timeout_s": 20,
            "output_cap": 3000,
            "browser_args": ["--host-resolver-rules=MAP evil.test 127.0.0.1"],
        },
    )
    yield c
    await c.aclose()


async def call(ctx: RunContext, name: str, **args: Any) -> ToolResult:
    return await tools.registry()[name](ctx, args)


def untouched(root: Path) -> None:
    """Nothing outside the workspace changed: same files, same secret."""
    assert sorted(p.name for p in root.iterdir()) == ["outside", "outside.txt", "ws"]
    assert (root / "outside.txt").read_text() == SECRET + "\n"
    assert sorted(p.name for p in (root / "outside").iterdir()) == ["secret.txt"]
    assert (root / "outside" / "secret.txt").read_text() == SECRET + "\n"


PATH_ESCAPES: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "../outside.txt"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("read_file", {"path": "{root}/outside.txt"}),
    ("read_file", {"path": "sub/../../outside.txt"}),
    ("read_file", {"path": "link_out"}),
    ("read_file", {"path": "rel_out"}),
    ("read_file", {"path": "chain"}),
    ("read_file", {"path": "dir_out/secret.txt"}),
    ("read_file", {"path": "sub/deep_out/secret.txt"}),
    ("read_file", {"path": "~/.bashrc"}),
    ("read_file", {"path": "inside.txt\x00../outside.txt"}),
    ("write_file", {"path": "../pwned.txt", "content": "x"}),
    ("write_file", {"path": "dir_out/pwned.txt", "content": "x"}),
    ("write_file", {"path": "dangling_out", "content": "x"}),
    ("write_file", {"path": "link_out", "content": "x"}),
    ("edit_file", {"path": "link_out", "old_text": SECRET, "new_text": "gone"}),
    ("edit_file", {"path": "dir_out/secret.txt", "old_text": SECRET, "new_text": "gone"}),
    ("list_files", {"path": ".."}),
    ("list_files", {"path": "dir_out"}),
    ("search", {"pattern": "SECRET", "path": ".."}),
    ("search", {"pattern": "SECRET", "path": "dir_out"}),
    ("apply_patch", {"patch": "--- /dev/null\n+++ b/../pwned.txt\n@@ -0,0 +1 @@\n+x\n"}),
    ("apply_patch", {"patch": f"--- a/link_out\n+++ b/link_out\n@@ -1 +1 @@\n-{SECRET}\n+gone\n"}),
    (
        "apply_patch",
        {"patch": "--- a/inside.txt\n+++ b/dir_out/moved.txt\n@@ -1 +1 @@\n-inside\n+moved\n"},
    ),
    ("browser_screenshot", {"path": "../shot.png"}),
    ("browser_open", {"url": "file:///etc/passwd"}),
    ("browser_open", {"url": "file://{root}/outside.txt"}),
    ("browser_open", {"url": "file://{root}/ws/link_out"}),
    ("browser_open", {"url": "http://example.com/"}),
    ("browser_open", {"url": "https://evil.test/"}),
    ("browser_open", {"url": "ftp://127.0.0.1/"}),
    ("browser_open", {"url": "chrome://version"}),
]


@pytest.mark.parametrize(
    ("tool", "args"),
    PATH_ESCAPES,
    ids=[f"{t}:{next(iter(a.values()))[:40]!r}" for t, a in PATH_ESCAPES],
)
async def test_escape_is_refused(ctx: RunContext, tool: str, args: dict[str, Any]) -> None:
    """A path or URL leading out of the workspace is refused and nothing outside changes."""
    root = Path(ctx.workspace).parent
    args = {k: v.replace("{root}", str(root)) if isinstance(v, str) else v for k, v in args.items()}
    r = await call(ctx, tool, **args)
    assert r.ok is False, r.output
    assert SECRET not in r.output
    assert (
        "outside the workspace" in r.output
        or "not an allowed host" in r.output
        or "scheme is not allowed" in r.output
        or "NUL byte" in r.output
    ), r.output
    untouched(root)
    assert not (root / "pwned.txt").exists() and not (root / "not-yet.txt").exists()


async def test_symlink_inside_is_allowed(ctx: RunContext) -> None:
    """A symlink whose target stays inside the workspace works (the rule is not over-broad)."""
    r = await call(ctx, "read_file", path="link_in")
    assert r.ok and "inside" in r.output


async def test_workspace_search_skips_symlinks_out(ctx: RunContext) -> None:
    """Searching the whole workspace never reads a file through a symlink leading out."""
    r = await call(ctx, "search", pattern="SECRET|inside")
    assert r.ok
    assert SECRET not in r.output
    assert r.output.splitlines() == ["inside.txt:1: inside", "link_in:1: inside"]


async def test_listing_shows_but_does_not_follow_links_out(ctx: RunContext) -> None:
    """A recursive listing names links out of the workspace without listing what is behind them."""
    r = await call(ctx, "list_files", recursive=True)
    assert "secret.txt" not in r.output
    assert "dir_out -> " in r.output


@pytest.mark.parametrize(
    "name", ["OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"]
)
async def test_secrets_in_parent_env_do_not_leak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A secret in the parent's environment is absent from what `env` prints inside run."""
    value = "sk-leak-" + name.lower() + "-0123456789abcdef"
    monkeypatch.setenv(name, value)
    c = RunContext(workspace=tmp_path)
    try:
        r = await tools.registry()["run"](c, {"command": "env"})
    finally:
        await c.aclose()
    assert r.ok and "PATH=" in r.output
    assert name not in r.output and value not in r.output


async def test_secrets_in_context_env_are_dropped(tmp_path: Path) -> None:
    """Even a context env that carries secret-named keys gives the subprocess none of them."""
    env = {
        **scrubbed_env(),
        "OPENAI_API_KEY": "sk-abcdefghijklmnop",
        "MY_TOKEN": "t0k3n-xyz",
        "HARMLESS": "visible-value",
    }
    c = RunContext(workspace=tmp_path, env=env)
    try:
        r = await tools.registry()["run"](c, {"command": "env"})
    finally:
        await c.aclose()
    assert "HARMLESS=visible-value" in r.output
    assert "sk-abcdefghijklmnop" not in r.output and "t0k3n-xyz" not in r.output


ORPHAN_MAKERS = {
    "child": "sleep 300 & echo $! >> pids; sleep 300",
    "subshell_grandchild": "(sleep 300 & echo $! >> pids; wait) & sleep 300",
    "detached_grandchild": "( (sleep 300 > /dev/null 2>&1 & echo $! >> pids) ) ; sleep 300",
    "nohup": "nohup sleep 300 > /dev/null 2>&1 & echo $! >> pids; sleep 300",
    "new_group": 'python3 -c \'import os,time; os.setpgid(0,0); open("pids","a").write('
    'str(os.getpid())+"\\n"); time.sleep(300)\' & sleep 300',
    "new_session": "setsid sleep 300 > /dev/null 2>&1 & echo $! >> pids; sleep 300",
    "ignores_term": "bash -c 'trap \"\" TERM HUP; echo $$ >> pids; sleep 300' & sleep 300",
}


@pytest.mark.slow
@pytest.mark.parametrize("maker", sorted(ORPHAN_MAKERS))
async def test_timeout_leaves_no_orphans(ctx: RunContext, maker: str) -> None:
    """A timed-out command's children and background grandchildren are all gone, checked by pid."""
    r = await call(ctx, "run", command=ORPHAN_MAKERS[maker], timeout_s=1.5)
    assert r.data["timed_out"] is True
    pids = [int(x) for x in (Path(ctx.workspace) / "pids").read_text().split()]
    assert pids
    assert [] == await jail_survivors(ctx, pids), f"survivors: {pids}"


async def test_run_end_kills_redirected_background(ctx: RunContext) -> None:
    """Background processes that outlive their command are gone once the run's context closes."""
    r = await call(
        ctx,
        "run",
        command="(sleep 300 > /dev/null 2>&1 & echo $! >> pids); "
        "setsid sleep 300 > /dev/null 2>&1 & echo $! >> pids; "
        "env -i /bin/sleep 300 > /dev/null 2>&1 & echo $! >> pids",
    )
    assert r.ok
    pids = [int(x) for x in (Path(ctx.workspace) / "pids").read_text().split()]
    assert pids == await jail_survivors(ctx, pids, within_s=0)
    ns = pid_namespace((await ctx.the_jail()).init_pid)
    await ctx.aclose()
    assert [] == await namespace_survivors(ns)


HUGE: dict[str, Callable[[RunContext], Awaitable[ToolResult]]] = {
    "run_stdout": lambda c: call(c, "run", command="head -c 20000000 /dev/urandom | base64"),
    "run_stderr": lambda c: call(c, "run", command="head -c 5000000 /dev/zero | tr '\\0' e >&2"),
    "read_file": lambda c: call(c, "read_file", path="big.txt"),
    "search": lambda c: call(c, "search", pattern="needle", max_results=100000),
    "list_files": lambda c: call(c, "list_files", path="many", max_entries=100000),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(HUGE))
async def test_huge_outputs_are_capped(ctx: RunContext, kind: str) -> None:
    """Whatever produces a huge output, the model gets at most the cap, and the cut is stated."""
    ws = Path(ctx.workspace)
    (ws / "big.txt").write_text("needle " * 20 + "\n" + ("needle in a haystack\n" * 60_000))
    (ws / "many").mkdir()
    for i in range(2000):
        (ws / "many" / f"file_{i:05d}.txt").touch()
    r = await HUGE[kind](ctx)
    assert len(r.output) <= 3000
    assert "capped at 3,000 chars" in r.output


@pytest.mark.external
async def test_browser_blocks_redirects_and_subrequests(ctx: RunContext) -> None:
    """A loopback page cannot redirect, fetch or link the browser to a non-allowed host or file.

    The route handler never sees a redirect's target, so the redirect is stopped by the dead
    proxy alone; fetches, images and links are stopped by the route handler (and recorded).
    """
    hits: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        target = head.split()[1]
        host = next(
            ln.split(":", 1)[1].strip()
            for ln in head.splitlines()
            if ln.lower().startswith("host:")
        )
        hits.append(f"{host}{target}")
        port = writer.get_extra_info("sockname")[1]
        if target == "/redirect":
            writer.write(
                f"HTTP/1.1 302 Found\r\nLocation: http://evil.test:{port}/stolen\r\n"
                f"Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
        else:
            body = (
                f"<p>page</p><a id=f href='file:///etc/hostname'>f</a><script>"
                f"fetch('http://evil.test:{port}/fetched').catch(()=>{{}});"
                f"new Image().src='http://evil.test:{port}/img';</script>"
            ).encode()
            writer.write(html_response(body))
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        r = await call(ctx, "browser_open", url=f"http://127.0.0.1:{port}/redirect")
        assert r.ok is False
        r = await call(ctx, "browser_open", url=f"http://127.0.0.1:{port}/page")
        assert r.ok, r.output
        await asyncio.sleep(0.5)  # let the page's script try its requests
        r = await call(ctx, "browser_click", selector="#f")
        r = await call(ctx, "browser_text")
        assert "localhost" not in r.output and os.uname().nodename not in r.output
        blocked = (await session(ctx)).blocked  # what the route layer itself stopped
        assert f"http://evil.test:{port}/fetched" in blocked
        assert f"http://evil.test:{port}/img" in blocked
    finally:
        server.close()
        await server.wait_closed()
    assert not [h for h in hits if "evil.test" in h], hits
    assert f"127.0.0.1:{port}/redirect" in hits


@pytest.mark.external
async def test_file_page_cannot_reach_files_outside(ctx: RunContext) -> None:
    """A workspace page's iframe and link to a file outside the workspace are both blocked."""
    root = Path(ctx.workspace).parent
    target = (root / "outside.txt").as_uri()
    (Path(ctx.workspace) / "page.html").write_text(
        f"<p>local page</p><iframe src='{target}'></iframe><a id=out href='{target}'>out</a>"
    )
    r = await call(ctx, "browser_open", url=(Path(ctx.workspace) / "page.html").as_uri())
    assert r.ok, r.output
    await call(ctx, "browser_click", selector="#out")
    texts = [(await call(ctx, "browser_text")).output, (await call(ctx, "browser_snapshot")).output]
    assert all(SECRET not in t for t in texts)
    assert target in (await session(ctx)).blocked
    untouched(root)


@pytest.mark.external
async def test_websocket_to_other_host_is_blocked(ctx: RunContext) -> None:
    """A page's WebSocket to a non-allowed host is refused by the WebSocket route."""
    page = Path(ctx.workspace) / "ws.html"
    page.write_text(
        "<p id=s>start</p><script>const w = new WebSocket('ws://evil.test:9/x');"
        "w.onclose = () => { document.getElementById('s').textContent = 'closed'; };"
        "</script>"
    )
    assert (await call(ctx, "browser_open", url=page.as_uri())).ok
    r = await call(ctx, "browser_wait_for_text", text="closed", timeout_s=5)
    assert r.ok, r.output
    assert "ws://evil.test:9/x" in (await session(ctx)).blocked


# -- hardlinks, special files, races, regex: the file tools ------------------------------------

HARDLINK_CALLS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "hl"},
    "write_file": {"path": "hl", "content": "pwned"},
    "edit_file": {"path": "hl", "old_text": SECRET, "new_text": "pwned"},
    "apply_patch": {"patch": f"--- a/hl\n+++ b/hl\n@@ -1 +1 @@\n-{SECRET}\n+pwned\n"},
    "search": {"pattern": "SECRET", "path": "hl"},
    "browser_screenshot": {"path": "hl"},
}


@pytest.mark.slow
@pytest.mark.parametrize("tool", sorted(HARDLINK_CALLS))
async def test_hardlink_to_outside_is_refused(ctx: RunContext, tool: str) -> None:
    """A hardlink in the workspace to a file outside is neither read nor written through."""
    root = Path(ctx.workspace).parent
    os.link(root / "outside.txt", Path(ctx.workspace) / "hl")
    r = await call(ctx, tool, **HARDLINK_CALLS[tool])
    assert SECRET not in r.output
    assert tool == "search" or r.ok is False, r.output
    assert (root / "outside.txt").read_text() == SECRET + "\n"


FIFO_CALLS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "fifo"},
    "write_file": {"path": "fifo", "content": "x"},
    "edit_file": {"path": "fifo", "old_text": "a", "new_text": "b"},
    "search": {"pattern": "x"},
}


@pytest.mark.parametrize("tool", sorted(FIFO_CALLS))
async def test_fifo_never_blocks_a_file_tool(ctx: RunContext, tool: str) -> None:
    """A FIFO in the workspace is refused (or skipped by search) at once; nothing blocks."""
    os.mkfifo(Path(ctx.workspace) / "fifo")
    started = time.monotonic()
    r = await call(ctx, tool, **FIFO_CALLS[tool])
    assert time.monotonic() - started < 2
    assert (tool == "search") == r.ok, r.output
    assert tool == "search" or "FIFO" in r.output


async def test_catastrophic_regex_is_stopped(ctx: RunContext) -> None:
    """A pattern that backtracks catastrophically elsewhere runs in linear time here."""
    (Path(ctx.workspace) / "x.txt").write_text(("x" * 5000 + "\n") * 20)
    started = time.monotonic()
    r = await call(ctx, "search", pattern="(x+x+)+y")
    assert time.monotonic() - started < 2
    assert (True, True) == (r.ok, "no matches" in r.output)


async def test_backreference_pattern_is_refused_not_run(ctx: RunContext) -> None:
    """A pattern the linear-time engine cannot run is an error saying why, not a hang."""
    (Path(ctx.workspace) / "a.txt").write_text("a" * 40 + "\n")
    r = await call(ctx, "search", pattern=r"(a*)*\1b")
    assert (False, True) == (r.ok, "RE2" in r.output)


RACE_CALLS: dict[str, Callable[[int], dict[str, Any]]] = {
    "read_file": lambda i: {"path": "sw/secret.txt"},
    "write_file": lambda i: {"path": f"sw/pwned{i}.txt", "content": "x"},
    "edit_file": lambda i: {"path": "sw/secret.txt", "old_text": SECRET, "new_text": "gone"},
    "apply_patch": lambda i: {
        "patch": f"--- /dev/null\n+++ b/sw/pwned{i}.txt\n@@ -0,0 +1 @@\n+x\n"
    },
    "search": lambda i: {"pattern": "SECRET", "path": "sw"},
    "list_files": lambda i: {"path": "sw"},
}


@pytest.mark.slow
@pytest.mark.parametrize("tool", sorted(RACE_CALLS))
async def test_symlink_swap_race_never_wins(ctx: RunContext, tool: str) -> None:
    """A folder swapped for a symlink out, over and over while the tool runs, never leads out."""
    ws, root = Path(ctx.workspace), Path(ctx.workspace).parent
    real = ws / "sw"
    real.mkdir()
    (real / "secret.txt").write_text("decoy " + "SECRET-looking " + "\n")
    swapper = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import os, sys\nws, out = sys.argv[1], sys.argv[2]\n"
        "def swap(a, b):\n"
        "    try:\n        os.rename(ws + a, ws + b)\n    except OSError:\n        pass\n"
        "os.symlink(out, ws + '/link')\n"
        "while True:\n"
        "    swap('/sw', '/real'); swap('/link', '/sw')\n"
        "    swap('/sw', '/link'); swap('/real', '/sw')\n",
        str(ws),
        str(root / "outside"),
    )
    try:
        outputs = [(await call(ctx, tool, **RACE_CALLS[tool](i))).output for i in range(150)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            swapper.kill()
        await swapper.wait()
    assert [] == [o for o in outputs if SECRET in o]
    assert ["secret.txt"] == sorted(p.name for p in (root / "outside").iterdir())
    assert (root / "outside" / "secret.txt").read_text() == SECRET + "\n"
    assert not list(root.glob("pwned*")) and not list((root / "outside").glob("pwned*"))


# -- the jail: processes, files, network, the agent itself --------------------------------------

JAIL_REFUSALS = {
    "read_only_root": "touch /usr/pwned-by-agent && echo ESCAPED",
    "read_only_etc": "echo x >> /etc/hosts && echo ESCAPED",
    "outside_workspace": "echo x > {root}/outside/pwned.txt && echo ESCAPED",
    "outside_secret_dir": "ls {root}/outside >/dev/null && echo ESCAPED",
    "internet": "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)' "
    "&& echo ESCAPED",
    "host_address": "python3 -c 'import socket; socket.create_connection((\"{host_ip}\", 22), 2)' "
    "&& echo ESCAPED",
    "host_loopback": 'python3 -c \'import socket; socket.create_connection(("127.0.0.1", '
    "{host_port}), 2)' && echo ESCAPED",
    "parent_environ": "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -q {secret} "
    "&& echo ESCAPED",
    "parent_listed": "ps -eo args 2>/dev/null | grep -v grep | grep -q pytest && echo ESCAPED",
    "stop_the_agent": "kill -STOP $PPID 1; kill -9 $PPID 1; kill -STOP -1; echo tried",
    "raise_limits": "ulimit -u unlimited 2>/dev/null; ulimit -f unlimited && echo ESCAPED",
    "mount_tmpfs": "mount -t tmpfs x /usr 2>/dev/null && echo ESCAPED",
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(JAIL_REFUSALS))
async def test_jail_holds(ctx: RunContext, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """A command cannot write the host, reach the network, see agentloop or stop it."""
    jail = await ctx.the_jail()
    assert jail.confined, jail.summary_line()
    secret = "agentloop-planted-" + os.urandom(6).hex()
    monkeypatch.setenv("OPENAI_API_KEY", secret)  # what a command would hunt in the parent
    (Path(ctx.workspace).parent / "planted.env").write_text(secret)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    root = Path(ctx.workspace).parent
    try:
        command = JAIL_REFUSALS[kind].format(
            root=root, host_ip=_host_ip(), secret=secret, host_port=listener.getsockname()[1]
        )
        r = await call(ctx, "run", command=command, timeout_s=10)
    finally:
        listener.close()
    assert "ESCAPED" not in r.output, r.output
    assert secret not in r.output
    untouched_but(root, {"planted.env"})
    after = await call(ctx, "run", command="echo alive")
    assert (True, True) == (after.ok, "alive" in after.output)


def _host_ip() -> str:
    """A non-loopback address of this machine (the route to the outside), else a TEST-NET one."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))
        return str(probe.getsockname()[0])
    except OSError:
        return "192.0.2.1"
    finally:
        probe.close()


def untouched_but(root: Path, extra: set[str]) -> None:
    """Like :func:`untouched`, allowing the named files the test itself put beside the workspace."""
    assert sorted({"outside", "outside.txt", "ws"} | extra) == sorted(
        p.name for p in root.iterdir()
    )
    assert (root / "outside.txt").read_text() == SECRET + "\n"
    assert ["secret.txt"] == sorted(p.name for p in (root / "outside").iterdir())


# -- the run always ends on time; a killed run leaves nothing ---------------------------------

HUNG_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "fifo_read": ("read_file", {"path": "fifo"}),
    "fifo_cat": ("run", {"command": "cat fifo"}),
    "regex": ("search", {"pattern": "(x+x+)+y"}),
    "stopped_child": ("run", {"command": "sleep 300 & kill -STOP $!; wait"}),
    "stopped_self": ("run", {"command": "kill -STOP $$"}),
    "ignores_term": ("run", {"command": "trap '' TERM INT HUP; sleep 300"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(HUNG_TOOLS))
async def test_run_ends_on_time_whatever_a_tool_does(tmp_path: Path, kind: str) -> None:
    """A hung tool of any kind cannot hold the run past its wall-time limit."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "x.txt").write_text("x" * 5000 + "\n")
    name, args = HUNG_TOOLS[kind]
    task = Task(
        name="hung",
        prompt="p",
        system="s",
        tools=(name,),
        finish_tool=True,
        workspace=ws,
        setup=("mkfifo fifo",),
        limits=Limits(max_steps=3, timeout_s=3, tool_timeout_s=60),
    )
    turns = [
        ScriptTurn(tool_calls=(ScriptToolCall(name, orjson.dumps(args).decode()),)),
        ScriptTurn(tool_calls=(ScriptToolCall("finish", '{"summary": "done"}'),)),
    ]
    started = time.monotonic()
    result = await run_task(task, client=ScriptedClient(turns), trace_dir=tmp_path / "traces")
    assert time.monotonic() - started < 3 + 3
    assert result.status in ("ok", "budget"), result.reason
    assert load_trace(result.trace_path or "").complete


def _run_cli(task: Path, trace_dir: Path, tmpdir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from agentloop.cli import main; sys.exit(main(sys.argv[1:]))",
            "run",
            str(task),
            "--trace-dir",
            str(trace_dir),
            "--tier",
            "sim-ultrafast",
        ],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _hung_task(tmp_path: Path, token: str) -> Path:
    (tmp_path / "ws").mkdir(exist_ok=True)
    spec = {
        "name": "hung-cli",
        "prompt": "p",
        "workspace": "ws",
        "tools": ["run"],
        "setup": [f"sleep 300.{token} > /dev/null 2>&1 &"],
        "limits": {"timeout_s": 60, "tool_timeout_s": 60},
        "script": [
            {
                "tool_calls": [
                    {
                        "name": "run",
                        "arguments": {
                            "command": f"trap '' TERM; setsid sleep 301.{token} & sleep 302.{token}"
                        },
                    }
                ]
            }
        ],
    }
    path = tmp_path / "hung.yaml"
    path.write_bytes(orjson.dumps(spec))
    return path


async def _wait_for_tool_start(trace_dir: Path) -> Path:
    for _ in range(300):
        for path in trace_dir.glob("*.jsonl"):
            if b'"kind":"tool"' in path.read_bytes():
                return path
        await asyncio.sleep(0.05)
    raise AssertionError("the run never started its tool")


def _host_pids_with(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{name}/cmdline", "rb") as fh:
                if token.encode() in fh.read():
                    found.append(int(name))
    return found


async def _wait_pids(token: str, n: int, within_s: float = 5.0) -> int:
    deadline = time.monotonic() + within_s
    while len(_host_pids_with(token)) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return len(_host_pids_with(token))


async def _no_pids_with(token: str, within_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while (left := _host_pids_with(token)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


@pytest.mark.slow
async def test_sigterm_ends_a_run_with_a_hung_tool(tmp_path: Path) -> None:
    """SIGTERM during a tool that ignores SIGTERM ends the run at once: exit 143, trace closed,
    no process of the run left."""
    token = str(int.from_bytes(os.urandom(4)))  # digits: sleep 300.<token> is a valid time
    proc = _run_cli(_hung_task(tmp_path, token), tmp_path / "traces", tmp_path)
    try:
        trace = await _wait_for_tool_start(tmp_path / "traces")
        assert 4 == await _wait_pids(token, 4)  # setup service; the tool: its bash, two sleeps
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 10)
    finally:
        await asyncio.to_thread(reap, proc)
    assert 143 == code
    assert time.monotonic() - started < 5
    assert "cancelled" == load_trace(trace).end["status"]
    assert [] == await _no_pids_with(token)
    assert [] == list((tmp_path / "agentloop-work").glob("hung-cli-*"))


@pytest.mark.slow
async def test_sigkilled_run_leaves_no_process_and_its_copy_is_swept(tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves no process (the jail dies with it), and the next run's
    start deletes its working copy and the task's tests saved beside it (never in /tmp)."""
    token = str(int.from_bytes(os.urandom(4)))
    task = _hung_task(tmp_path, token)
    proc = _run_cli(task, tmp_path / "traces", tmp_path)
    try:
        await _wait_for_tool_start(tmp_path / "traces")
        assert 4 == await _wait_pids(token, 4)  # setup service; the tool: its bash, two sleeps
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
    finally:
        await asyncio.to_thread(reap, proc)
    assert [] == await _no_pids_with(token)
    left = sorted(p.name for p in (tmp_path / "agentloop-work").glob("hung-cli-*"))
    copy, tests = left[0], left[2]  # each with its owner mark, until the next start
    assert [copy, f"{copy}.owner", tests, f"{tests}.owner"] == left
    assert tests.startswith(f"{copy}.tests-")
    t = Task(name="next", prompt="p", system="s")
    work = await asyncio.to_thread(workspace.make_copy, t, tmp_path / "agentloop-work")
    assert [] == list((tmp_path / "agentloop-work").glob("hung-cli-*"))
    workspace.remove(work)


@pytest.mark.external
@pytest.mark.parametrize("where", ["data_url", "workspace_file"])
async def test_webrtc_cannot_reach_a_non_allowed_address(ctx: RunContext, where: str) -> None:
    """A page's WebRTC STUN requests (UDP, past the HTTP proxy rule) never leave the browser."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 0))
    udp.setblocking(False)
    try:
        html = (
            f"<p id=s>start</p><script>const pc = new RTCPeerConnection({{iceServers: "
            f"[{{urls: 'stun:{_host_ip()}:{udp.getsockname()[1]}'}}]}});"
            f"pc.createDataChannel('x'); pc.createOffer().then(o => pc.setLocalDescription(o))"
            f".then(() => {{ document.getElementById('s').textContent = 'offered'; }});"
            f"</script>"
        )
        if where == "data_url":
            url = "data:text/html," + html
        else:
            (Path(ctx.workspace) / "rtc.html").write_text(html)
            url = (Path(ctx.workspace) / "rtc.html").as_uri()
        assert (await call(ctx, "browser_open", url=url)).ok
        assert (await call(ctx, "browser_wait_for_text", text="offered", timeout_s=5)).ok
        await asyncio.sleep(2)  # ICE gathering sends its STUN requests within this
        got = []
        with contextlib.suppress(BlockingIOError):
            while True:
                got.append(udp.recvfrom(2048)[1])
    finally:
        udp.close()
    assert [] == got


async def test_orphans_are_reaped_inside_the_jail(ctx: RunContext) -> None:
    """A child whose parent exits without waiting is reaped by the jail's init: no zombie stays."""
    r = await call(
        ctx,
        "run",
        command=(
            "python3 -c 'import os, time\nif os.fork() == 0: os._exit(0)\ntime.sleep(0.3)' & "
            "(sleep 0.2 &); sleep 1; ps -eo stat= | grep -c ^Z; true"
        ),
    )
    assert (True, "0") == (r.ok, r.output.split("--- stdout ---\n")[1].strip())
