"""What of the host a jail shows: an allow-list of system folders, read-only, and nothing else.

A jail's root is bubblewrap's empty tmpfs. Into it go, read-only, only what programs need to
start and run: the system folders (``/usr`` and the merged-usr links ``/bin``, ``/lib`` ...),
``/etc`` less every file or folder that only root may read (``shadow``, ``ssl/private`` ...:
covered by an empty one), the Python agentloop runs on (the task venv's interpreter), and the
jail's init script at a fixed path. Then, by :mod:`agentloop.sandbox.jail`, the task's venv (read-only),
the workspace, a private ``/tmp`` and ``/var/tmp``, ``/proc`` and ``/dev``.

Not shown: ``/home``, ``/root`` (beyond the interpreter when it lives there, as pyenv's does),
``/run`` (the host's sockets), ``/var``, ``/srv``, ``/opt``, ``/mnt``, ``/media``, ``/sys``, other
runs' working copies wherever ``TMPDIR`` puts them, agentloop's checkout and its config files.
"""

from __future__ import annotations

import os
import stat
import sys
from functools import cache
from pathlib import Path

from agentloop.sandbox import _init

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
INIT_AT = "/.agentloop/init.py"  # where the init script is bound inside every jail
ETC_WALK_DEPTH = 3  # how deep /etc is searched for root-only files


@cache  # the host's folders do not change under a running agentloop; read once per process
def _etc_hidden() -> tuple[tuple[str, bool], ...]:
    """(path, is_folder) of everything under /etc that other users may not read."""
    hidden: list[tuple[str, bool]] = []
    top = Path("/etc")
    for dirpath, dirnames, filenames in os.walk(top):  # never descends into a link
        deeper = len(Path(dirpath).relative_to(top).parts) + 1 < ETC_WALK_DEPTH
        keep = []
        for name, is_folder in [(d, True) for d in dirnames] + [(f, False) for f in filenames]:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode) or not (is_folder or stat.S_ISREG(st.st_mode)):
                continue  # a link shows what it points at, which is covered where it is
            if not st.st_mode & 0o004:
                hidden.append((path, is_folder))
            elif is_folder and deeper:
                keep.append(name)
        dirnames[:] = keep
    return tuple(hidden)


def python_folders() -> list[Path]:
    """The interpreter's folders (base prefix, venv prefix, executable's folder), resolved."""
    found: list[Path] = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        path = Path(p).resolve()
        if not any(path.is_relative_to(s) for s in SYSTEM) and path not in found:
            found.append(path)
    return [p for p in found if not any(p != q and p.is_relative_to(q) for q in found)]


def host_args() -> list[str]:
    """bwrap arguments laying the host's allow-list into the jail's empty root (read-only)."""
    args: list[str] = []
    for folder in SYSTEM:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    args += ["--ro-bind", "/etc", "/etc"]
    for path, is_folder in _etc_hidden():
        args += ["--tmpfs", path] if is_folder else ["--ro-bind", "/dev/null", path]
    args += ["--ro-bind", str(Path(_init.__file__).resolve()), INIT_AT]
    return args
