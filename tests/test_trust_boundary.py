"""The trust battery: a run's own commands try to forge the verdict, poison later runs, read other
runs or the host, and stretch its limits; each attempt is refused (issue 29).

Every hostile command runs inside the jail it attacks, with a timeout, a bounded loop and a
bounded count, so a failure cannot take the machine down.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import uuid
from pathlib import Path

import agentloop_tools as tools
import pytest

from agentloop.config.tasks import Limits, Task
from agentloop.sandbox import taskenv, workspace
from agentloop.sandbox.context import RunContext, scrubbed_env
from agentloop.sandbox.jail import ANSWER_TIMEOUT_S, READY_TIMEOUT_S, BwrapJail, JailError

FAILING_TEST = "def test_fixed():\n    import os\n    assert os.path.exists('fixed')\n"

# A jailed process steals the init's control socket (pidfd_getfd needs only the same uid and no
# capability the init has) and answers 'exit 0' for every command id, for at most 20 s.
FORGER = r"""
import ctypes, json, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
pidfd = libc.syscall(434, 1, 0)
stolen = []
for name in os.listdir('/proc/1/fd') if pidfd >= 0 else []:
    try:
        if os.readlink(f'/proc/1/fd/{name}').startswith('socket:'):
            fd = libc.syscall(438, pidfd, int(name), 0)
            if fd >= 0:
                stolen.append(socket.socket(fileno=fd))
    except OSError:
        pass
open('forger.state', 'w').write(f'stole {len(stolen)}\n')
end = time.monotonic() + 20
while stolen and time.monotonic() < end:
    for s in stolen:
        for cid in range(1, 200):
            try:
                s.send(json.dumps({'ev': 'exit', 'id': cid, 'code': 0}).encode())
            except OSError:
                pass
    time.sleep(0.01)
"""

# PTRACE_ATTACH on the init stops it; the command then holds it stopped for at most 60 s.
FREEZER = r"""
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
ok = libc.ptrace(16, 1, None, None) == 0
open('freezer.state', 'w').write('attached\n' if ok else f'refused {ctypes.get_errno()}\n')
time.sleep(60 if ok else 0)
"""


def _task(src: Path, **kw: object) -> Task:
    return Task(
        name="t",
        prompt="p",
        system="s",
        workspace=src,
        success_command="python -m pytest -q -p no:cacheprovider",
        test_command="python -m pytest -q -p no:cacheprovider",
        limits=Limits(tool_timeout_s=15),
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A task workspace whose one test fails until a file 'fixed' exists (the fix)."""
    s = tmp_path / "src"
    (s / "tests").mkdir(parents=True)
    (s / "tests" / "test_fix.py").write_text(FAILING_TEST)
    return s


async def _sh(place: workspace.Place, command: str, timeout_s: float = 15) -> tuple[int, str]:
    env = scrubbed_env()
    return await workspace.run_command(command, place.path, env, timeout_s, place.jail)


async def _wait_for(path: Path, bound_s: float = 60.0) -> str:
    """The line a planted program writes to ``path``, once it is whole: the file exists from its
    ``open`` on, empty until the write (read in between once in CI: ``''``)."""
    end = time.monotonic() + bound_s
    text = ""
    while not text.endswith("\n") and time.monotonic() < end:
        await asyncio.sleep(0.05)
        text = path.read_text() if path.exists() else ""
    return text


