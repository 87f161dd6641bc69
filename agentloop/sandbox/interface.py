"""The jail interface: what a run's jail is asked for, the Jail every command runs in, its Command.

:class:`JailSpec` (with its :class:`JailLimits`) says what a run's jail shows and holds;
:class:`Jail` runs the run's commands and builds each one's environment (the task's PATH head,
the command's mark that tells its processes apart, a verdict's path rule); a :class:`Command` is
one of them running. The implementations: :class:`agentloop.sandbox.bwrapjail.BwrapJail`
(bubblewrap) and :class:`agentloop.sandbox.jail.HostJail` (none, stated);
:func:`agentloop.sandbox.jail.open_jail` picks one.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentloop.errors import AgentloopError
from agentloop.sandbox import _init
from agentloop.sandbox.closer import JailCloser

MARK_VAR = _init.MARK_VAR
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

    async def aclose(self, closer: JailCloser | None = None) -> None:
        """End the jail: every process of the run dies (with a suite's ``closer``, the emptied
        jail's teardown may be left to it: :mod:`agentloop.sandbox.closer`)."""
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
