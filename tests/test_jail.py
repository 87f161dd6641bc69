"""The per-run jail: one sandbox for setup, tools and the success check, gone when the run ends."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import agentloop_tools as tools
import orjson
import pytest

from agentloop import run_task
from agentloop.config.tasks import Task
from agentloop.sandbox import proc, workspace
from agentloop.sandbox._init import proc_table
from agentloop.sandbox.context import RunContext
from agentloop.sandbox.jail import HostJail, JailSpec, open_jail
from agentloop.trace.reader import load_trace
from tests.conftest import namespace_survivors, pid_namespace

SERVER = (
    "python -c 'import http.server, functools, sys; "
    'h = functools.partial(http.server.SimpleHTTPRequestHandler, directory="."); '
    'http.server.ThreadingHTTPServer(("127.0.0.1", 8080), h).serve_forever()\' {token}'
)
FETCH = (
    "python -c 'import urllib.request; "
    'print(urllib.request.urlopen("http://127.0.0.1:8080/hello.txt").read().decode())\''
)


def host_pids_with(token: str) -> list[int]:
    """Host processes whose command line holds ``token`` (in or out of any jail)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if token.encode() in fh.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def settled_shells(token: str, count: int) -> bool:
    """Whether exactly ``count`` host processes hold ``token`` and each is a shell running its
    ``sleep 300`` (a child of that command line): no fork or exec of theirs is in flight."""
    holders = host_pids_with(token)
    sleeping = set()
    for pid, ppid, *_ in proc_table():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"sleep\x00300\x00" == fh.read():
                    sleeping.add(ppid)
        except OSError:
            pass
    return count == len(holders) and sleeping.issuperset(holders)


def ours() -> set[int]:
    """This test process's live descendants on the host (the jail's processes among them)."""
    children: dict[int, list[int]] = {}
    for pid, ppid, *_ in proc_table():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


async def steady() -> set[int]:
    """This test's descendants once two looks 0.2 s apart agree (start-up transients gone)."""
    last = ours()
    for _ in range(25):
        await asyncio.sleep(0.2)
        if (now := ours()) == last:
            return now
        last = now
    return last


async def settled(want: set[int], within_s: float = 5.0) -> set[int]:
    """This test's descendants once they are ``want`` again (or after ``within_s``)."""
    deadline = time.monotonic() + within_s
    while (now := ours()) != want and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return now


def task_file(tmp_path: Path, token: str) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello from the setup service\n")
    spec = {
        "name": "jail-service",
        "prompt": "check the service",
        "workspace": "ws",
        "setup": [
            SERVER.format(token=token) + " > server.log 2>&1 &",
            "for i in $(seq 1 100); do " + FETCH + " >/dev/null 2>&1 && exit 0; "
            "sleep 0.05; done; exit 1",
        ],
        "tools": ["run"],
        "finish_tool": True,
        "success": {"command": FETCH + " | grep -q 'hello from the setup service'"},
        "script": [
            {"tool_calls": [{"name": "run", "arguments": {"command": FETCH}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"summary": "served"}}]},
        ],
    }
    path = tmp_path / "task.yaml"
    path.write_bytes(orjson.dumps(spec))  # JSON is YAML
    return path


@pytest.mark.slow
async def test_setup_service_lives_for_the_run_and_dies_with_it(tmp_path: Path) -> None:
    """A server started with & by setup answers the run tool and the success check, then is gone."""
    token = f"jailtoken{uuid.uuid4().hex}"
    result = await run_task(task_file(tmp_path, token), trace_dir=tmp_path / "traces")
    assert ("ok", True) == (result.status, result.success)
    records = [orjson.loads(line) for line in Path(result.trace_path).read_bytes().splitlines()]
    [tool] = [
        r
        for r in records
        if r.get("type") == "span_end" and r.get("attrs", {}).get("gen_ai.tool.name") == "run"
    ]
    assert "hello from the setup service" in tool["attrs"]["output"]
    sandbox = load_trace(result.trace_path or "").header["sandbox"]  # on the setup span's end
    assert ("bubblewrap", "loopback only") == (sandbox["kind"], sandbox["network"])
    assert [] == host_pids_with(token)


