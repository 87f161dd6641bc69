"""A run's ceilings held from outside its processes: its cgroups, or a uid of its own without one.

Where ``/sys/fs/cgroup`` is writable (v2, or v1's ``pids`` and ``memory`` hierarchies) each run
gets a cgroup ``agentloop/r-<pid>-<mark>`` under agentloop's own, with ``pids.max`` (a fork bomb
stops there) and a memory ceiling; bwrap's launcher moves itself into it before it becomes
bwrap (:func:`agentloop.sandbox.bwrap.launcher`). The folders are removed when the jail closes,
and :func:`sweep_cgroups` removes the ones killed runs left. Without a pids cgroup, the run's
commands drop to an unprivileged uid of their own (:func:`run_uid`; the kernel applies
RLIMIT_NPROC to any uid but 0), and the folders they must write are given to it
(:func:`give_to`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from agentloop.sandbox.interface import JailLimits

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_DIR = "agentloop"  # the one cgroup folder agentloop owns under each hierarchy
# without a pids cgroup, commands run as an unprivileged uid of their own so RLIMIT_NPROC binds
# (the kernel never applies it to uid 0): one uid per run, from a range no account uses
RUN_UID_BASE, RUN_UID_SPAN = 200_000, 800_000


def run_uid() -> int:
    """A fresh uid for one run's commands, from the range no account uses."""
    return RUN_UID_BASE + int.from_bytes(os.urandom(4)) % RUN_UID_SPAN


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
