"""The verdict: the success check and ``run_tests`` run where nothing of the run can reach them.

A run's commands share its jail's PID namespace with the jail's init, which relays their exit
codes; a command that takes the init's socket (``pidfd_getfd``) or traces it can answer in its
place. So a verdict never goes through that init. :func:`verdict_jail` opens a second jail for
it, beside the run's:

- its own PID and IPC namespaces (the run's processes cannot see, signal, trace or take a
  descriptor from anything in it) and its own init, which only agentloop's socket reaches;
- the run's network namespace (joined through a descriptor agentloop holds), so a check that
  probes a service the task started and the agent fixed still reaches it on 127.0.0.1;
- a snapshot of the workspace taken by agentloop on the host (no symlink followed, FIFOs,
  devices and sockets left out), shown at the workspace's own path: a background process of
  the run cannot change the files while they are judged. For the success check, the task's
  own test files (``conftest.py``, ``pytest.ini``, anything under a ``tests/`` folder,
  ``test_*.py``) are put back as they were right after setup (:func:`save_tests`, before the
  model's first command), and ones the run added are dropped;
- the task's venv read-only, as agentloop built it, and an environment where the workspace
  cannot shadow the interpreter or its libraries: PATH holds only absolute folders outside the
  workspace, ``PYTHONSAFEPATH=1`` keeps the working folder off the front of ``sys.path`` (the
  task venv's ``_agentloop_verdict.pth`` appends it at the end, so ``python -m service.check``
  still finds the workspace's modules, after the venv's ``pytest``).

Where the run has no jail (:class:`~agentloop.sandbox.jail.HostJail`) the verdict runs as its commands
do, unconfined, as the run's confinement already says.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path, PurePath
from typing import BinaryIO

from agentloop.sandbox.jail import BwrapJail, Jail, JailSpec, give_to
from agentloop.sandbox.owned import make_owned, owned_folder, remove

SNAPSHOT_INFIX = ".verdict-"  # a snapshot's folder, named after the workspace, in the work root
TESTS_INFIX = ".tests-"  # the task's saved tests, likewise, beside the run's copy


def is_test_file(rel: PurePath) -> bool:
    """Whether a workspace path is part of the task's tests (restored for the success check)."""
    name = rel.name
    return (
        name in ("conftest.py", "pytest.ini")
        or "tests" in rel.parts[:-1]
        or (name.startswith("test_") and name.endswith(".py"))
    )


