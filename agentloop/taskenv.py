"""A task's own Python environment: a venv per task, made with uv on first use, cached by a hash.

A task's setup commands, its tools' commands (``run``, ``run_tests``) and its success check run
with the task's venv ``bin/`` first on PATH (``python``, ``pip``, ``pytest`` are the venv's) and
agentloop's own interpreter folder taken off PATH, so nothing a task installs reaches agentloop's
environment and agentloop's extras (pytest-asyncio, say) never reach the task's.

A task declares its packages with ``requirements:`` (pip requirement strings); ``pytest`` is
always added, because ``run_tests`` and the shipped checks use it. ``setup: pip install ...``
installs into the task's venv: it is made with ``--seed``, so it has its own ``pip``.

The venv lives in ``${XDG_CACHE_HOME:-~/.cache}/agentloop/taskenvs/<key>``, where the key hashes
the Python version, the requirements and the setup commands (what the task installs): the first
run creates it (uv: about a second, packages from uv's cache), later runs reuse it. Creation
holds a file lock, so concurrent runs of one task build it once.

The value handed to the process runner and the jail is :class:`TaskEnv`: the venv, the folders
to put first on PATH, the variables to set, and the folder that must be writable in the jail.
While a run is set up and runs, :func:`activate` makes it the environment
:func:`agentloop.context.scrubbed_env` builds for every task command.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from agentloop.errors import TaskFileError
from agentloop.tasks import Task

ALWAYS = ("pytest",)  # in every task venv: run_tests and the shipped checks run pytest
CREATE_TIMEOUT_S = 600.0  # creating a venv and installing its packages (a first, cold run)
_READY = ".agentloop-ready"


@dataclass(frozen=True)
class TaskEnv:
    """A task's venv, as the process runner and the jail need it."""

    venv: Path
    path_prefix: tuple[str, ...]  # first on the commands' PATH: the venv's bin/
    variables: Mapping[str, str] = field(default_factory=dict)  # VIRTUAL_ENV ...
    writable: tuple[Path, ...] = ()  # writable inside the jail (setup's pip installs here)

    def apply(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` for a task command: the venv first on PATH, agentloop's interpreter off it."""
        ours = {os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))}
        old_venv = env.get("VIRTUAL_ENV")
        if old_venv:
            ours.add(os.path.join(old_venv, "bin"))
        rest = [
            p
            for p in env.get("PATH", os.defpath).split(os.pathsep)
            if p and p not in ours and p not in self.path_prefix
        ]
        out = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        out.update(self.variables)
        out["PATH"] = os.pathsep.join([*self.path_prefix, *rest])
        return out


_current: ContextVar[TaskEnv | None] = ContextVar("agentloop_task_env", default=None)


def current() -> TaskEnv | None:
    """The task environment of the run being set up or run in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def activate(env: TaskEnv) -> Iterator[None]:
    """Make ``env`` the task environment for this context (and the tasks it starts)."""
    token = _current.set(env)
    try:
        yield
    finally:
        _current.reset(token)


def requirements_of(task: Task) -> tuple[str, ...]:
    """What the task's venv gets installed: ``pytest`` and the task's ``requirements``."""
    reqs = [*ALWAYS, *task.requirements]
    return tuple(dict.fromkeys(r.strip() for r in reqs if r.strip()))


def env_key(task: Task) -> str:
    """The cache key: Python version, requirements and setup commands (what the task installs)."""
    h = hashlib.sha256()
    for part in (
        sys.version,
        os.path.realpath(sys.executable),
        *sorted(requirements_of(task)),
        "--setup--",
        *task.setup,
    ):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentloop" / "taskenvs"


def env_for(venv: Path) -> TaskEnv:
    """The :class:`TaskEnv` of an existing venv folder."""
    return TaskEnv(
        venv=venv,
        path_prefix=(str(venv / "bin"),),
        variables={"VIRTUAL_ENV": str(venv)},
        writable=(venv,),
    )


async def ensure(task: Task, root: Path | None = None) -> TaskEnv:
    """The task's venv, created (and its requirements installed) on first use."""
    venv = (root or cache_root()) / env_key(task)
    if not (venv / _READY).is_file():
        await asyncio.to_thread(venv.parent.mkdir, parents=True, exist_ok=True)
        lock = await asyncio.to_thread(_lock, venv.with_name(venv.name + ".lock"))
        try:
            if not (venv / _READY).is_file():  # someone else may have built it meanwhile
                await _create(task, venv)
        finally:
            await asyncio.to_thread(os.close, lock)  # closing the descriptor drops the lock
    return env_for(venv)


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


async def _create(task: Task, venv: Path) -> None:
    from uv import find_uv_bin

    uv = find_uv_bin()
    python = sys.executable
    steps: Sequence[Sequence[str]] = (
        (uv, "venv", "--seed", "--quiet", "--allow-existing", "--python", python, str(venv)),
        (
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            *requirements_of(task),
        ),
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    for argv in steps:
        code, out = await _run(argv, env)
        if code != 0:
            tail = " | ".join(out.strip().splitlines()[-5:])
            raise TaskFileError(
                task.source or task.name,
                f"could not create the task's Python environment in {venv} "
                f"(`{' '.join(argv[1:3])}` exited {code}): {tail}",
                field="requirements",
            )
    await asyncio.to_thread((venv / _READY).write_text, "\n".join(requirements_of(task)) + "\n")


async def _run(argv: Sequence[str], env: dict[str, str]) -> tuple[int, str]:
    """uv runs on the host (it builds the venv the jail will mount), not as a task command."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(CREATE_TIMEOUT_S):
            out, _ = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode("utf-8", "replace")
