"""Folders a run owns on the host, each beside a mark naming its owner process; swept once it is gone.

A run's working copy, the task's tests saved for its success check, a verdict's snapshot and a
Ray worker's scratch folder all live under one folder agentloop owns (``$TMPDIR/agentloop-work``,
:func:`work_root`; the saved tests beside their run's copy wherever that is), each beside a
``<folder>.owner`` file naming the owning process (pid and start time). A new run first sweeps
the folders whose owner is gone (at most once per ``SWEEP_EVERY_S`` in one process), so runs
killed with SIGKILL, which clean up nothing, leave nothing behind for long.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from agentloop.sandbox.jail import sweep_cgroups

WORK_DIR = "agentloop-work"
OWNER_SUFFIX = ".owner"
# one sweep per folder per this many seconds in one process: a sweep reads every copy's mark, so
# a thousand runs starting together (a suite) each sweeping made a million reads, 140 s of the
# thread pool before the first run's jail started
SWEEP_EVERY_S = 5.0
_last_sweep: dict[Path, float] = {}
_sweep_lock = threading.Lock()


def work_root() -> Path:
    """The one folder that holds every run's working copy."""
    return Path(tempfile.gettempdir()) / WORK_DIR


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot): with the pid, it names one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _owner_alive(marker: Path) -> bool:
    try:
        pid_s, start = marker.read_text().split()
        return _start_time(int(pid_s)) == start
    except (OSError, ValueError):
        return False


def sweep(root: Path) -> list[Path]:
    """Delete the folders under ``root`` whose owning process is gone (blocking); the folders."""
    swept = []
    with contextlib.suppress(OSError):
        for marker in root.glob("*" + OWNER_SUFFIX):
            if not _owner_alive(marker):
                folder = marker.with_suffix("")
                shutil.rmtree(folder, ignore_errors=True)
                with contextlib.suppress(OSError):
                    marker.unlink()
                swept.append(folder)
    sweep_cgroups()
    return swept


def make_owned(prefix: str, root: Path | None = None) -> Path:
    """A new, owned, empty folder under ``root`` (default :func:`work_root`; blocking), after
    sweeping abandoned ones."""
    base = root if root is not None else work_root()
    base.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # traversable, not listable: a run's own uid (jail.py)
        os.chmod(base, 0o711)
    with _sweep_lock:
        due = time.monotonic() - _last_sweep.get(base, -SWEEP_EVERY_S) >= SWEEP_EVERY_S
        if due:
            _last_sweep[base] = time.monotonic()
    if due:
        sweep(base)
    return owned_folder(prefix, base)


def owned_folder(prefix: str, base: Path) -> Path:
    """A new private folder (mode 0700) in ``base``, marked as this process's (blocking)."""
    made = Path(os.path.realpath(tempfile.mkdtemp(prefix=prefix, dir=base)))
    # written aside and renamed: a concurrent run's sweep (another thread) must never read a
    # half-written mark, take the owner for dead and delete this live folder
    tmp = made.with_name(made.name + ".owner-new")
    tmp.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
    tmp.replace(made.with_name(made.name + OWNER_SUFFIX))
    return made


def remove(folder: Path) -> None:
    """Delete an owned folder and its mark (blocking; call via ``asyncio.to_thread``)."""
    shutil.rmtree(folder, ignore_errors=True)
    disown(folder)


def disown(folder: Path) -> None:
    """Drop an owned folder's mark: it is the user's now, never swept (blocking)."""
    with contextlib.suppress(OSError):
        folder.with_name(folder.name + OWNER_SUFFIX).unlink()
