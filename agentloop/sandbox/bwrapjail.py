"""The bubblewrap jail: one ``bwrap`` per run, its init asked over a socket to start and kill commands.

:class:`BwrapJail` starts ``bwrap`` (the command line is :mod:`agentloop.sandbox.bwrap`'s, the
ceilings :mod:`agentloop.sandbox.cgroups`') with the init (:mod:`agentloop.sandbox._init`) as
PID 1 of the jail's namespace, and speaks the init's protocol over a ``SOCK_SEQPACKET`` pair:
one JSON request a packet (``spawn`` with the command's three descriptors attached, ``kill``,
``alive``, ``empty``), one answer each, and an ``exit`` event per command. An init that does not
answer within its time (stopped or traced by a command) is killed from the host, and with it
everything in its namespace. Closing the socket ends the init: the kernel kills what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentloop.log import get_logger
from agentloop.sandbox import bwrap, cgroups
from agentloop.sandbox.closer import JailCloser
from agentloop.sandbox.interface import Command, Jail, JailError, JailSpec

FORK_REFUSED = "fork: retry: Resource temporarily unavailable"  # bash, on EAGAIN from fork
NPROC_MARGIN = 16  # processes of the run outside the command (setup services, the init)
READY_TIMEOUT_S = 10.0
EXIT_POLL_S = 0.005  # how often a closing jail's bwrap is checked for its end
ANSWER_TIMEOUT_S = 10.0  # an init that does not answer a kill or a question by then is killed

T = TypeVar("T")


async def _whole(work: Awaitable[T]) -> T:
    """Await ``work`` (a thread's) to its end: a cancel that lands meanwhile is raised once it
    has ended. A thread cannot be stopped; what it makes (a cgroup, a started bwrap) it keeps
    on the jail, whose close then undoes it, where a cancel raised at once would leave it behind."""
    fut = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not fut.done():
        try:
            await asyncio.wait([fut])
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not fut.cancelled():
            fut.exception()  # retrieved: the cancel is what is raised
        raise cancelled
    return fut.result()


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
        self.proc: subprocess.Popen[bytes] | None = None  # started off the loop (_launch)
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

    async def start(self, exe: str) -> None:
        """Start bwrap and its init; raises JailError when either fails."""
        self.exe = exe
        name = f"r-{os.getpid()}-{self.run_mark}"
        if self.spec.use_cgroups:
            await _whole(asyncio.to_thread(self._make_cgroups, name))
        if "pids" not in self.holds:  # RLIMIT_NPROC binds only a uid other than 0
            self.run_uid = cgroups.run_uid()
            await asyncio.to_thread(
                cgroups.give_to,
                self.run_uid,
                (self.spec.workspace_src or self.spec.workspace, *self.spec.writable),
            )
        await self._launch(exe)
        assert self.proc is not None
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

    def _make_cgroups(self, name: str) -> None:
        """The run's cgroups, kept on the jail as soon as made (blocking: run on a thread)."""
        self.cgroups, self.holds = cgroups.make_cgroups(name, self.spec.limits)

    async def _launch(self, exe: str) -> None:
        """Exec bwrap (behind its launcher) with one end of the init's socket; keep the other.

        The command line and the exec run on a thread (issue 28): the host's view is read from
        the filesystem (``/etc`` walked once, the interpreter's folders resolved each time) and
        ``Popen`` blocks its caller until the child has exec'd, which under load waits for the
        child to be scheduled; on the loop, every stream it times would read late. A cancel
        meanwhile waits for the thread (:func:`_whole`), so the bwrap it started is in ``proc``
        for the close to end and reap, and the socket's other end stays open while it is passed."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            await _whole(asyncio.to_thread(self._exec, exe, child.fileno()))
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.sock = parent
        parent.setblocking(False)
        asyncio.get_running_loop().add_reader(parent.fileno(), self._on_readable)

    def _exec(self, exe: str, fd: int) -> None:
        """bwrap's command line, and bwrap started with it, kept in ``proc`` (blocking: run on a
        thread)."""
        args = bwrap.argv(
            self.spec,
            exe,
            fd,
            drops_uid=self.run_uid is not None,
            joins_netns=self.netns_fd is not None,
        )
        argv, keep = bwrap.launcher(args, fd, netns_fd=self.netns_fd, cgroups=self.cgroups)
        self.proc = subprocess.Popen(
            argv,
            pass_fds=keep,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": os.defpath},
        )
        assert self.proc.stderr is not None
        os.set_blocking(self.proc.stderr.fileno(), False)  # read by stderr_head, never waited on

    async def stderr_head(self, limit: int = 2000, wait_s: float = 1.0) -> bytes:
        """What a failed bwrap wrote on stderr (up to ``limit`` bytes), waiting ``wait_s`` at
        most for its end: a failed start's reason."""
        if self.proc is None or self.proc.stderr is None:
            return b""
        fd, got, end = self.proc.stderr.fileno(), b"", time.monotonic() + wait_s
        while len(got) < limit and time.monotonic() < end:
            try:
                chunk = os.read(fd, limit - len(got))
            except BlockingIOError:
                await asyncio.sleep(EXIT_POLL_S)
                continue
            if not chunk:
                break
            got += chunk
        return got

    async def _wait_exit(self, timeout_s: float) -> bool:
        """Wait for bwrap's end (reaped, never blocking the loop); False if it outlived
        ``timeout_s``."""
        assert self.proc is not None
        end = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            if time.monotonic() >= end:
                return False
            await asyncio.sleep(EXIT_POLL_S)
        return True

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
        data = json.dumps(msg).encode()
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except OSError as exc:  # the init is gone (Ctrl-C reaches it too): no answer will come
            raise JailError(f"the run's jail is gone (its init's socket: {exc})") from None
        # waited for once sent (the answer is read on this loop, so it cannot come sooner): a
        # failed send leaves no waiter behind for the init's death to fail unread
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[(reply, msg["id"])] = fut
        try:
            async with asyncio.timeout(READY_TIMEOUT_S if reply == "started" else ANSWER_TIMEOUT_S):
                return await fut
        except TimeoutError:
            # a stopped or traced init would stretch every limit: the limits hold from outside
            self._waiters.pop((reply, msg["id"]), None)
            why = "the jail's init stopped answering (stopped or traced by a command?)"
            await self._kill_namespace(why)
            raise JailError(f"the run's jail was killed: {why}") from None
        finally:
            # Ctrl-C reaches the init too: it can die (failing this answer) in the same loop turn
            # as this task is cancelled, which then never reads the failure; read here, so no
            # "Future exception was never retrieved" is printed at exit
            if fut.done() and not fut.cancelled():
                fut.exception()

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

    async def aclose(self, closer: JailCloser | None = None) -> None:
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
            if not await self._wait_exit(5.0):
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self._wait_exit(5.0)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
        for _ in range(50):  # the namespace's processes leave the cgroup as the kernel reaps them
            await asyncio.to_thread(cgroups.remove_cgroups, self.cgroups)
            if not any(p.exists() for p in self.cgroups):
                break
            await asyncio.sleep(0.02)
