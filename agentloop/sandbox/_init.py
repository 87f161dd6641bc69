"""The jail's init: PID 1 of a run's PID namespace, spawning each task command on request.

Started by :mod:`agentloop.sandbox.bwrapjail` as ``python -I -S /.agentloop/init.py FD`` inside bubblewrap
(``--as-pid-1``), it imports nothing but the standard library. ``FD`` is one end of a
``SOCK_SEQPACKET`` socket pair; the other end stays with agentloop. Messages are JSON, one per
packet:

- agentloop -> init: ``{"op": "spawn", "id", "argv", "cwd", "env", "rlimits", "uid"}`` (``uid``:
  the unprivileged uid to run as when no cgroup limits processes, else null) with three file
  descriptors attached (stdin, stdout, stderr); ``{"op": "kill", "id"}``: SIGKILL the command and
  everything it started that can still be told apart (its group, its session, its descendants,
  every process carrying its mark in the environment), repeated until none is left;
  ``{"op": "alive", "id"}``: whether any of those is still alive; ``{"op": "empty", "id"}``:
  SIGKILL every other process of the namespace (a suite's run has ended: its jail is torn down
  later, :mod:`agentloop.sandbox.closer`).
- init -> agentloop: ``{"ev": "started", "id", "pid"}`` (or ``{"ev": "failed", "id", "error"}``),
  ``{"ev": "exit", "id", "code"}`` (negative: killed by that signal), ``{"ev": "alive", "id",
  "alive"}``, ``{"ev": "killed", "id", "left", "peak"}`` (``peak``: most processes found alive),
  ``{"ev": "emptied", "id", "left"}``.

It makes itself non-dumpable first, so no command can trace it or take its socket. As PID 1 it
reaps every orphan (no zombies), and signals from inside the namespace that it does not handle
never reach it (``kill -STOP 1`` / ``kill -9 1`` from a command do nothing). When the
socket closes (agentloop ended or closed the jail) it exits, and the kernel kills everything
left in the namespace. The process-table helpers here are also what :mod:`agentloop.sandbox.proc` uses
to kill a command's processes when no jail can be had (one owner for "which processes are a
command's").
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time
from typing import Any

MARK_VAR = "AGENTLOOP_CMD"  # every command's processes inherit it: how orphans are found
MAX_FDS = 3


def proc_table() -> list[tuple[int, int, int, int]]:
    """(pid, ppid, pgrp, session) of every live (not zombie) process, from /proc."""
    rows: list[tuple[int, int, int, int]] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return rows
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
        except OSError:
            continue  # gone meanwhile
        fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ')'
        if len(fields) >= 4 and fields[0] not in ("Z", "X"):
            rows.append((int(name), int(fields[1]), int(fields[2]), int(fields[3])))
    return rows


def marked(pids: list[int], mark: str) -> set[int]:
    """The pids among ``pids`` whose environment carries ``MARK_VAR=mark...`` (prefix match)."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if any(item.startswith(needle) for item in env.split(b"\0")):
            found.add(pid)
    return found


def members(leader: int, mark: str | None, leader_alive: bool) -> set[int]:
    """Live processes of the command led by ``leader`` (its own session and group).

    Once the leader is reaped its pid may be reused, so group and session ids are trusted only
    while it lives (or while no other process holds its number); the mark always is.
    """
    table = proc_table()
    found: set[int] = set()
    reused = not leader_alive and os.path.exists(f"/proc/{leader}")
    if not reused:
        children: dict[int, list[int]] = {}
        for pid, ppid, pgrp, session in table:
            children.setdefault(ppid, []).append(pid)
            if pgrp == leader or session == leader:
                found.add(pid)
        todo = [leader] if leader_alive else []
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    if mark:
        found |= marked([pid for pid, *_ in table], mark)
    found.discard(os.getpid())
    return found


def kill_members(
    leader: int, mark: str | None, leader_alive: bool, rounds: int = 60
) -> tuple[int, int]:
    """SIGKILL the command's processes until none is left (a fork loop keeps making more).

    Returns (how many were still found after the last round: 0 when all are gone, the most
    found in one round).
    """
    left = peak = 0
    for _ in range(rounds):
        if leader_alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(leader, signal.SIGKILL)
        found = members(leader, mark, leader_alive)
        left = len(found)
        peak = max(peak, left)
        if not found:
            return 0, peak
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
        leader_alive = False  # after the first SIGKILL the group id is only trusted via /proc
        reap()
    return left, peak


_exits: dict[int, int] = {}


