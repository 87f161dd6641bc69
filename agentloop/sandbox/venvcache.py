"""The task-venv cache: what a venv's key covers, which venvs live runs hold, and pruning the rest.

A task venv lives in ``cache_root()/<key>``. The key (:func:`env_key`) hashes what decides the
venv's contents and nothing else: the Python agentloop runs on (version and interpreter path),
the requirements (``pytest`` and the task's ``requirements:``) and the task's **install
commands**, the setup lines that install into the venv (:func:`is_install_command`): a line
that runs pip (``pip``, ``pip3``, ``pip3.12``, a path to one such as ``$VIRTUAL_ENV/bin/pip``,
``python -m pip``, ``uv pip``) with ``install`` or ``sync`` among pip's arguments. Only those
lines build the venv (:func:`agentloop.sandbox.taskenv.ensure`), each whole (``cd pkg && pip
install .`` is one), so a setup line that starts a service, writes a date or names a path that
changes per run does not make a venv of its own. A file an install needs comes with the
workspace or is made on the install line itself (``python mkwheel.py && pip install dist/*``);
another setup line's output does not exist yet when the venv is built. pip must be a word of the
line itself: an install inside a script (``bash install.sh``, ``bash -c '...'``) is not seen, and
fails loudly at run time, where the venv is read-only.

A run holds its venv from :func:`hold` (a shared ``flock`` on ``<key>.use``, taken before the
venv is checked or built, and its mtime: the venv's last use) until the run ends; the kernel
drops it if the process dies. :func:`prune`, run after a new venv is built, removes the venvs
past the ``KEEP_VENVS`` most recently used, and any unused for ``PRUNE_AFTER_S``, except those
held: it takes the ``.use`` lock exclusively without waiting, and a held venv refuses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

from agentloop.config.tasks import Task

ALWAYS = ("pytest",)  # in every task venv: run_tests and the shipped checks run pytest
KEEP_VENVS = 16  # the most recently used task venvs are kept, however old
PRUNE_AFTER_S = 14 * 86400.0  # past those, a venv unused this long is removed
KEY = re.compile(r"[0-9a-f]{16}")  # a venv folder's name: env_key's digest
PIP = re.compile(r"pip(\d+(\.\d+)*)?")  # pip, pip3, pip3.12 (a path's last part)
PIP_VERBS = ("install", "sync")
SHELL_OPS = frozenset(("&&", "||", ";", "|", "&", "(", ")", ";;", "|&"))


def requirements_of(task: Task) -> tuple[str, ...]:
    """What the task's venv gets installed: ``pytest`` and the task's ``requirements``."""
    reqs = [*ALWAYS, *task.requirements]
    return tuple(dict.fromkeys(r.strip() for r in reqs if r.strip()))


def is_install_command(line: str) -> bool:
    """Whether a setup line installs into the venv: it runs pip with ``install`` or ``sync``
    among pip's arguments (up to the next shell operator). A line the shell's quoting rules
    cannot split counts as one (so it is hashed and runs at build time, never silently left
    out)."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return True
    for i, word in enumerate(words):
        if PIP.fullmatch(word.rsplit("/", 1)[-1]):
            args = []
            for arg in words[i + 1 :]:
                if arg in SHELL_OPS:
                    break
                args.append(arg)
            if any(verb in args for verb in PIP_VERBS):
                return True
    return False


def install_commands(task: Task) -> tuple[int, ...]:
    """The indexes of the task's setup lines that are install commands, in order."""
    return tuple(i for i, line in enumerate(task.setup) if is_install_command(line))


def env_key(task: Task) -> str:
    """The cache key: the Python version and interpreter, the requirements, the install
    commands (what decides the venv's contents; see the module docstring)."""
    h = hashlib.sha256()
    for part in (
        sys.version,
        os.path.realpath(sys.executable),
        *sorted(requirements_of(task)),
        "--setup--",
        *(task.setup[i] for i in install_commands(task)),
    ):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentloop" / "taskenvs"


def ready_mark(venv: Path) -> Path:
    """The venv's ready mark, beside it (never inside it, where a run could plant one)."""
    return venv.with_name(venv.name + ".ready")


def _use_file(venv: Path) -> Path:
    return venv.with_name(venv.name + ".use")


def discard(venv: Path) -> None:
    """Remove a venv (and its mark); a link in its place is unlinked, never followed."""
    with contextlib.suppress(FileNotFoundError):
        ready_mark(venv).unlink()
    if os.path.islink(venv) or os.path.isfile(venv):
        os.unlink(venv)
    elif os.path.isdir(venv):
        shutil.rmtree(venv)


class Hold:
    """A live run's shared lock on its venv's ``.use`` file: the pruner leaves the venv alone."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        """Let the venv go (closing the descriptor drops the lock); a second call does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (the pruner removes ``.use`` files)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def hold(venv: Path) -> Hold:
    """Hold ``venv`` for a run (blocking while a pruner is removing it), and mark its use."""
    path = _use_file(venv)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _same_file(fd, path):
            os.utime(fd)  # the venv's last use
            return Hold(fd)
        os.close(fd)  # pruned meanwhile: hold the file made anew


def last_used(venv: Path) -> float:
    """When a run last took the venv (its ``.use`` file's mtime; a venv from before holds
    were kept: its ready mark's, else its own)."""
    for path in (_use_file(venv), ready_mark(venv), venv):
        with contextlib.suppress(OSError):
            return os.stat(path, follow_symlinks=False).st_mtime
    return 0.0


def _remove_unheld(venv: Path) -> bool:
    """Remove the venv, its mark and lock files unless a run holds it; whether it went."""
    path = _use_file(venv)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live run holds it (or is building it)
        if not _same_file(fd, path):
            return False
        discard(venv)
        with contextlib.suppress(FileNotFoundError):
            venv.with_name(venv.name + ".lock").unlink()
        path.unlink()  # last: a run waiting on it finds it gone and makes a new one
        return True
    finally:
        os.close(fd)


def prune(root: Path, *, keep: int = KEEP_VENVS, max_age_s: float = PRUNE_AFTER_S) -> list[Path]:
    """Remove the task venvs under ``root`` past the ``keep`` most recently used or unused for
    ``max_age_s``, except the ones live runs hold (blocking); the venvs removed."""
    try:
        found = [Path(e.path) for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    venvs = sorted((p for p in found if KEY.fullmatch(p.name)), key=last_used, reverse=True)
    now = time.time()
    removed = []
    for rank, venv in enumerate(venvs):
        if rank < keep and now - last_used(venv) < max_age_s:
            continue
        with contextlib.suppress(OSError):  # one venv failing to go never stops the rest
            if _remove_unheld(venv):
                removed.append(venv)
    return removed