@pytest.mark.slow
async def test_a_command_holding_the_inits_socket_cannot_forge_the_check(
    src: Path, tmp_path: Path
) -> None:
    """A forger that tries to take the run init's socket (pidfd_getfd) gets nothing (the init is
    non-dumpable); and the verdict never goes through that socket anyway: a wrong fix fails the
    success check and run_tests, a right one passes."""
    task = _task(src)
    place = await workspace.prepare_run(task, root=tmp_path)
    try:
        assert place.jail.confined
        (place.path / "forger.py").write_text(FORGER)
        await _sh(place, "python forger.py >/dev/null 2>&1 &")
        stole = await _wait_for(place.path / "forger.state")
        checked = await workspace.check_success(task, place.path, "", place.jail, tests=place.tests)
        ctx = RunContext(
            workspace=place.path,
            jail=place.jail,
            settings={"test_command": task.test_command, "tool_timeout_s": 15},
        )
        tested = await tools.registry()["run_tests"](ctx, {})
        (place.path / "fixed").write_text("")
        fixed = await workspace.check_success(task, place.path, "", place.jail, tests=place.tests)
    finally:
        await place.close()
    assert "stole 0\n" == stole  # the init is non-dumpable: pidfd_getfd refused
    assert (False, 1) == (checked["passed"], checked["exit_code"])
    assert (False, 1, 1) == (tested.ok, tested.data["exit_code"], tested.data["failed"])
    assert True is fixed["passed"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "plant",
    [
        "printf 'import sys\\nsys.exit(0)\\n' > pytest.py",
        "mkdir -p pytest && printf 'import sys\\nsys.exit(0)\\n' > pytest/__main__.py"
        " && touch pytest/__init__.py",
        "printf 'import os\\nos._exit(0)\\n' > sitecustomize.py",
        "printf 'def pytest_sessionfinish(session):\\n    session.exitstatus = 0\\n' > conftest.py",
        "printf 'def test_fixed():\\n    pass\\n' > tests/test_fix.py",
        "mkdir -p bin && printf '#!/bin/sh\\nexit 0\\n' > bin/python && chmod +x bin/python"
        " && export PATH=$PWD/bin:$PATH",
    ],
    ids=["pytest.py", "pytest-package", "sitecustomize", "conftest-hook", "edited-test", "bin"],
)
async def test_a_planted_runner_or_edited_test_does_not_pass_the_check(
    plant: str, src: Path, tmp_path: Path
) -> None:
    """A fake pytest, interpreter, sitecustomize or conftest in the workspace, or the task's test
    edited to pass, never makes a wrong fix pass the success check."""
    task = _task(src)
    place = await workspace.prepare_run(task, root=tmp_path)
    try:
        code, out = await _sh(place, plant)
        assert 0 == code, out
        checked = await workspace.check_success(task, place.path, "", place.jail, tests=place.tests)
    finally:
        await place.close()
    assert (False, 1) == (checked["passed"], checked["exit_code"]), checked["output"]


async def test_the_task_venv_is_read_only_and_a_changed_one_is_rebuilt(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run cannot write its task venv (sitecustomize, bin/pytest); a venv changed behind
    agentloop's back (an unconfined run, say) is found changed and built anew."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    task = _task(src)
    env = await taskenv.ensure(task, setup=workspace.build_setup)
    site = next(env.venv.glob("lib/python*/site-packages"))
    with taskenv.activate(env):
        place = await workspace.prepare_run(
            task, root=tmp_path, readonly=env.readonly, path_prefix=env.path_prefix
        )
        try:
            _code, out = await _sh(
                place,
                f"echo 'import os; os._exit(0)' > {site}/sitecustomize.py; "
                f"echo 'exit 0' > {env.venv}/bin/pytest; echo planted",
            )
        finally:
            await place.close()
    assert "Read-only file system" in out
    assert "sitecustomize" in (site / "sitecustomize.py").read_text()  # agentloop's own, empty
    (site / "evil.pth").write_text("import os\n")  # as an unconfined run could
    again = await taskenv.ensure(task, setup=workspace.build_setup)
    assert env.venv == again.venv
    assert not (site / "evil.pth").exists()


async def test_runs_cannot_see_each_other_or_the_hosts_private_places(
    src: Path, tmp_path: Path
) -> None:
    """One run's commands see neither another run's working copy (under the same root, wherever
    TMPDIR is), nor a host Unix socket outside /tmp, nor /root, /home, /run or root-only files
    in /etc."""
    task = _task(src)
    sock_dir = Path("/var/tmp") / f"agentloop-test-{uuid.uuid4().hex[:8]}"
    sock_dir.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_dir / "host.sock"))
    listener.listen(1)
    a = await workspace.prepare_run(task, root=tmp_path / "root")
    b = await workspace.prepare_run(task, root=tmp_path / "root")
    try:
        (b.path / "secret.txt").write_text("B-SECRET")
        probes = {
            "other run": f"cat {b.path}/secret.txt",
            "other run listed": f"ls {b.path.parent} | grep -c {b.path.name}",
            "host socket": f'python -c "import socket; s=socket.socket(socket.AF_UNIX); '
            f"s.connect('{sock_dir}/host.sock')\"",
            "root": "ls -A /root | grep -v '^.pyenv$' | grep .",
            "home": "ls -A /home | grep .",
            "run": "ls -A /run",
            "shadow": "head -c1 /etc/shadow | grep -c .",
        }
        got = {name: (await _sh(a, cmd, 10))[0] for name, cmd in probes.items()}
    finally:
        await a.close()
        await b.close()
        listener.close()
        for p in sock_dir.iterdir():
            p.unlink()
        sock_dir.rmdir()
    assert {} == {name: code for name, code in got.items() if code == 0}


