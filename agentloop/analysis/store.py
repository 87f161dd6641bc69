"""The columnar cache of a trace: a file of Arrow columns beside it, made once, checked before each use.

``run.jsonl`` gets ``.agentloop-cache/run.jsonl.arrow`` in its folder. The JSONL stays the
crash-safe record and the source of truth; the cache holds its :class:`Columns`, made by the
checked reader and the Graph builder, so what it holds was checked once.

The file (:mod:`agentloop.analysis.cachefile`) holds the columns as Arrow IPC sections,
uncompressed, so it is memory-mapped and its numeric columns become numpy arrays without a copy
(a million spans read back in tens of milliseconds, where the Parquet cache of layout 3 took
about a second to decode), and a trailer with the CRC-32 of every byte before it. A cache is
used only when the CRC matches, its metadata names the same source (size, modification time,
and a digest of the file's first and last 16 KiB), the same cache layout (:data:`CACHE_VERSION`)
and the same agentloop version, and its arrays fit together (lengths, offsets, indices in
range). Anything else (the JSONL grew or was edited, a version bump, a truncated or garbled
file) makes it stale: it is rebuilt from the JSONL, never trusted. A folder the cache cannot be
written to costs the rebuild every time, nothing more.
"""

from __future__ import annotations

import dataclasses
import hashlib
import mmap
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from agentloop._version import __version__
from agentloop.analysis import cachefile
from agentloop.analysis._cacheread import CALL_NAMES_KEY, MODEL_WIDTH, columns_from
from agentloop.analysis.columnar import (
    CALL_NAMES,
    Columns,
    columns_of,
    in_own_arena,
    release_heap,
)
from agentloop.analysis.columnar import USAGE_COLUMNS as USAGE_COLUMNS  # the cache's, too
from agentloop.analysis.runend import COLUMNAR_BYTES

# 3: a sub-run step's label names its agent (issue 23); 4: Arrow IPC with a CRC trailer instead
# of Parquet, and the trace's lateness, unsplit calls and usage; 5: a model span's numbers as
# one list per row (the model columns took 112 MB of nulls for a million spans); 6: the usage
# rows as a column (in the metadata as JSON they took 0.2 s to read for 200,000 calls); 7: what
# ``report`` reads (issue 27): each model span's tier, agent, invocation and cost label, the
# context trims and the wall time's parts outside the agent's; 8: the call names (tiers, agents,
# the cost's step labels) each under a metadata key of its own, parsed when asked for, not in
# the metadata every read parses (a long run's 200,000 labels: 14 MB only ``report`` reads);
# 9: sections of columns written as the cold builder makes them (cachefile), the analysis on
# the file written
CACHE_VERSION = "9"
CACHE_DIR = ".agentloop-cache"
_EDGE = 16 * 1024  # bytes of the source's head and tail in its digest
_META = b"agentloop.columns"
# from this size of trace its cache is written as the fast builder makes the columns and the
# analysis reads the file written: below it the mapping and its checks cost more than the
# memory they save (a suite of small runs)
STREAMED_BYTES = 64 << 20
# the groups the builder may hand over while the writer is still on the one before: the writer
# is the slower (a million spans' file is new pages to the system), so the command waits for it
# at the end anyway, and a group handed over is held until written
_BEHIND = 1


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


def column_names(f: Collection[str], made: Collection[str] = ()) -> list[str]:
    """The cache's columns that the :class:`Columns` fields named in ``f`` make (each column
    whose fields are all there), none named in ``made``."""
    return [k for k, needs in _MADE_OF.items() if k not in made and all(x in f for x in needs)]


def table_columns(
    f: Mapping[str, Any], n: int, names: Collection[str] | None = None
) -> dict[str, pa.Array]:
    """Cache columns ``names`` (by default every one ``f`` makes: :func:`column_names`) of the
    :class:`Columns` fields ``f``, ``n`` spans: the one owner of how a field is kept, for a
    whole table (:func:`to_table`) and for the groups the cold builder hands over as it makes
    them."""
    return {k: _make(k, f, n) for k in (column_names(f) if names is None else names)}


def _add(w: cachefile.Writer, f: Mapping[str, Any], n: int, behind: int | None = None) -> None:
    """The columns ``f`` makes that ``w`` has not had, to ``w``: made in its thread as their
    turn comes (the copies some need, ~35 MB of a million spans, not held in its queue);
    ``behind``: :meth:`cachefile.Writer.add`'s."""
    names = column_names(f, w.made)
    w.add(names, lambda: table_columns(f, n, names), behind)


