"""Race-free file access inside the workspace: every path walked from the workspace's descriptor.

:func:`agentloop_tools._sandbox.resolve_path` checks a path when a tool call starts and gives a
resolved path with no symlinks in it. The functions here then reach that path again without
trusting the check: each component is opened relative to its parent's descriptor with
``O_NOFOLLOW | O_DIRECTORY``, so a component swapped for a symlink meanwhile makes the open fail
instead of leading out. The file itself is opened ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO can never
block the open) and checked on its descriptor before a byte is read: a regular file with one link
(a hardlink to a file outside the workspace shares its inode, so multiply-linked files are
refused). Writes go to a temporary file in the same directory, renamed over the target.
:func:`walk` lists folders the same way (each opened ``O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK``,
entries typed from the folder listing itself), so FIFOs, devices and sockets are counted and
skipped without ever being opened.

All of these block; call them through ``asyncio.to_thread`` (none can block forever).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentloop.errors import ToolError

# O_DIRECTORY refuses a FIFO before the kernel would wait for a writer; O_NONBLOCK as well
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _parts(ws: Path, target: Path) -> list[str]:
    rel = target.relative_to(ws)
    return [p for p in rel.parts if p not in ("", ".")]


def _changed(name: str, exc: OSError) -> ToolError:
    return ToolError(
        f"{name!r} changed while it was being used ({exc.strerror}); a symlink or "
        f"special file appeared in its path: refused"
    )


def open_parent(ws: Path, target: Path, *, create: bool = False) -> tuple[int, str]:
    """(descriptor of ``target``'s folder, its last name), walked without following symlinks."""
    parts = _parts(ws, target)
    if not parts:
        raise ToolError("the workspace itself is a folder, not a file")
    fd = os.open(ws, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except FileNotFoundError:
        os.close(fd)
        raise ToolError(f"no such file or folder: {'/'.join(parts)!r}") from None
    except OSError as exc:
        os.close(fd)
        raise _changed("/".join(parts), exc) from None
    return fd, parts[-1]


def check_regular(st: os.stat_result, shown: str) -> None:
    """Refuse what is not a plain, singly-linked file."""
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown!r} is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a symlink"
            if stat.S_ISLNK(st.st_mode)
            else "not a regular file"
        )
        raise ToolError(f"{shown!r} is {kind}; file tools only use regular files")
    if st.st_nlink > 1:
        raise ToolError(
            f"{shown!r} has {st.st_nlink} hard links; a multiply-linked file may be "
            f"shared with a file outside the workspace, so file tools refuse it"
        )


def entry_stat(ws: Path, target: Path) -> os.stat_result | None:
    """``lstat`` of ``target`` through its folder's descriptor; None when it does not exist."""
    try:
        fd, name = open_parent(ws, target)
    except ToolError:
        return None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)


def read_bytes(ws: Path, target: Path, max_bytes: int) -> bytes:
    """The content of a regular, singly-linked file inside the workspace (at most ``max_bytes``)."""
    shown = target.relative_to(ws).as_posix()
    dfd, name = open_parent(ws, target)
    try:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            raise ToolError(f"no such file: {shown!r}") from None
        except IsADirectoryError:
            raise ToolError(f"{shown!r} is a folder, not a file") from None
        except OSError as exc:
            raise _changed(shown, exc) from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        check_regular(st, shown)
        if st.st_size > max_bytes:
            raise ToolError(
                f"{shown!r} is {st.st_size:,} bytes, more than this tool takes ({max_bytes:,})"
            )
        os.set_blocking(fd, True)
        chunks = []
        left = max_bytes
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_bytes(ws: Path, target: Path, data: bytes) -> bool:
    """Write ``data`` to ``target`` atomically (temp file + rename); True if it existed."""
    shown = target.relative_to(ws).as_posix()
    dfd, name = open_parent(ws, target, create=True)
    tmp = f".{name}.agentloop-{os.urandom(4).hex()}"
    try:
        try:
            old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None:
            check_regular(old, shown)
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644 if old is None else stat.S_IMODE(old.st_mode),
            dir_fd=dfd,
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return old is not None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    finally:
        os.close(dfd)


def unlink(ws: Path, target: Path) -> None:
    """Delete ``target`` (a regular file) through its folder's descriptor."""
    shown = target.relative_to(ws).as_posix()
    dfd, name = open_parent(ws, target)
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        check_regular(st, shown)
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)


Kind = Literal["dir", "file", "link"]


@dataclass
class Listing:
    """What :func:`walk` found: typed entries, noise folders not entered, special files skipped."""

    entries: list[tuple[Path, Kind]] = field(default_factory=list)
    skipped_dirs: set[str] = field(default_factory=set)
    special: int = 0  # FIFOs, sockets and devices: never opened, never listed


def _open_dir(ws: Path, target: Path) -> int:
    """A descriptor of the folder ``target``, every component opened without following links."""
    fd = os.open(ws, _DIR_FLAGS)
    try:
        for part in _parts(ws, target):
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(entry: os.DirEntry[str]) -> Kind | None:
    """The entry's type from the listing (d_type, else an lstat): None for special files."""
    if entry.is_symlink():
        return "link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return None


def walk(ws: Path, root: Path, *, recursive: bool, skip_dirs: frozenset[str]) -> Listing:
    """Entries under the folder ``root`` (sorted; symlinks listed, never followed).

    Recursive walks do not enter ``skip_dirs``; a folder swapped for anything else meanwhile is
    left out. FIFOs, devices and sockets are only counted.
    """
    out = Listing()
    pending = [root]  # folders still to list; each opened afresh from the workspace (few fds)
    while pending:
        base = pending.pop()
        try:
            fd = _open_dir(ws, base)
        except OSError as exc:
            if base != root:
                continue  # gone or swapped for a non-folder since it was listed
            shown = root.relative_to(ws).as_posix() or "."
            if isinstance(exc, FileNotFoundError):
                raise ToolError(f"no such folder: {shown!r}") from None
            raise _changed(shown, exc) from None
        try:
            with os.scandir(fd) as listing:
                found = [(e.name, _kind(e)) for e in listing]
        finally:
            os.close(fd)
        for name, kind in found:
            if kind is None:
                out.special += 1
                continue
            if kind == "dir" and recursive:
                if name in skip_dirs:
                    out.skipped_dirs.add(name)
                    continue
                pending.append(base / name)
            out.entries.append((base / name, kind))
    out.entries.sort()
    return out