def reap() -> None:
    """Collect every exited child (PID 1 inherits the namespace's orphans); keep leaders' codes."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _exits[pid] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def empty(rounds: int = 200) -> int:
    """SIGKILL every other process of the namespace until none is left; how many were still
    there after the last round (0: the namespace holds only us; -1: refused, see below).

    Only as PID 1 of its own PID namespace, where ``kill(-1)`` reaches every process of the
    namespace but the caller and nothing outside it; anywhere else it would reach the host's.
    """
    if os.getpid() != 1:
        return -1
    for _ in range(rounds):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return 0  # no process left to signal
        time.sleep(0.002)
        reap()
    return len([p for p in os.listdir("/proc") if p.isdigit() and p != "1"])


_LIMITS = {
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "core": resource.RLIMIT_CORE,
    "nofile": resource.RLIMIT_NOFILE,
}


def spawn(msg: dict[str, Any], fds: list[int]) -> int:
    """Fork and exec one command in a new session with its limits; its pid."""
    argv, cwd, env = msg["argv"], msg["cwd"], msg["env"]
    limits = msg.get("rlimits") or {}
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.closerange(3, 65536)
            for name, value in limits.items():
                resource.setrlimit(_LIMITS[name], (value, value))
            uid = msg.get("uid")
            if uid is not None:  # last: RLIMIT_NPROC now binds, and every capability is gone
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.write(2, f"agentloop jail: cannot start {argv[0]}: {exc}\n".encode())
        os._exit(127)
    return pid


PR_SET_DUMPABLE = 4


def undumpable() -> None:
    """Make this process non-dumpable: a process of the jail (the same uid, no capability) can
    then neither trace it nor take its descriptors (ptrace, ``pidfd_getfd``, ``/proc/1/fd``), so
    its control socket stays agentloop's. A command it starts is dumpable again from its exec,
    and by then the socket is closed in it."""
    import ctypes  # here, not at the top: agentloop.sandbox.proc imports this module's helpers

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


class _Server:
    """The init's side of the protocol: the commands it started, and its answers to agentloop."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.leaders: dict[int, tuple[int, str]] = {}  # pid -> (request id, mark)
        self.by_id: dict[int, tuple[int, str]] = {}  # request id -> (pid, mark)

    def send(self, **ev: object) -> None:
        with contextlib.suppress(OSError):
            self.sock.setblocking(True)
            self.sock.send(json.dumps(ev).encode())
            self.sock.setblocking(False)

    def report_exits(self) -> None:
        reap()
        for pid in [p for p in _exits if p in self.leaders]:
            rid, _ = self.leaders.pop(pid)
            self.send(ev="exit", id=rid, code=_exits.pop(pid))
        _exits.clear()

    def spawn(self, msg: dict[str, Any], rid: Any, fds: list[int]) -> None:
        mark = msg["env"].get(MARK_VAR, "")
        try:
            pid = spawn(msg, fds)
        except OSError as exc:  # out of processes (the cgroup limit), say
            self.send(ev="failed", id=rid, error=str(exc))
        else:
            self.leaders[pid] = (rid, mark)
            self.by_id[rid] = (pid, mark)
            self.send(ev="started", id=rid, pid=pid)
        finally:
            for fd in fds:
                os.close(fd)
        self.report_exits()

    def handle(self, msg: dict[str, Any], fds: list[int]) -> None:
        """Answer one request (a request about an unknown command is dropped)."""
        rid = msg.get("id")
        if msg["op"] == "spawn":
            self.spawn(msg, rid, fds)
        elif msg["op"] == "kill" and rid in self.by_id:
            pid, mark = self.by_id[rid]
            left, peak = kill_members(pid, mark, pid in self.leaders)
            self.report_exits()
            self.send(ev="killed", id=rid, left=left, peak=peak)
        elif msg["op"] == "alive" and rid in self.by_id:
            pid, mark = self.by_id[rid]
            reap()
            self.send(ev="alive", id=rid, alive=bool(members(pid, mark, pid in self.leaders)))
            self.report_exits()
        elif msg["op"] == "empty":
            left = empty()
            self.report_exits()
            self.send(ev="emptied", id=rid, left=left)
        elif msg["op"] == "forget" and rid in self.by_id:
            del self.by_id[rid]


def main() -> None:
    undumpable()
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(False)
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only agentloop ends the jail, by closing the socket
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(rfd, selectors.EVENT_READ)
    server = _Server(sock)
    while True:
        for key, _ in sel.select():
            if key.fileobj == rfd:
                with contextlib.suppress(BlockingIOError):
                    os.read(rfd, 512)
                server.report_exits()
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, MAX_FDS)
            except BlockingIOError:
                continue
            except OSError:
                data, fds = b"", []
            if not data:
                return  # agentloop is gone or closed the jail: the namespace dies with us
            server.handle(json.loads(data), fds)


if __name__ == "__main__":
    main()