# each cache column and the Columns fields it is made of
_MADE_OF: dict[str, tuple[str, ...]] = {
    "id": ("ids",),
    "kind": ("kinds",),
    "name": ("names",),
    "status": ("statuses",),
    "step_label": ("step_label",),
    "tool_category": ("tool_category",),
    "parent": ("parent",),
    "after": ("after_off", "after_idx"),
    "t0": ("t0",),
    "t1": ("t1",),
    "in_flight": ("in_flight",),
    "queued_ns": ("queued_ns",),
    "is_model": ("is_model",),
    "model": ("is_model", "parts", "cached_tokens", "timed"),
    "output_tps": ("is_model", "output_tps"),
    "usage": ("usage",),
    "calls": ("calls",),
}
_AS_IS = {"id": "ids", "kind": "kinds", "name": "names", "status": "statuses"}
# the Columns fields kept in the metadata, not as columns
_NOT_ARRAYS = (
    "header",
    "end",
    "problems",
    "end_ns",
    "tools_by_name",
    "lateness",
    "unsplit",
    "call_names",
    "trims",
    "outside",
)


def _make(name: str, f: Mapping[str, Any], n: int) -> pa.Array:
    if name in _AS_IS or name in ("step_label", "tool_category"):
        return f[_AS_IS.get(name, name)]
    if name == "after":
        return pa.ListArray.from_arrays(
            pa.array(f["after_off"], pa.int32()), pa.array(f["after_idx"])
        )
    if name == "model":
        # a model span's row holds its parts, cached tokens and timed flag (MODEL_WIDTH numbers)
        # and its output speed; every other row an empty list (stored as nothing)
        ints = np.concatenate(
            [f["parts"], f["cached_tokens"][:, None], f["timed"][:, None].astype(np.int64)], axis=1
        )
        return _lists(f["is_model"], MODEL_WIDTH, ints.reshape(-1))
    if name == "output_tps":
        return _lists(f["is_model"], 1, f["output_tps"])
    if name in ("usage", "calls"):
        # the usage and call rows (a row per model call, not per span): all in the first row's list
        rows = f[name]
        off = np.full(n + 1, rows.size, np.int32)
        off[0] = 0
        return pa.ListArray.from_arrays(pa.array(off), pa.array(rows.reshape(-1)))
    return pa.array(f[name])


def metadata(f: Mapping[str, Any], key: dict[str, Any]) -> dict[bytes, bytes]:
    """The cache's metadata from the :class:`Columns` fields ``f`` that are not arrays
    (header, end record, problems, ...) and ``key``; each call names list under a key of its
    own (parsed when asked for)."""
    names = f["call_names"]
    meta = {
        "key": key,
        "header": f["header"],
        "end": f["end"],
        "problems": list(f["problems"]),
        "end_ns": f["end_ns"],
        "tools_by_name": f["tools_by_name"],
        "lateness": dataclasses.asdict(f["lateness"]),
        "unsplit": list(f["unsplit"]),
        "call_names": {k: len(names[k]) for k in CALL_NAMES},  # the lists: keys of their own
        "trims": list(f["trims"]),
        "outside": f["outside"],
    }
    lists = {CALL_NAMES_KEY + k.encode(): orjson.dumps(_listed(names[k])) for k in CALL_NAMES}
    return {_META: orjson.dumps(meta), **lists}


def _listed(names: Any) -> list[str]:
    """A call names list, given as a list or as Arrow strings (the fast builder's labels)."""
    return names.to_pylist() if isinstance(names, pa.Array) else list(names)


def fields(c: Columns) -> dict[str, Any]:
    """The fields of ``c`` by name."""
    return {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}


def to_table(c: Columns, key: dict[str, Any]) -> pa.Table:
    """The columns as one Arrow table, :func:`metadata` its schema's."""
    f = fields(c)
    return pa.table(table_columns(f, len(c))).replace_schema_metadata(metadata(f, key))


def _lists(rows: np.ndarray, width: int, values: np.ndarray) -> pa.Array:
    """A list column: ``width`` of ``values`` in each marked row, an empty list elsewhere."""
    off = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(rows, dtype=np.int32, out=off[1:])  # (no int64 widths: 8 MB of a million spans')
    off *= width
    return pa.ListArray.from_arrays(pa.array(off), pa.array(values))


def from_table(
    t: pa.Table, meta: dict[str, Any] | None = None, pages: mmap.mmap | None = None
) -> Columns:
    """Columns from a cache table (``meta``: its metadata, if already read; ``pages``: the
    mapped file it is a view of); ValueError, KeyError or TypeError when its arrays do not fit
    (:func:`agentloop.analysis._cacheread.columns_from`)."""
    return columns_from(t, _meta(t) if meta is None else meta, pages)


def _meta(t: pa.Table) -> dict[str, Any]:
    meta = orjson.loads((t.schema.metadata or {})[_META])
    if not isinstance(meta, dict):
        raise TypeError("metadata")
    return meta


def is_fresh(trace: Path) -> bool:
    """Whether ``trace`` has a cache made from it as it is now (its key only: cheap)."""
    try:
        meta = orjson.loads(cachefile.head(cache_path(trace), _META))
        return bool(meta.get("key") == source_key(trace))
    except (OSError, KeyError, ValueError, TypeError, AttributeError):
        return False  # orjson's JSONDecodeError is a ValueError