@pytest.mark.slow
async def test_fork_bomb_is_contained() -> None:
    """A fork bomb from run errors within its timeout, the host's process count comes back, and
    the next command works."""
    ws = Path(os.environ.get("TMPDIR", "/tmp")) / f"agentloop-forkbomb-{uuid.uuid4().hex[:8]}"
    ws.mkdir()
    ctx = RunContext(workspace=ws, settings={"tool_timeout_s": 30})
    try:
        jail = await ctx.the_jail()
        assert jail.confined
        before = await steady()
        started = time.monotonic()
        bomb = asyncio.create_task(
            tools.registry()["run"](ctx, {"command": ":(){ :|:& };:", "timeout_s": 4})
        )
        peak = len(before)
        while not bomb.done():
            peak = max(peak, len(ours()))
            await asyncio.sleep(0.05)
        r = bomb.result()
        elapsed = time.monotonic() - started
        assert (False, True) == (r.ok, r.data["process_limit_hits"] > 0)
        assert "process limit was hit" in r.output
        assert elapsed < 4 + 3
        assert 100 < peak - len(before) <= jail.spec.limits.max_procs
        ns = pid_namespace(jail.init_pid)  # type: ignore[attr-defined]
        assert [] == [p for p in await namespace_survivors(ns, within_s=5) if p != jail.init_pid]  # type: ignore[attr-defined]
        assert before == await settled(before)
        again = await tools.registry()["run"](ctx, {"command": "echo still-fine"})
        assert (True, True) == (again.ok, "still-fine" in again.output)
    finally:
        await ctx.aclose()
        os.rmdir(ws) if not any(ws.iterdir()) else None


async def test_no_bwrap_runs_unconfined_and_says_so(tmp_path: Path) -> None:
    """Without bubblewrap the jail is a HostJail whose confinement names what is not confined."""
    jail = await open_jail(JailSpec(workspace=tmp_path), bwrap=str(tmp_path / "no-bwrap"))
    try:
        assert isinstance(jail, HostJail)
        assert "none" == jail.confinement["kind"]
        assert "filesystem" in jail.confinement["not_confined"]
        assert "UNCONFINED" in jail.summary_line() or "NOT confined" in jail.summary_line()
    finally:
        await jail.aclose()


@pytest.mark.slow
async def test_without_a_cgroup_commands_run_as_a_run_uid_and_a_fork_bomb_still_stops(
    tmp_path: Path,
) -> None:
    """Where no cgroup can be had, commands run as the run's own uid so RLIMIT_NPROC holds."""
    task = Task(name="nocgroup", prompt="p", system="s")
    ws = await asyncio.to_thread(workspace.make_copy, task, None)  # a folder that uid can reach
    (ws / "given.txt").write_text("from the task\n")
    jail = await open_jail(JailSpec(workspace=ws, use_cgroups=False))
    ctx = RunContext(workspace=ws, jail=jail, settings={"tool_timeout_s": 30})
    try:
        assert (True, None) == (jail.confined, jail.cgroups or None)  # type: ignore[attr-defined]
        uid = jail.run_uid  # type: ignore[attr-defined]
        r = await tools.registry()["run"](
            ctx, {"command": "id -u; echo more >> given.txt; touch /tmp/t new.txt && echo wrote"}
        )
        assert (True, [str(uid), "wrote"]) == (r.ok, r.output.split("--- stdout ---\n")[1].split())
        assert "from the task\nmore\n" == (ws / "given.txt").read_text()
        started = time.monotonic()
        bomb = await tools.registry()["run"](ctx, {"command": ":(){ :|:& };:", "timeout_s": 4})
        assert time.monotonic() - started < 4 + 3
        assert (False, True) == (bomb.ok, bomb.data["process_limit_hits"] > 0)
        ns = pid_namespace(jail.init_pid)  # type: ignore[attr-defined]
        assert [] == [p for p in await namespace_survivors(ns, within_s=5) if p != jail.init_pid]  # type: ignore[attr-defined]
        again = await tools.registry()["run"](ctx, {"command": "echo still-fine"})
        assert (True, True) == (again.ok, "still-fine" in again.output)
        assert f"uid {uid}" in jail.confinement["confined"]
    finally:
        await ctx.aclose()
        await jail.aclose()
        workspace.remove(ws)