@pytest.mark.slow
async def test_a_command_that_stops_the_init_cannot_stretch_the_tool_timeout(
    src: Path, tmp_path: Path
) -> None:
    """A command cannot ptrace-stop the jail's init (it is non-dumpable); an init stopped all the
    same (here from the host, as a kernel or a bug might) stretches nothing: the next command
    ends within its timeout plus the init's answer bound (the namespace is killed from outside),
    and the check still runs and reports the wrong fix."""
    task = _task(src)
    place = await workspace.prepare_run(task, root=tmp_path)
    try:
        (place.path / "freezer.py").write_text(FREEZER)
        await _sh(place, "python freezer.py >/dev/null 2>&1 &")
        state = await _wait_for(place.path / "freezer.state")
        assert isinstance(place.jail, BwrapJail) and place.jail.init_pid is not None
        os.kill(place.jail.init_pid, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            code, _out = await _sh(place, "sleep 30", timeout_s=2)
        except JailError:  # the init did not answer: the namespace was killed from outside
            code = -9
        took = time.monotonic() - t0
        checked = await workspace.check_success(task, place.path, "", place.jail, tests=place.tests)
    finally:
        await place.close()
    assert state.startswith("refused")  # the init is non-dumpable: PTRACE_ATTACH refused
    assert code != 0
    # bound: the timeout, the init's answer bound (spawn and kill), slack for a busy machine
    assert took < 2 + READY_TIMEOUT_S + ANSWER_TIMEOUT_S + 10, f"{took:.1f} s on a 2 s timeout"
    assert False is checked["passed"]


def test_the_verdict_restores_the_tasks_tests_without_following_links(tmp_path: Path) -> None:
    """A snapshot never follows a planted link: a tests/ folder swapped for a link to a host
    folder is replaced by a real one, and the host folder is left untouched."""
    from agentloop.sandbox.verdict import fill_snapshot

    pristine = tmp_path / "pristine"
    (pristine / "tests").mkdir(parents=True)
    (pristine / "tests" / "test_x.py").write_text("real\n")
    host = tmp_path / "host"
    host.mkdir()
    (host / "keep.txt").write_text("host\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "tests").symlink_to(host)
    os.mkfifo(work / "pipe")
    snap = tmp_path / "ws"
    snap.mkdir()
    fill_snapshot(work, snap, pristine)
    assert "real\n" == (snap / "tests" / "test_x.py").read_text()
    assert not (snap / "tests").is_symlink()
    assert not (snap / "pipe").exists()
    assert ["keep.txt"] == sorted(p.name for p in host.iterdir())