def _write_new(fin: BinaryIO, dest: Path, mode: int) -> None:
    """Write ``fin`` to ``dest``, which must not exist yet (no link followed), with ``mode``."""
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.fchmod(out, mode & 0o777)  # exactly as the source has it (git compares modes), umask aside
    with open(out, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


def _copy_file(name: str, dir_fd: int, dest: Path, mode: int) -> None:
    try:
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return  # gone, swapped for a link, or unreadable meanwhile: not part of the snapshot
    try:
        if stat.S_ISREG(os.fstat(src).st_mode):
            with open(src, "rb", closefd=False) as fin:
                _write_new(fin, dest, mode)
    finally:
        os.close(src)


def copy_tree(src: Path, dest: Path) -> None:
    """Copy ``src`` into the empty folder ``dest`` without following a symlink anywhere (blocking).

    Symlinks are copied as links, regular files by content, FIFOs, devices and sockets not at
    all; a file swapped for a link while the copy runs is left out, never followed.
    """
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(src, follow_symlinks=False):
        rel = os.path.relpath(dirpath, src)
        out = dest if rel == "." else dest / rel
        for name in [*dirnames, *filenames]:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                (out / name).mkdir(mode=0o755)
            elif stat.S_ISLNK(st.st_mode):
                with contextlib.suppress(OSError):
                    os.symlink(os.readlink(name, dir_fd=dir_fd), out / name)
            elif stat.S_ISREG(st.st_mode):
                _copy_file(name, dir_fd, out / name, st.st_mode)


def _real_folder(root: Path, rel: PurePath) -> Path:
    """``root/rel`` as a real folder: any link or file in the way (planted) is removed first."""
    here = root
    for part in rel.parts:
        here = here / part
        st = None
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(here)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            os.unlink(here)
            st = None
        if st is None:
            here.mkdir(mode=0o755)
    return here


def _test_files(root: Path) -> Iterator[tuple[Path, PurePath]]:
    """(path, path relative to ``root``) of every test file under ``root``, links included;
    ``os.walk`` never descends into a linked folder."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            rel = path.relative_to(root)
            if is_test_file(rel):
                yield path, rel


def restore_tests(snap: Path, pristine: Path) -> None:
    """Put the task's own test files back in ``snap`` as ``pristine`` has them (blocking)."""
    for path, _rel in list(_test_files(snap)):
        os.unlink(path)
    for path, rel in _test_files(pristine):
        if path.is_file() and not path.is_symlink():
            target = _real_folder(snap, rel.parent) / rel.name
            with contextlib.suppress(FileNotFoundError):
                if not os.path.isdir(target) or os.path.islink(target):
                    os.unlink(target)
            with open(path, "rb") as fin:
                _write_new(fin, target, os.fstat(fin.fileno()).st_mode)


def save_tests(work: Path) -> Path:
    """A private copy of the workspace's test files (blocking): taken right after setup, before
    the model's first command, for the success check to put back; in a folder beside ``work``
    owned as the copy is (:mod:`agentloop.sandbox.owned`: a killed run's is swept)."""
    top = owned_folder(work.name + TESTS_INFIX, work.parent)
    dest = top / "tests"
    dest.mkdir()
    for path, rel in _test_files(work):
        if path.is_file() and not path.is_symlink():
            (dest / rel.parent).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel, follow_symlinks=False)
    return dest


def fill_snapshot(work: Path, snap: Path, pristine: Path | None) -> None:
    """Copy ``work`` into the empty ``snap`` and put the task's tests back (blocking)."""
    copy_tree(work, snap)
    if pristine is not None:
        restore_tests(snap, pristine)


@contextlib.asynccontextmanager
async def verdict_jail(
    jail: Jail, work: Path, *, pristine: Path | None = None
) -> AsyncIterator[Jail]:
    """A jail for one verdict over a snapshot of ``work`` (see the module docstring).

    ``pristine``: the task's test files as set up (:func:`save_tests`), put back in the snapshot.
    """
    if not isinstance(jail, BwrapJail) or jail.exe is None:
        yield jail
        return
    # the snapshot's folder is made empty and bound first, and filled once the jail is up: a
    # turn's tool calls run at once, and an edit beside run_tests lands while the jail starts,
    # as it did when the tests read the live workspace
    top = await asyncio.to_thread(make_owned, work.name + SNAPSHOT_INFIX)  # under the work root
    snap = top / "ws"
    await asyncio.to_thread(snap.mkdir, 0o755)
    spec = JailSpec(
        workspace=work,
        workspace_src=snap,
        readonly=(*jail.spec.readonly, *jail.spec.writable),
        allow_network=jail.spec.allow_network,
        path_prefix=jail.spec.path_prefix,
        limits=jail.spec.limits,
        use_cgroups=jail.spec.use_cgroups,
        verdict=True,
    )
    vj = BwrapJail(spec, netns_fd=jail.netns_fd)
    try:
        await vj.start(jail.exe)
        vj.confinement = jail.confinement
        await asyncio.to_thread(fill_snapshot, work, snap, pristine)
        if vj.run_uid is not None:  # the uid fallback: the copy is the verdict's commands' own
            await asyncio.to_thread(give_to, vj.run_uid, (snap,))
        yield vj
    finally:
        await asyncio.shield(vj.close_now())
        await asyncio.to_thread(remove, top)