@pytest.mark.slow
async def test_runs_started_together_each_get_their_jail(tmp_path: Path) -> None:
    """Twenty-four runs starting at once in one process are all jailed: none falls back to unconfined
    because another run's clean-up removed its cgroup before it moved in."""
    steady = Path(__file__).parent / "data" / "steady.yaml"
    results = await asyncio.gather(
        *[run_task(steady, tier="sim-ultrafast", trace_dir=tmp_path) for _ in range(24)]
    )
    headers = [load_trace(str(r.trace_path)).header for r in results]
    assert [True] * 24 == [h["sandbox"]["jail"] for h in headers]


async def test_commands_leave_no_descriptor_open(tmp_path: Path) -> None:
    """Twenty commands through the process runner leave agentloop's open descriptors as they were."""
    jail = await open_jail(JailSpec(workspace=tmp_path))
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            await proc.run(
                jail, "true", cwd=tmp_path, env={"PATH": os.defpath}, timeout_s=10, cap=100
            )
        assert before == len(os.listdir("/proc/self/fd"))
    finally:
        await jail.aclose()


_POPENS: list[tuple[str, int]] = []  # (executable, thread) of each Popen while one is recorded
_RECORDING = threading.Event()
_AT_POPEN: list[Callable[[], None]] = []  # run once, on the thread of the next Popen
_HOOKED: list[bool] = []  # the audit hook is added once a process (it cannot be removed)


def _on_audit(event: str, args: tuple[object, ...]) -> None:
    if event == "subprocess.Popen" and _RECORDING.is_set():
        _POPENS.append((str(args[0]), threading.get_ident()))
    if event == "subprocess.Popen" and _AT_POPEN:
        _AT_POPEN.pop()()


def _audit() -> None:
    if not _HOOKED:
        sys.addaudithook(_on_audit)  # records only while _RECORDING is set or _AT_POPEN armed
        _HOOKED.append(True)


def _children() -> set[int]:
    """This process's child processes, running or not yet reaped (of any of its threads)."""
    kids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            kids |= {int(p) for p in Path(f"/proc/self/task/{tid}/children").read_text().split()}
    return kids


def _run_cgroups() -> set[Path]:
    """The cgroups of this process's jails (``agentloop/r-PID-MARK`` under each hierarchy). A
    walk that skips what vanishes under it: other workers' runs remove their cgroups meanwhile
    (``Path.glob("**/...")`` raised FileNotFoundError for one, in a fresh venv's suite)."""
    mine = f"r-{os.getpid()}-"
    return {
        Path(top, d)
        for top, dirs, _ in os.walk("/sys/fs/cgroup")  # errors (a folder gone) are skipped
        if os.path.basename(top) == "agentloop"
        for d in dirs
        if d.startswith(mine)
    }


async def test_a_cancel_while_bwrap_starts_leaves_nothing_behind(tmp_path: Path) -> None:
    """A cancel that lands once the thread starting bwrap has forked (issue 30's hole, which lost
    the ``Popen``: a bwrap never reaped, its stderr pipe left to the garbage collector, where it
    warned in a later test): the open is cancelled once the start is undone, and no process of
    its, no descriptor and no cgroup is left."""
    _audit()
    loop = asyncio.get_running_loop()
    fds, kids, groups = sorted(os.listdir("/proc/self/fd")), _children(), _run_cgroups()
    opening = asyncio.create_task(open_jail(JailSpec(workspace=tmp_path)))

    def cancel_once_forked() -> None:  # on the loop, holding it until the fork (bounded)
        deadline = time.monotonic() + 10
        while not _children() - kids and time.monotonic() < deadline:
            time.sleep(0.001)
        assert _children() - kids, "bwrap was not forked within 10 s"
        opening.cancel()

    _AT_POPEN.append(lambda: loop.call_soon_threadsafe(cancel_once_forked))
    try:
        with pytest.raises(asyncio.CancelledError):
            await opening
    finally:
        _AT_POPEN.clear()
    await loop.shutdown_default_executor()  # the thread's Popen has returned, kept or lost
    gc.collect()  # a Popen dropped while its child runs warns here, an error in this suite
    assert kids == _children()
    assert fds == sorted(os.listdir("/proc/self/fd"))
    assert groups == _run_cgroups()


