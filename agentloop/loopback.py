"""This machine's loopback as agentloop sees it: which hosts are loopback, which ports are its own.

One rule for which hosts are loopback (the browser's network limit and ``serve``), and the
registry of the loopback ports agentloop itself listens on, which the browser tool refuses: the
service's (``agentloop serve``: registering fails the start when the folder is not ours), the
simulator's and the local tier's llama-server's (best effort: they serve even so).

A port is registered, for as long as its listener lives, as a file named after it in a folder
only this user can write (``$XDG_RUNTIME_DIR/agentloop-ports``, else
``/tmp/agentloop-ports-UID``; mode 0700, checked to be ours and not a symlink), holding the
owner's pid; a file whose pid is gone is stale: ignored, and removed by the next registration
(entries are written, removed and swept under a lock, ``.lock`` in the folder, so a sweep never
removes a port registered again meanwhile). Files rather than a set in memory,
because the browser of a run in another agentloop process (a CLI run beside an ``agentloop
serve``) must know the port too. ``/tmp`` rather than ``$TMPDIR``: processes with different
``TMPDIR`` values still agree on the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from agentloop.errors import ConfigError


def is_loopback(host: str) -> bool:
    """``localhost`` (and ``*.localhost``) or a loopback IP, brackets and a trailing dot allowed."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ports_dir() -> Path:
    """The registry folder (not created)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "agentloop-ports"
    return Path(f"/tmp/agentloop-ports-{os.getuid()}")


def _trusted(folder: Path) -> bool:
    try:
        st = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & stat.S_IWOTH


@contextlib.contextmanager
def registered(port: int) -> Iterator[None]:
    """Hold ``port`` in the registry while the block runs."""
    folder = ports_dir()
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700, parents=False)
    if not _trusted(folder):
        raise ConfigError(
            f"{folder} (agentloop's registry of its own ports) is not a folder of this user's: "
            "remove it, or set XDG_RUNTIME_DIR to a private folder"
        )
    entry = folder / str(int(port))
    with _locked(folder):
        _sweep(folder)
        entry.write_text(str(os.getpid()))
    try:
        yield
    finally:
        with contextlib.suppress(OSError), _locked(folder):
            if entry.read_text() == str(os.getpid()):  # not another listener's since
                entry.unlink()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """The registry's lock held (``flock`` on ``.lock`` in it): one writer at a time."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _sweep(folder: Path) -> None:
    """Remove the entries whose process is gone (under the lock: none is being written)."""
    for entry, _, alive in _entries(folder):
        if not alive:
            with contextlib.suppress(OSError):
                entry.unlink()


def _entries(folder: Path) -> list[tuple[Path, int, bool]]:
    """The registry's entries (a port's file, its port, whether the process it names is
    alive; one that cannot be read or is not a port's left out)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            with contextlib.suppress(OSError, ValueError):
                if entry.name.isdigit():
                    found.append((entry, int(entry.name), _alive(int(entry.read_text()))))
    return found


def _alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negatives name process groups to os.kill
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def own_ports() -> frozenset[int]:
    """The ports a live agentloop process has registered."""
    folder = ports_dir()
    if not _trusted(folder):
        return frozenset()
    return frozenset(port for _, port, alive in _entries(folder) if alive)
