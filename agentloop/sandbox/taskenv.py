"""A task's own Python environment: a venv per task, made with uv on first use, cached by a hash.

A task's setup commands, its tools' commands (``run``, ``run_tests``) and its success check run
with the task's venv ``bin/`` first on PATH (``python``, ``pip``, ``pytest`` are the venv's) and
agentloop's own interpreter folder taken off PATH, so nothing a task installs reaches agentloop's
environment and agentloop's extras (pytest-asyncio, say) never reach the task's.

A task declares its packages with ``requirements:`` (pip requirement strings); ``pytest`` is
always added, because ``run_tests`` and the shipped checks use it. ``setup: pip install ...``
installs into the task's venv: it is made with ``--seed``, so it has its own ``pip``.

The venv lives in ``${XDG_CACHE_HOME:-~/.cache}/agentloop/taskenvs/<key>``, where the key hashes
the Python version, the requirements and the setup's install commands (what the task installs;
:mod:`agentloop.sandbox.venvcache` says precisely which lines those are): the first run creates
it (uv: about a second, packages from uv's cache), later runs reuse it, and old ones are pruned.
Creation holds a file lock, so concurrent runs of one task build it once.

Nothing persists from one run to the next: the venv is built by agentloop only, outside every
run's jail, and every run sees it read-only. Building it runs the task's install commands (and
only those) once in a jail of their own with the venv writable (so ``setup: pip install`` lands
there); a run's own setup then runs every setup line and finds the packages installed. The
ready mark lives beside the venv (``<key>.ready``, never inside it, where a run could plant it)
and holds a manifest of the venv's tree (every path's type, mode, size, mtime and link target,
read without following a link); a venv whose tree differs is removed and built anew. Two tasks
with the same requirements and install commands share one venv, read-only.

The value handed to the process runner and the jail is :class:`TaskEnv`: the venv, the folders
to put first on PATH, the variables to set, and the folder that must be writable in the jail.
While a run is set up and runs, :func:`activate` makes it the environment
:func:`agentloop.sandbox.context.scrubbed_env` builds for every task command.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path

from agentloop.config.tasks import Task
from agentloop.errors import TaskFileError
from agentloop.sandbox.jail import VERDICT_VAR
from agentloop.sandbox.venvcache import (
    Hold,
    cache_root,
    discard,
    env_key,
    hold,
    install_commands,
    prune,
    ready_mark,
    requirements_of,
)

CREATE_TIMEOUT_S = 600.0  # creating a venv and installing its packages (a first, cold run)
# the verdict's commands run with PYTHONSAFEPATH=1 (agentloop.sandbox.verdict), which keeps the working
# folder off the front of sys.path; this module (imported by the .pth at start-up) puts back, at
# the END, the working folder of `python -m` / `-c`, so the workspace's modules import but never
# shadow the venv's pytest or the standard library; a script's own folder stays first, as usual
VERDICT_PTH = "_agentloop_verdict.pth"
VERDICT_MODULE = "_agentloop_verdict.py"
VERDICT_MODULE_TEXT = f'''"""agentloop's verdict path rule (written by agentloop/sandbox/taskenv.py; see agentloop/sandbox/verdict.py)."""

import os
import sys

