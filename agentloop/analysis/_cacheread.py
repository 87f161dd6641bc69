"""The columnar cache's read side: a cache table's arrays checked to fit, as views of the file.

:func:`columns_from` makes :class:`agentloop.analysis.columnar.Columns` from the table
:mod:`agentloop.analysis.store` mapped and checked (its CRC, its key): every array's length, the
list columns' offsets at their ends, every index in range. Nothing is copied that need not be:
the numeric columns are numpy views of the mapping, read page by page as the analysis touches
them.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from agentloop.analysis.cands import index_type
from agentloop.analysis.columnar import (
    CALL_COLUMNS,
    CALL_NAMES,
    PART_COLUMNS,
    USAGE_COLUMNS,
    Columns,
)
from agentloop.analysis.lateness import Lateness
from agentloop.analysis.strcols import equals

MODEL_WIDTH = len(PART_COLUMNS) + 2  # a model span's numbers in the cache: parts, cached, timed
CALL_NAMES_KEY = b"agentloop.call_names."  # + tier, agent, label: the schema metadata's key


class CallNames(Mapping[str, list[str]]):
    """:attr:`Columns.call_names` of a cache: each list (JSON in the schema metadata under its
    own key, :data:`CALL_NAMES_KEY`) parsed when first asked for, ValueError unless it is as
    many strings as the columns' metadata says. A long run's 200,000 cost step labels are
    14 MB as Python strings: ``report`` reads them for its cost, ``whatif`` never."""

    __slots__ = ("_counts", "_got", "_schema")

    def __init__(self, schema: pa.Schema, counts: dict[str, int]) -> None:
        self._schema = schema
        self._counts = counts
        self._got: dict[str, list[str]] = {}

    def __getitem__(self, k: str) -> list[str]:
        got = self._got.get(k)
        if got is None:
            n = self._counts[k]
            got = orjson.loads((self._schema.metadata or {})[CALL_NAMES_KEY + k.encode()])
            if not isinstance(got, list) or len(got) != n or not all(type(x) is str for x in got):
                raise ValueError("call names")
            self._got[k] = got
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)


def _rows(t: pa.Table, name: str, width: int, count: int | None = None) -> np.ndarray:
    """The values of list column ``name``, ``width`` to a row (a view of the file); ValueError
    unless its offsets span exactly its values and those make whole rows (``count`` of them,
    if given). The offsets between are not read: the values are taken flat, in order, so only
    their number matters (a million spans' offsets of four columns touched 16 MB of the file)."""
    col = _column(t, name)
    off = np.asarray(col.offsets)
    values = np.asarray(col.values.to_numpy(zero_copy_only=False))
    n = len(values)
    if len(off) != t.num_rows + 1 or off[0] != 0 or off[-1] != n or n % width:
        raise ValueError(name)
    if count is not None and n != count * width:
        raise ValueError(name)
    return values.reshape(-1, width)


def columns_from(t: pa.Table, meta: dict[str, Any], pages: mmap.mmap | None) -> Columns:
    """Columns from a cache table, its metadata ``meta`` and the mapped file ``pages`` it is a
    view of (None: a table in memory); ValueError, KeyError or TypeError when its arrays do not
    fit."""
    n = t.num_rows
    parent, after_off, after_idx = _links(t, pages)
    t0, t1 = _ints(t, "t0", n, pages), _ints(t, "t1", n, pages)
    if (t1 < t0).any():
        raise ValueError("a span ends before it starts")
    is_model = _bools(t, "is_model")
    models = int(is_model.sum())
    nums = _rows(t, "model", MODEL_WIDTH, models)
    usage = _rows(t, "usage", len(USAGE_COLUMNS))
    if ((nums[:, -1] != 0) & (nums[:, -1] != 1)).any():
        raise ValueError("model")
    names = {k: int(meta["call_names"][k]) for k in CALL_NAMES}  # how many of each
    calls = _calls(t, names, usage)
    return Columns(
        header=meta["header"],
        end=meta["end"],
        problems=tuple(meta["problems"]),
        ids=_column(t, "id"),
        kinds=_column(t, "kind"),
        names=_column(t, "name"),
        statuses=_column(t, "status"),
        step_label=_column(t, "step_label"),
        tool_category=_column(t, "tool_category"),
        parent=parent,
        after_off=after_off,
        after_idx=after_idx,
        t0=t0,
        t1=t1,
        in_flight=_bools(t, "in_flight"),
        queued_ns=_ints(t, "queued_ns", n, pages),
        is_model=is_model,
        parts=nums[:, : len(PART_COLUMNS)],
        output_tps=_rows(t, "output_tps", 1, models)[:, 0],
        timed=nums[:, -1] == 1,
        cached_tokens=nums[:, len(PART_COLUMNS)],
        end_ns=int(meta["end_ns"]),
        tools_by_name=bool(meta["tools_by_name"]),
        usage=usage,
        lateness=Lateness(**meta["lateness"]),
        unsplit=tuple(meta["unsplit"]),
        calls=calls,
        call_names=CallNames(t.schema, names),
        trims=tuple(meta["trims"]),
        outside={  # JSON has lists only: the open kinds are a tuple (report._two_times)
            k: tuple(v) if k == "outside_open" else v for k, v in meta["outside"].items()
        },
    )


def _calls(t: pa.Table, names: dict[str, int], usage: np.ndarray) -> np.ndarray:
    """The call rows: one per model span, their codes in range of the call names (``names``:
    how many of each), as many marked with a usage row as there are usage rows (ValueError
    otherwise)."""
    calls = _rows(t, "calls", len(CALL_COLUMNS))
    if len(calls) != int(equals(_column(t, "kind"), "model").sum()):
        raise ValueError("calls")
    for k in CALL_NAMES:
        col = calls[:, CALL_COLUMNS.index(k)]
        if len(col) and (col.min() < 0 or col.max() >= names[k]):
            raise ValueError("calls")
    used = calls[:, -1]
    if ((used != 0) & (used != 1)).any() or used.sum() != len(usage):
        raise ValueError("calls")
    return calls


def _column(t: pa.Table, name: str) -> pa.Array:
    """Column ``name`` as one array: its one chunk as it is, a view of the mapped file (the
    file holds one record batch; ``combine_chunks`` would copy every column, 140 MB for a
    million spans)."""
    col = t.column(name)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _ints(t: pa.Table, name: str, n: int, pages: mmap.mmap | None) -> np.ndarray:
    """Int column ``name`` (``n`` rows): a view of the mapped file ``pages`` itself where it
    lies in it, so the array's base names the mapping (:meth:`Columns.drop_pages`)."""
    a = np.asarray(_column(t, name).to_numpy(), np.int64)
    if len(a) != n:
        raise ValueError(name)
    if pages is not None and n:
        at = a.ctypes.data - np.frombuffer(pages, np.uint8).ctypes.data
        if 0 <= at <= len(pages) - a.nbytes:
            return np.frombuffer(pages, np.int64, n, at)
    return a


def _bools(t: pa.Table, name: str) -> np.ndarray:
    return np.asarray(_column(t, name).to_numpy(zero_copy_only=False), bool)


def _links(t: pa.Table, pages: mmap.mmap | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parent index and the ``after`` lists (offsets, indices) of each span, every index
    one of an earlier span (ValueError otherwise)."""
    n = t.num_rows
    after = _column(t, "after")
    after_off = np.asarray(after.offsets)  # the file's int32, a view (as the builders make it)
    after_idx = np.asarray(after.values, np.int64)
    parent = _ints(t, "parent", n, pages)
    idx = np.arange(n, dtype=index_type(n))
    owner = np.repeat(idx, np.diff(after_off))
    if (
        after_off[0] != 0
        or (np.diff(after_off) < 0).any()
        or after_off[-1] != len(after_idx)
        or ((parent < -1) | (parent >= idx)).any()
        or ((after_idx < 0) | (after_idx >= owner)).any()
    ):
        raise ValueError("indices out of range")
    return parent, after_off, after_idx
