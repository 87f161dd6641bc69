"""The columnar cache of a trace: an Arrow file beside it, made once, checked before each use.

``run.jsonl`` gets ``.agentloop-cache/run.jsonl.arrow`` in its folder. The JSONL stays the
crash-safe record and the source of truth; the cache holds its :class:`Columns`, made by the
checked reader and the Graph builder, so what it holds was checked once.

The file is an Arrow IPC file (uncompressed, so it is memory-mapped and its numeric columns
become numpy arrays without a copy: a million spans read back in tens of milliseconds, where the
Parquet cache of layout 3 took about a second to decode), followed by a trailer: the CRC-32 of
every byte before it and :data:`_MAGIC`. A cache is used only when the trailer's CRC matches,
its metadata names the same source (size, modification time, and a digest of the file's first
and last 16 KiB), the same cache layout (:data:`CACHE_VERSION`) and the same agentloop version,
and its arrays fit together (lengths, offsets, indices in range). Anything else (the JSONL grew
or was edited, a version bump, a truncated or garbled file) makes it stale: it is rebuilt from
the JSONL, never trusted. A folder the cache cannot be written to costs the rebuild every time,
nothing more.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import mmap
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from agentloop._version import __version__
from agentloop.analysis._cacheread import CALL_NAMES_KEY, MODEL_WIDTH, columns_from
from agentloop.analysis.columnar import CALL_NAMES, Columns, columns_of
from agentloop.analysis.columnar import USAGE_COLUMNS as USAGE_COLUMNS  # the cache's, too
from agentloop.analysis.runend import COLUMNAR_BYTES

# 3: a sub-run step's label names its agent (issue 23); 4: Arrow IPC with a CRC trailer instead
# of Parquet, and the trace's lateness, unsplit calls and usage; 5: a model span's numbers as
# one list per row (the model columns took 112 MB of nulls for a million spans); 6: the usage
# rows as a column (in the metadata as JSON they took 0.2 s to read for 200,000 calls); 7: what
# ``report`` reads (issue 27): each model span's tier, agent, invocation and cost label, the
# context trims and the wall time's parts outside the agent's; 8: the call names (tiers, agents,
# the cost's step labels) each under a metadata key of its own, parsed when asked for, not in
# the metadata every read parses (a long run's 200,000 labels: 14 MB only ``report`` reads)
CACHE_VERSION = "8"
CACHE_DIR = ".agentloop-cache"
_EDGE = 16 * 1024  # bytes of the source's head and tail in its digest
_META = b"agentloop.columns"
_MAGIC = b"ALC5"  # the trailer: <CRC-32 of the Arrow file, 4 bytes little-endian><_MAGIC>
_TRAILER = struct.Struct("<I4s")
_CHUNK = 1 << 20  # bytes read at a time for the CRC
Writer = Callable[[Path, Columns, dict[str, Any]], object]  # writes a trace's cache from a key


def cache_path(trace: Path) -> Path:
    """Where the cache of ``trace`` lives."""
    return trace.parent / CACHE_DIR / (trace.name + ".arrow")


def source_key(trace: Path) -> dict[str, Any]:
    """What a cache must have been made from: the source's size, mtime and edge digest, the
    layout and the agentloop version."""
    st = trace.stat()
    h = hashlib.blake2b(digest_size=16)
    with trace.open("rb") as f:
        h.update(f.read(_EDGE))
        if st.st_size > _EDGE:
            f.seek(max(_EDGE, st.st_size - _EDGE))
            h.update(f.read(_EDGE))
    return {
        "layout": CACHE_VERSION,
        "agentloop": __version__,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "digest": h.hexdigest(),
    }


def to_table(c: Columns, key: dict[str, Any]) -> pa.Table:
    """The columns as one Arrow table; header, end record, problems and ``key`` in its
    schema metadata."""
    after = pa.ListArray.from_arrays(pa.array(c.after_off, pa.int32()), pa.array(c.after_idx))
    cols: dict[str, Any] = {
        "id": c.ids,
        "kind": c.kinds,
        "name": c.names,
        "status": c.statuses,
        "step_label": c.step_label,
        "tool_category": c.tool_category,
        "parent": pa.array(c.parent),
        "after": after,
        "t0": pa.array(c.t0),
        "t1": pa.array(c.t1),
        "in_flight": pa.array(c.in_flight),
        "queued_ns": pa.array(c.queued_ns),
        "is_model": pa.array(c.is_model),
    }
    # a model span's row holds its parts, cached tokens and timed flag (MODEL_WIDTH numbers)
    # and its output speed; every other row an empty list (stored as nothing)
    ints = np.concatenate(
        [c.parts, c.cached_tokens[:, None], c.timed[:, None].astype(np.int64)], axis=1
    )
    cols["model"] = _lists(c.is_model, MODEL_WIDTH, ints.reshape(-1))
    cols["output_tps"] = _lists(c.is_model, 1, c.output_tps)
    # the usage and call rows (a row per model call, not per span): all in the first row's list
    for name, rows in (("usage", c.usage), ("calls", c.calls)):
        off = np.full(len(c) + 1, rows.size, np.int32)
        off[0] = 0
        cols[name] = pa.ListArray.from_arrays(pa.array(off), pa.array(rows.reshape(-1)))
    meta = {
        "key": key,
        "header": c.header,
        "end": c.end,
        "problems": list(c.problems),
        "end_ns": c.end_ns,
        "tools_by_name": c.tools_by_name,
        "lateness": dataclasses.asdict(c.lateness),
        "unsplit": list(c.unsplit),
        "call_names": {k: len(c.call_names[k]) for k in CALL_NAMES},  # the lists: keys of their own
        "trims": list(c.trims),
        "outside": c.outside,
    }
    names = {CALL_NAMES_KEY + k.encode(): orjson.dumps(list(c.call_names[k])) for k in CALL_NAMES}
    return pa.table(cols).replace_schema_metadata({_META: orjson.dumps(meta), **names})


def _lists(rows: np.ndarray, width: int, values: np.ndarray) -> pa.Array:
    """A list column: ``width`` of ``values`` in each marked row, an empty list elsewhere."""
    off = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(np.where(rows, width, 0), out=off[1:])
    return pa.ListArray.from_arrays(pa.array(off), pa.array(values))


def from_table(
    t: pa.Table, meta: dict[str, Any] | None = None, pages: mmap.mmap | None = None
) -> Columns:
    """Columns from a cache table (``meta``: its metadata, if already read; ``pages``: the
    mapped file it is a view of); ValueError, KeyError or TypeError when its arrays do not fit
    (:func:`agentloop.analysis._cacheread.columns_from`)."""
    return columns_from(t, _meta(t) if meta is None else meta, pages)


def _open(path: Path) -> tuple[pa.Table, mmap.mmap] | None:
    """The table of a cache file whose trailer's CRC matches its bytes and the mapping it is
    a view of (the arrays are views of the file), else None. The CRC reads through a buffer, not the mapping:
    a mapped page counts in resident memory once read, and ``whatif`` never reads the ids and
    names (30 MB of a million spans' 152 MB). One descriptor: the file mapped is the one checked."""
    with path.open("rb") as f:
        body = os.fstat(f.fileno()).st_size - _TRAILER.size
        if body <= 0:
            return None
        crc = _crc(f, body)
        crc_want, magic = _TRAILER.unpack(f.read(_TRAILER.size))
        if magic != _MAGIC or crc != crc_want:
            return None
        pages = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return pa.ipc.open_file(pa.py_buffer(pages).slice(0, body)).read_all(), pages


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


def _meta(t: pa.Table) -> dict[str, Any]:
    meta = orjson.loads((t.schema.metadata or {})[_META])
    if not isinstance(meta, dict):
        raise TypeError("metadata")
    return meta


def is_fresh(trace: Path) -> bool:
    """Whether ``trace`` has a cache made from it as it is now (its key only: cheap)."""
    try:
        with pa.memory_map(str(cache_path(trace))) as f:
            buf = f.read_buffer()
        schema = pa.ipc.open_file(buf.slice(0, buf.size - _TRAILER.size)).schema
        meta = orjson.loads((schema.metadata or {})[_META])
        return bool(meta.get("key") == source_key(trace))
    except (OSError, pa.ArrowException, KeyError, TypeError, orjson.JSONDecodeError):
        return False


def read_cache(trace: Path) -> Columns | None:
    """The cached columns of ``trace``; None when there are none, or they are stale or
    damaged (the caller rebuilds)."""
    path = cache_path(trace)
    try:
        key = source_key(trace)
        opened = _open(path)
        if opened is None:
            return None
        t, pages = opened
        meta = _meta(t)
        if meta.get("key") != key:
            return None
        c = from_table(t, meta, pages)
    except (OSError, pa.ArrowException, KeyError, ValueError, TypeError, orjson.JSONDecodeError):
        return None
    c.drop_pages()  # what the checks read: the analysis reads again only what it needs
    return c


def write_cache(trace: Path, c: Columns, key: dict[str, Any]) -> Path | None:
    """Write the cache of ``trace`` atomically, from the source ``key`` names (taken before the
    read: a trace grown meanwhile is stale next time); None when its folder cannot be written."""
    return write_table(trace, to_table(c, key))


def write_table(trace: Path, table: pa.Table) -> Path | None:
    """:func:`write_cache` of the columns' table (:func:`to_table`)."""
    path = cache_path(trace)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        _sweep_tmps(path)
        # straight into the file (in C++, from the arrays' own buffers), its CRC then read back
        # from the page cache: a 150 MB buffer made for it cost 1.0 s of first-touched memory
        # against 0.1 s (a million spans, a fresh process)
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        with tmp.open("r+b") as f:
            size = os.fstat(f.fileno()).st_size
            crc = _crc(f, size)
            f.seek(size)
            f.write(_TRAILER.pack(crc, _MAGIC))
        os.replace(tmp, path)
    except BaseException as exc:  # no half-written file left behind, whatever stopped it
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            return None
        raise
    return path


def _sweep_tmps(path: Path) -> None:
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


def load_columns(trace: Path, write: Writer = write_cache) -> Columns:
    """The columns of ``trace``: from a valid cache, else built (by the fast cold builder of
    :mod:`agentloop.analysis.fastcols` for a clean trace, else through the checked reader: a
    bad trace raises its TraceFileError), the cache then written by ``write`` for next time."""
    c = read_cache(trace)
    if c is not None:
        return c
    from agentloop.analysis.fastcols import fast_columns
    from agentloop.analysis.graph import build_graph, gc_paused, load_quickly

    try:
        key = source_key(trace)
    except OSError:
        key = None
    with gc_paused():  # a million spans alive: see gc_paused
        # a clean trace in the writer's shape: its columns straight from typed records (a screen,
        # not a second reader); anything else, the checked path, with its messages and notes
        c = fast_columns(trace)
        if c is None:
            c = columns_of(build_graph(load_quickly(trace)))  # a missing file: its message
    if key is not None:
        write(trace, c, key)
    return c


def columns_for_analysis(trace: Path, write: Writer = write_cache) -> Columns | None:
    """The columns of a trace big enough for the vectorised analysis to pay (a valid cache, or
    one made now and written by ``write``), else None: the caller analyses it with the loops."""
    try:
        big = trace.stat().st_size >= COLUMNAR_BYTES or cache_path(trace).is_file()
    except OSError:
        return None  # the checked reader says what is wrong with the path
    if not big:
        return None
    c = load_columns(trace, write)
    return c if c.tools_by_name else None