def read_cache(trace: Path) -> Columns | None:
    """The cached columns of ``trace``; None when there are none, or they are stale or
    damaged (the caller rebuilds)."""
    try:
        key = source_key(trace)
        opened = cachefile.read(cache_path(trace))
        if opened is None:
            return None
        t, pages = opened
        meta = _meta(t)
        if meta.get("key") != key:
            return None
        c = from_table(t, meta, pages)
    except (OSError, pa.ArrowException, KeyError, ValueError, TypeError):
        return None
    c.drop_pages()  # what the checks read: the analysis reads again only what it needs
    return c


def write_cache(trace: Path, c: Columns, key: dict[str, Any]) -> Path | None:
    """Write the cache of ``trace`` from ``c``, from the source ``key`` names (taken before
    the read: a trace grown meanwhile is stale next time); None when it cannot be written."""
    path = cache_path(trace)
    w = cachefile.Writer.open(path)
    if w is None:
        return None
    _write_whole(w, c, key)
    return path if path.is_file() else None


def _write_whole(w: cachefile.Writer, c: Columns, key: dict[str, Any]) -> None:
    """Every column of ``c`` to ``w`` as one section, then the metadata and the seal."""
    f = fields(c)
    _add(w, f, len(c))
    w.finish(metadata(f, key))


def load_columns(trace: Path, pool: Executor | None = None) -> Columns:
    """The columns of ``trace``: from a valid cache, else built (by the fast cold builder of
    :mod:`agentloop.analysis.fastcols` for a clean trace, else through the checked reader: a
    bad trace raises its TraceFileError) and their cache written, by ``pool``'s thread when
    given (join the pool before reading the cache again; the columns' arrays are read-only,
    the thread reads them meanwhile). From :data:`STREAMED_BYTES` the fast builder's columns
    are written as it makes each group of them, and the columns handed back are views of the
    file written: pages the kernel can take back, where built ones stay resident."""
    c = read_cache(trace)
    if c is not None:
        return c
    from agentloop.analysis.fastcols import fast_columns, fast_fields
    from agentloop.analysis.graph import build_graph, gc_paused, load_quickly

    try:
        key: dict[str, Any] | None = source_key(trace)
    except OSError:
        key = None
    path = cache_path(trace)
    w = None if key is None else cachefile.Writer.open(path, pool)
    with gc_paused():  # a million spans alive: see gc_paused
        # a clean trace in the writer's shape: its columns straight from typed records (a screen,
        # not a second reader); anything else, the checked path, with its messages and notes
        try:
            if w is not None and key is not None and key["size"] >= STREAMED_BYTES:
                rest: dict[str, Any] = {}
                # the build's heap not the analysis's (in_own_arena)
                if in_own_arena(fast_fields, trace, _written(w, rest)):
                    release_heap(arrow=True)  # the build's, before the checks map the file
                    views = w.finish(metadata(rest, key), mapped=True)
                    if views is not None:
                        return _views(*views)
                    w = None  # not written (a full disk): built again in memory, not written
                    c = fast_columns(trace)
                else:
                    w.abort()  # what the screen handed over before it gave up
                    w = cachefile.Writer.open(path, pool)
            else:
                c = fast_columns(trace)
            if c is None:
                c = columns_of(build_graph(load_quickly(trace)))  # a bad trace: its message
        except BaseException:
            if w is not None:
                w.abort()
            raise
    if w is not None and key is not None:
        _write_whole(w, c, key)
    return c


def _written(w: cachefile.Writer, rest: dict[str, Any]) -> Callable[[dict[str, Any], int], None]:
    """What the fast builder hands over as it makes it (Columns fields): the arrays to ``w`` as
    columns (kept nowhere else: the file's views replace them), the other values into ``rest``
    (the metadata's)."""

    def out(f: dict[str, Any], n: int) -> None:
        _add(w, f, n, _BEHIND)
        rest.update((k, v) for k, v in f.items() if k in _NOT_ARRAYS)

    return out


def _views(t: pa.Table, pages: mmap.mmap) -> Columns:
    """The columns of a cache table just written: views of its file, their pages dropped, and
    what the writer's thread freed since the build's end given back (its copies were freed
    on its own heap, after the build's release: 30 MB of a million spans')."""
    c = from_table(t, None, pages)
    c.drop_pages()
    release_heap(arrow=True)
    return c


def columns_for_analysis(trace: Path, pool: Executor | None = None) -> Columns | None:
    """The columns of a trace big enough for the vectorised analysis to pay (a valid cache, or
    one made now, written as :func:`load_columns` says), else None: the caller analyses it
    with the loops."""
    try:
        big = trace.stat().st_size >= COLUMNAR_BYTES or cache_path(trace).is_file()
    except OSError:
        return None  # the checked reader says what is wrong with the path
    if not big:
        return None
    c = load_columns(trace, pool)
    return c if c.tools_by_name else None