async def test_a_jail_starts_its_bwrap_off_the_event_loop(tmp_path: Path) -> None:
    """Opening a jail execs bwrap (and reads the host's view for its command line) on a thread:
    ``Popen`` blocks its caller until the child has exec'd, which on the loop delays every
    stream it times (issue 28). Five jails opened and closed leave no descriptor behind."""
    _audit()
    loop_thread = threading.get_ident()
    before = len(os.listdir("/proc/self/fd"))
    _POPENS.clear()
    _RECORDING.set()
    try:
        for _ in range(5):
            jail = await open_jail(JailSpec(workspace=tmp_path))
            assert jail.confined
            await jail.aclose()
    finally:
        _RECORDING.clear()
    assert len(_POPENS) == 5, _POPENS
    assert [t for _, t in _POPENS if t == loop_thread] == []
    assert before == len(os.listdir("/proc/self/fd"))


async def test_a_bwrap_that_fails_to_start_says_why(tmp_path: Path) -> None:
    """A bwrap that exits at once: the run falls back to unconfined with what it wrote on
    stderr as the reason (read without blocking the loop)."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed: nope' >&2\nexit 1\n")
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    jail = await open_jail(JailSpec(workspace=work), bwrap=str(fake))
    assert isinstance(jail, HostJail)
    assert jail.why == "bubblewrap failed to start: bwrap: Creating new namespace failed: nope"


async def test_a_suite_run_s_jail_is_emptied_at_its_end_and_torn_down_behind_it(
    tmp_path: Path,
) -> None:
    """Within a suite (agentloop.sandbox.closer) closing a jail with the suite's closer kills
    every process of the run at once, a hidden one included (own session, empty environment: no
    mark), but leaves the idle init to the closer; leaving the suite's context tears every
    deferred jail down."""
    from agentloop.sandbox.closer import closing_behind

    token = f"hidden{uuid.uuid4().hex}"
    async with closing_behind(spacing_s=60.0) as closer:  # the first close waits 60 s after
        first = await open_jail(JailSpec(workspace=tmp_path))
        second = await open_jail(JailSpec(workspace=tmp_path))
        try:
            assert (True, True) == (first.confined, second.confined)
            assert second.init_pid is not None
            ns = pid_namespace(second.init_pid)
            for jail in (first, second):
                out = await proc.run(
                    jail,
                    f"setsid env -i /bin/sh -c 'sleep 300; : {token}' & echo started",
                    cwd=tmp_path,
                    env={"PATH": os.defpath},
                    timeout_s=5,
                    cap=1000,
                    background="keep",
                )
                assert 0 == out.exit_code
            # exactly the two hidden shells, once each runs its sleep: before, a chain shows the
            # token in a bash forked for `&`, in setsid, env and the shell's fork before it
            # execs sleep, and nowhere while one of them is mid-exec (its command line reads
            # empty), so a count is one or three for a moment (a busy machine stretches each)
            deadline = time.monotonic() + 30  # a bound about hangs
            while not settled_shells(token, 2) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert 2 == len(host_pids_with(token))
            await first.aclose(closer)  # the closer tears it down at once (nothing was waiting)
            await second.aclose(closer)  # queued: 60 s behind the first
            assert [] == host_pids_with(token)  # emptied when aclose returned
            assert second.proc is not None and second.proc.returncode is None  # its init idles
            assert 1 == closer.pending
        except BaseException:  # a failed check leaves no jail for a later test's GC to warn of
            for jail in (first, second):
                await jail.aclose()
            raise
    assert (0, 2) == (closer.pending, closer.closed)  # the context's end closed the rest
    assert second.proc.returncode is not None
    assert [] == await namespace_survivors(ns)


def test_emptying_refuses_outside_its_own_pid_namespace() -> None:
    """``kill(-1)`` from anything but PID 1 of a namespace would reach the host's processes:
    the init's ``empty`` does nothing there and says so."""
    from agentloop.sandbox._init import empty

    assert os.getpid() != 1
    assert -1 == empty()
