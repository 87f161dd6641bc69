"""The columnar cache's file: groups of Arrow columns written as they are made, a directory and a CRC last.

Layout (:data:`agentloop.analysis.store.CACHE_VERSION` 9): sections one after another, each at a
64-byte boundary (so the numbers map as aligned numpy views): a group of columns of the same
length as an Arrow IPC stream (its schema, one record batch, the end-of-stream marker), or a
metadata value as its bytes; then the directory (JSON: ``columns``, each column section's offset
and length; ``meta``, each metadata value's key, offset and length); then the trailer: the
directory's offset (8 bytes), the CRC-32 of every byte before the trailer (4) and :data:`MAGIC`
(4), little-endian. A file is read only whole: its CRC matches, its directory's sections lie
before the directory and no column is named twice (else it is stale: the caller rebuilds).

Sections, not one Arrow file (layout 8): the cold builder hands over each group of columns as
soon as it is made, written by a thread while the builder goes on, and the analysis then reads
the columns as views of the file it wrote, whose pages the kernel can take back
(:meth:`agentloop.analysis.columnar.Columns.drop_pages`), where columns built in memory stay
resident to the end (a million spans' cold ``whatif``: docs/performance.md).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Collection
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from agentloop.log import get_logger

MAGIC = b"ALC6"
_TRAILER = struct.Struct("<QI4s")  # the directory's offset, the CRC-32 before the trailer, MAGIC
_ALIGN = 64
_CHUNK = 1 << 20  # bytes read at a time for the CRC


class Writer:
    """A cache file being written beside ``path`` (a temporary file, renamed into place when
    sealed): column groups (:meth:`add`) and then the metadata (:meth:`finish`) written in
    order, by ``pool``'s thread when given (the caller's arrays read meanwhile: it must not
    write into them), else at once. A write that fails leaves no file: an ``OSError`` (a full
    disk) quietly, any other error (a bug) raised by :meth:`finish`, or logged when the file is
    written meanwhile."""

    def __init__(self, path: Path, pool: Executor | None) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._pool = pool
        self._sink: Any = None
        self._columns: list[list[int]] = []
        self._meta: list[list[Any]] = []
        self._pending: list[Future[None]] = []
        self._failed: BaseException | None = None
        self.made: set[str] = set()

    @classmethod
    def open(cls, path: Path, pool: Executor | None = None) -> Writer | None:
        """A writer of the cache at ``path``; None when its folder cannot be written."""
        w = cls(path, pool)
        try:
            path.parent.mkdir(exist_ok=True)
            sweep_tmps(path)
            w._sink = pa.OSFile(str(w.tmp), "wb")
        except OSError:
            w.abort()
            return None
        return w

    def add(
        self,
        names: Collection[str],
        make: Callable[[], dict[str, pa.Array]],
        behind: int | None = None,
    ) -> None:
        """Write columns ``names`` (the same length each) as a section, ``make`` making them
        when their turn comes (in the pool's thread). ``behind``: first wait until at most that
        many steps are still queued (what ``make`` holds is held until its section is written:
        a writer far behind holds every group at once)."""
        if names:
            if behind is not None and len(self._pending) > behind:
                for f in self._pending[: len(self._pending) - behind]:
                    f.result()  # (_guarded raises nothing)
            self.made.update(names)
            self._run(self._write_columns, make)

    def finish(
        self, meta: dict[bytes, bytes], mapped: bool = False
    ) -> tuple[pa.Table, mmap.mmap] | None:
        """Write ``meta`` and seal the file: its directory, its CRC read back, the rename
        (meanwhile, with a pool: whole or absent once the pool is joined). ``mapped``: first
        wait for the sections and hand back the table as views of the file written, and its
        mapping (None when it could not be written: no file is left)."""
        for k, v in meta.items():
            self._run(self._write_meta, k, v)
        got = None
        if mapped:
            self._drain()
            if self._failed is None:
                try:
                    with open(self.tmp, "rb") as f:
                        pages = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except OSError as exc:
                    self._failed = exc
                else:
                    got = table_of(pages, self._columns, self._meta), pages
        self._run(self._seal)
        return got

    def abort(self) -> None:
        """Stop: the temporary file removed, nothing written kept."""
        self._drain()
        self._remove()

    def _drain(self) -> None:
        """Wait for the steps queued (:meth:`_guarded` raises nothing)."""
        for f in self._pending:
            f.result()
        self._pending.clear()

    def _remove(self) -> None:
        if self._sink is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._sink.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()

    def _run(self, fn: Callable[..., None], *args: Any) -> None:
        if self._pool is None:
            self._guarded(fn, *args)
        else:
            self._pending.append(self._pool.submit(self._guarded, fn, *args))

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn`` unless a step before it failed; after the last step (the seal), a failure's
        end: no file left, the error raised (at once) or logged (meanwhile), an OSError's
        neither."""
        if self._failed is None:
            try:
                fn(*args)
            except BaseException as exc:  # whatever stopped it: no file left (below)
                self._failed = exc
        if fn != self._seal or self._failed is None:
            return
        failed, self._failed = self._failed, None
        self._remove()
        if isinstance(failed, OSError):
            return
        if self._pool is None:
            raise failed
        get_logger("agentloop.analysis").warning("cache_write_failed", cache=str(self.path))

    def _pad(self) -> int:
        at = self._sink.tell()
        if at % _ALIGN:
            self._sink.write(bytes(_ALIGN - at % _ALIGN))
            at = self._sink.tell()
        return int(at)

    def _write_columns(self, make: Callable[[], dict[str, pa.Array]]) -> None:
        table = pa.table(make())
        start = self._pad()
        with pa.ipc.new_stream(self._sink, table.schema) as w:
            w.write_table(table)
        self._columns.append([start, self._sink.tell() - start])

    def _write_meta(self, key: bytes, value: bytes) -> None:
        start = self._pad()
        self._sink.write(value)
        self._meta.append([key.decode(), start, len(value)])

    def _seal(self) -> None:
        at = self._pad()
        self._sink.write(orjson.dumps({"columns": self._columns, "meta": self._meta}))
        self._sink.close()
        with self.tmp.open("r+b") as f:
            size = os.fstat(f.fileno()).st_size
            crc = _crc(f, size)
            f.seek(size)
            f.write(_TRAILER.pack(at, crc, MAGIC))
        os.replace(self.tmp, self.path)


def read(path: Path) -> tuple[pa.Table, mmap.mmap] | None:
    """The table of the cache file at ``path`` (its columns views of the file, its metadata
    the file's) and the mapping, when its CRC matches; None when it does not. ValueError,
    KeyError or TypeError when its directory does not fit the file. One descriptor: the file
    mapped is the one checked. The CRC reads through a buffer, not the mapping: a mapped page
    counts in resident memory once read, and ``whatif`` never reads the ids and names."""
    with path.open("rb") as f:
        sections = _directory(f, checked=True)
        if sections is None:
            return None
        pages = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return table_of(pages, *sections), pages


def head(path: Path, key: bytes) -> bytes:
    """Metadata value ``key`` of the cache file at ``path``, its CRC not checked (cheap: for a
    freshness test); OSError, ValueError, KeyError or TypeError when there is none."""
    with path.open("rb") as f:
        sections = _directory(f, checked=False)
        if sections is None:
            raise ValueError("no trailer")
        for name, start, size in sections[1]:
            if name == key.decode():
                f.seek(start)
                return f.read(size)
    raise KeyError(key)


def _directory(f: Any, checked: bool) -> tuple[list[list[int]], list[list[Any]]] | None:
    """The column and metadata sections of the cache file open in ``f``, from its trailer and
    directory; None when the trailer is not one (or, ``checked``, the CRC of every byte before
    it does not match). ValueError, KeyError or TypeError when the directory does not fit."""
    body = os.fstat(f.fileno()).st_size - _TRAILER.size
    if body <= 0:
        return None
    f.seek(body)
    at, crc_want, magic = _TRAILER.unpack(f.read(_TRAILER.size))
    if magic != MAGIC or not 0 <= at <= body:
        return None  # (an older layout's file: not read through for its CRC)
    if checked and _crc(f, body) != crc_want:
        return None
    f.seek(at)
    return _sections(orjson.loads(f.read(body - at)), at)


def _sections(directory: Any, end: int) -> tuple[list[list[int]], list[list[Any]]]:
    """The directory's sections, each checked to lie before ``end`` (TypeError, ValueError)."""
    if type(directory) is not dict:
        raise TypeError("directory")
    columns, meta = directory["columns"], directory["meta"]
    if type(columns) is not list or type(meta) is not list:
        raise TypeError("directory")
    for s in columns:
        if type(s) is not list or len(s) != 2:
            raise TypeError("directory")
    for s in meta:
        if type(s) is not list or len(s) != 3 or type(s[0]) is not str:
            raise TypeError("directory")
    for start, size in [s[-2:] for s in (*columns, *meta)]:
        if type(start) is not int or type(size) is not int or not 0 <= start <= end - size:
            raise ValueError("directory")
    return columns, meta


def table_of(pages: mmap.mmap, columns: list[list[int]], meta: list[list[Any]]) -> pa.Table:
    """One table of the column sections (views of ``pages``), the metadata sections its
    schema's metadata; ValueError when a column is named twice."""
    buf = pa.py_buffer(pages)
    got: dict[str, pa.Array] = {}
    for start, size in columns:
        t = pa.ipc.open_stream(buf.slice(start, size)).read_all()
        for name in t.column_names:
            if name in got:
                raise ValueError(f"column {name} twice")
            col = t.column(name)
            got[name] = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    values = {k.encode(): pages[start : start + size] for k, start, size in meta}
    return pa.table(got).replace_schema_metadata(values)


def sweep_tmps(path: Path) -> None:
    """Remove the temporary files of this cache whose writer is gone (a SIGKILLed analysis
    leaves its ``.tmp``, as big as the cache; any other end removes its own)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -4]
        if pid.isdigit() and int(pid) > 0:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            except OSError:
                pass  # alive, another user's


def _crc(f: Any, size: int) -> int:
    """The CRC-32 of the first ``size`` bytes of ``f`` (read from its start), -1 when it is shorter."""
    buf = memoryview(bytearray(_CHUNK))
    crc, left = 0, size
    f.seek(0)
    while left:
        got = f.readinto(buf[: min(left, _CHUNK)])
        if not got:
            return -1  # shorter than its size said: no CRC matches
        crc = zlib.crc32(buf[:got], crc)
        left -= got
    return crc