if os.environ.get("{VERDICT_VAR}") == "1":
    first = sys.argv[0] if sys.argv else ""
    if first in ("", "-c", "-m"):
        sys.path.append(os.getcwd())
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(first)))
'''
# an empty sitecustomize in the venv: one planted in the workspace is never imported by site
SITECUSTOMIZE = (
    "# agentloop: the task venv's own (empty) sitecustomize; see agentloop/sandbox/taskenv.py\n"
)


@dataclass(frozen=True)
class TaskEnv:
    """A task's venv, as the process runner and the jail need it.

    ``hold``: the run's hold on the venv (:func:`ensure` takes it; the pruner leaves a held venv
    alone), released when the :func:`activate` block it is given to ends."""

    venv: Path
    path_prefix: tuple[str, ...]  # first on the commands' PATH: the venv's bin/
    variables: Mapping[str, str] = field(default_factory=dict)  # VIRTUAL_ENV ...
    readonly: tuple[Path, ...] = ()  # shown read-only in the run's jail: the venv
    hold: Hold | None = field(default=None, compare=False, repr=False)

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
    """Make ``env`` the task environment for this context (and the tasks it starts); on the
    way out, the run's hold on its venv (if ``env`` carries one) is released."""
    token = _current.set(env)
    try:
        yield
    finally:
        _current.reset(token)
        if env.hold is not None:
            env.hold.release()


def env_for(venv: Path) -> TaskEnv:
    """The :class:`TaskEnv` of an existing venv folder."""
    return TaskEnv(
        venv=venv,
        path_prefix=(str(venv / "bin"),),
        variables={"VIRTUAL_ENV": str(venv)},
        readonly=(venv,),
    )


def manifest(venv: Path) -> str:
    """A digest of the venv's tree: each path's type, mode, size, mtime and link target (blocking).

    Read with ``lstat`` only: no link is followed, no file opened.
    """
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(venv):  # never descends into a link
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            link = os.readlink(path) if os.path.islink(path) else ""
            h.update(
                f"{os.path.relpath(path, venv)}\0{st.st_mode}\0{st.st_size}\0"
                f"{st.st_mtime_ns}\0{link}\n".encode(errors="surrogateescape")
            )
    return h.hexdigest()


def _intact(venv: Path) -> bool:
    """Whether the venv is as agentloop built it (blocking): its mark's manifest matches."""
    mark = ready_mark(venv)
    try:
        if not os.path.isfile(mark) or os.path.islink(mark) or os.path.islink(venv):
            return False
        return mark.read_text().split("\n", 1)[0] == manifest(venv)
    except OSError:
        return False


SetupBuild = Callable[[Task, Path], Awaitable[None]]


async def ensure(
    task: Task, root: Path | None = None, *, setup: SetupBuild | None = None
) -> TaskEnv:
    """The task's venv, created (and its requirements installed) on first use, or again when
    its tree changed since it was built; held for the run (see :class:`TaskEnv`).

    ``setup(task, venv)`` runs the task's install commands with the venv writable, once, when
    it is built (:func:`agentloop.sandbox.workspace.build_setup`). After a build, old venvs
    that no live run holds are pruned (:func:`agentloop.sandbox.venvcache.prune`).
    """
    cache = root or cache_root()
    venv = cache / env_key(task)
    await asyncio.to_thread(cache.mkdir, parents=True, exist_ok=True)
    held = await asyncio.to_thread(hold, venv)  # before the check: never pruned under us
    try:
        built = await _build_unless_intact(task, venv, setup)
    except BaseException:
        held.release()
        raise
    if built:
        await asyncio.to_thread(prune, cache)
    return replace(env_for(venv), hold=held)


async def _build_unless_intact(task: Task, venv: Path, setup: SetupBuild | None) -> bool:
    """Build the venv unless it is as built (under its build lock); whether it was built."""
    if await asyncio.to_thread(_intact, venv):
        return False
    lock = await _lock(venv.with_name(venv.name + ".lock"))
    try:
        if await asyncio.to_thread(_intact, venv):  # someone may have built it meanwhile
            return False
        await asyncio.to_thread(discard, venv)
        await _create(task, venv)
        if setup is not None and install_commands(task):
            await setup(task, venv)
        digest = await asyncio.to_thread(manifest, venv)
        await asyncio.to_thread(
            ready_mark(venv).write_text,
            digest + "\n" + "\n".join(requirements_of(task)) + "\n",
        )
        return True
    finally:
        await asyncio.to_thread(os.close, lock)  # closing the descriptor drops the lock


LOCK_POLL_S = 0.05  # how often a run waiting for another's build tries its lock again


async def _lock(path: Path) -> int:
    """The build lock, waited for without a thread: two hundred runs of one task waiting for
    its first build each blocked a thread of the default pool in ``flock``, the pool ran dry,
    and the build itself (which needs the pool) never finished."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL_S)
    except BaseException:
        os.close(fd)
        raise


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
            # wheels only: a source distribution's build backend would run on the host, outside
            # every jail (a task's setup commands, in their build jail, may still build one)
            "--no-build",
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
    site = await asyncio.to_thread(_site_packages, venv)
    await asyncio.to_thread((site / VERDICT_MODULE).write_text, VERDICT_MODULE_TEXT)
    await asyncio.to_thread((site / VERDICT_PTH).write_text, "import _agentloop_verdict\n")
    await asyncio.to_thread((site / "sitecustomize.py").write_text, SITECUSTOMIZE)


def _site_packages(venv: Path) -> Path:
    [site] = venv.glob("lib/python*/site-packages")
    return site


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
