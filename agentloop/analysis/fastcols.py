"""Builds a clean trace's Columns without a Python object per span: the cold path.

The checked path (:func:`agentloop.trace.reader.load_trace`, then
:func:`agentloop.analysis.graph.build_graph`, then :func:`agentloop.analysis.columnar.columns_of`)
builds a ``SpanRecord``, typed views and Graph lists for every span: 5.5x the time of
``orjson.loads`` on every line for a million spans (this path: 1.4-1.6x, end to end,
``tests/benchmarks/bench_analysis.py``). Here msgspec decodes each span record into
the typed Structs of :mod:`agentloop.analysis._fastshape` (in C), a window of the file at a
time, the values the columns are made of taken from each window's Structs as arrays before the
next is decoded (:mod:`agentloop.analysis._fastread`, :mod:`agentloop.analysis._fastwin`), and
the reader's checks that span records (ids, order, instants, the model and tool end
attributes) must pass are made on the arrays.

This is a screen, never a second door: :func:`fast_columns` returns None for anything it does
not recognise as a clean trace in the shape the writer writes (a line msgspec rejects, an
unknown record type, ``span_event`` records, an id started or ended twice, a parent or
``after`` span that did not start before, an ``after`` naming a set-up span, a cut last line,
an attribute outside the writer's shape, ...), and the caller hands the whole file to the
checked path, which keeps its own errors and notes. Set-up and check spans are kept out as the
reader keeps them (:data:`~agentloop.trace.reader.OUTSIDE_KINDS`), the set-up's findings put in
the header by the reader's own :func:`~agentloop.trace.reader.late_header`. What it accepts, the checked path accepts with the same
values (``tests/test_fastcols.py`` compares both paths' Columns field by field, and fuzzes).
The formulas are the checked path's owners' (:func:`agentloop.model.timing.split_ns` is
vectorised in :func:`_split`, kept beside its source's order of operations so the floats agree).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from io import FileIO
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pyarrow as pa

from agentloop.analysis import _fastread, _fastsplit
from agentloop.analysis import _fastshape as F
from agentloop.analysis._fastids import Refs, as_ids
from agentloop.analysis._fastlabels import step_labels
from agentloop.analysis._fastmodels import model_columns
from agentloop.analysis._fastorder import any_in_chunks, ended_after_start, owners, unknown_after
from agentloop.analysis._fastreport import calls, outside
from agentloop.analysis._fastshape import NotClean
from agentloop.analysis._fasttext import take
from agentloop.analysis._fastwin import NONE, Taken
from agentloop.analysis.attribution import tool_category
from agentloop.analysis.cands import index_type
from agentloop.analysis.columnar import Columns, release_heap
from agentloop.errors import TraceFileError
from agentloop.trace import attrs as A
from agentloop.trace.reader import NO_END, OUTSIDE_KINDS, SpanRecord, Trace, late_header
from agentloop.trace.schema import EndRecord, RunHeader

I64 = np.int64
_KIND = {k: i for i, k in enumerate(F.KINDS)}
_CODE = np.int8  # a span's kind and status: an index into F.KINDS, F.STATUSES
_FREED_SPANS = 100_000  # from this many spans the builder hands freed pages back (_freed)
Out = Callable[[dict[str, Any], int], None]  # takes Columns fields as they are made (fast_columns)


def fast_columns(
    path: Path, window: int = _fastread.WINDOW, split_bytes: int = _fastsplit.SPLIT_BYTES
) -> Columns | None:
    """The columns of the trace at ``path`` if it is a clean trace in the writer's shape, else
    None (the caller loads it through the checked reader). ``window``: the bytes read at a time
    (:func:`agentloop.analysis._fastread.read_records`); from ``split_bytes`` a second process
    reads the later half (:mod:`agentloop.analysis._fastsplit`)."""
    got: dict[str, Any] = {}
    if not fast_fields(path, lambda f, n: got.update(f), window, split_bytes):
        return None
    names = got["call_names"]  # the labels handed as Arrow strings (_fastreport.calls)
    got["call_names"] = {
        k: v.to_pylist() if isinstance(v, pa.Array) else v for k, v in names.items()
    }
    return Columns(**got)


def fast_fields(
    path: Path,
    out: Out,
    window: int = _fastread.WINDOW,
    split_bytes: int = _fastsplit.SPLIT_BYTES,
) -> bool:
    """:func:`fast_columns`, each group of :class:`Columns` fields handed to ``out`` as it is
    made (with the number of spans), its arrays read-only (a cache writer may read them
    meanwhile) and dropped here once handed: a million spans' columns need not all be held at
    once. False when the trace is not clean: what was handed is void."""
    try:
        with path.open("rb", buffering=0) as f:
            _build(f, path, window, split_bytes, out)
    except (NotClean, msgspec.MsgspecError, TraceFileError, ValueError, OSError):
        return False  # orjson's and UnicodeDecodeError are ValueErrors
    return True


def _build(f: FileIO, path: Path, window: int, split_bytes: int, out: Out) -> None:
    """Hand the columns of the trace open in ``f`` to ``out``; NotClean (or msgspec's,
    orjson's, the header's error) when the screen does not recognise it. Each value is dropped
    once its last use here is past (the span columns are handed first: most of them are)."""
    got = _fastsplit.read_records(f, path, window, split_bytes)
    run, end = got.run, got.end
    if not got.is_start.any():
        raise NotClean("no spans")
    st = got.starts.columns()
    ends, model, tool = got.ends.columns()
    agents = got.starts.agents.values
    r = _records(st, ends, got.is_start, got.refs)
    del got, ends  # the windows' arrays, joined; the end records' instants, now in r
    _freed(len(r["t0"]))
    keep = _kept(r["kind"], r["parent"], r["after_off"])
    if not keep.all():
        run = _late_header(run, st, r, keep, f, path)
    s = _graph(r, keep, end)
    del r["is_start"]  # its last use
    trace = Trace(path, run, {}, end)  # the header and end record: what the formulas read
    end_kind, kept = r["kind"][r["eid"]], keep[r["eid"]]
    is_tool, is_model = end_kind == _KIND["tool"], end_kind == _KIND["model"]
    del end_kind
    if not kept.all():  # the reader types the set-up's and check's spans too, then drops them
        _tools(tool, *tool.rows(is_tool & ~kept, r["eid"]), st["tool_name"], len(keep))
        no_kids = np.zeros(len(keep), bool)
        model_columns(trace, model, *model.rows(is_model & ~kept, r["eid"]), r, no_kids)
    eid, n = s["eid"], len(s["t0"])
    _hand(out, _spans(run, end, st, agents, r, keep, s), n)
    del r["ids"], r["after_off"], r["after_idx"], r["t1"]  # s's (its t1 is its own array)
    _freed(n)
    names = take(r.pop("names"), np.flatnonzero(keep)) if not keep.all() else r.pop("names")
    st.pop("name")
    named = st.pop("tool_name")
    named = named if keep.all() else named[keep]
    _hand(out, {"names": names, **_tools(tool, *tool.rows(is_tool & kept, eid), named, n)}, n)
    del names, named, tool, is_tool
    _freed(n)
    # the calls before the model columns: the start values (st) are dropped before those are
    # made, and the model columns' big group is written while little else is held
    _hand(out, calls(trace, st, agents, model, r, keep, s["kind"] == _KIND["model"]), n)
    del st, r
    _freed(n)
    has_kids = np.bincount(s["parent"][s["parent"] >= 0], minlength=n) > 0
    models = model_columns(trace, model, *model.rows(is_model & kept, eid), s, has_kids, True)
    del has_kids, model
    _hand(out, models, n)
    del models
    _freed(n)
    # last, the copies only the Columns and the cache read, made when the least is held (made
    # with the span columns, they were 30 MB of a million spans' peak)
    after_idx = s.pop("after_idx").astype(I64, copy=False)  # int32 while read
    _hand(out, {"after_off": s.pop("after_off"), "after_idx": after_idx}, n)
    del after_idx
    _hand(out, {"parent": s.pop("parent").astype(I64, copy=False)}, n)  # int32 while read
    _hand(out, {"ids": as_ids(s.pop("ids"))}, n)  # the writer's: made from their numbers


def _spans(
    run: RunHeader,
    end: EndRecord | None,
    st: dict[str, Any],
    agents: list[str],
    r: dict[str, Any],
    keep: np.ndarray,
    s: dict[str, Any],
) -> dict[str, Any]:
    """The first fields handed over: the header's and the span columns but the links and the
    ids (handed last: :func:`_build`); the in-flight flags taken out of ``s`` (nothing here
    reads them again)."""
    return {
        "header": run.raw,
        "end": None if end is None else end.raw,
        "problems": () if end is not None else (NO_END,),
        "kinds": _encode(s["kind"], F.KINDS),
        "statuses": _encode(s["status"], F.STATUSES),
        "in_flight": s.pop("in_flight"),
        **{k: s[k] for k in ("t0", "t1")},
        "end_ns": s["end_ns"],
        "trims": (),  # no span_event records (handed over), no older trims (above)
        "outside": outside(r, keep, s),
        "step_label": step_labels(st, agents, keep, s["kind"] == _KIND["step"]),
    }


def _freed(n: int) -> None:
    """Give what was just dropped back to the system (the C heap's, Arrow pool's free pages)
    for a big trace: what the builder no longer holds leaves its peak, and the cache's writer
    takes pages for the file meanwhile, which recently freed ones serve cheaply (a cold
    ``whatif`` of a million spans peaked at 422-461 MB without, 388-401 MB with, no slower:
    docs/performance.md). A walk of the heap: not for a small trace's."""
    if n >= _FREED_SPANS:
        release_heap(arrow=True)


def _hand(out: Out, fields: dict[str, Any], n: int) -> None:
    """``fields`` to ``out``, their arrays made read-only first (none is written after)."""
    for v in fields.values():
        if isinstance(v, np.ndarray):
            v.flags.writeable = False
    out(fields, n)


def _records(
    st: dict[str, Any], ends: dict[str, Any], is_start: np.ndarray, refs: Refs
) -> dict[str, Any]:
    """Every span's raw columns, and the reader's checks of the records' ids and order: every
    id starts once, every span_end names a span that started before it, once, and not earlier
    than its start; the screen's: parents and ``after`` spans known and started before."""
    n, m = len(st["t"]), len(ends["t"])
    ids, (eid, parent, after_idx), counts = refs.resolved()
    after_off = np.zeros(n + 1, index_type(len(after_idx)))  # as the cache and columns_of
    np.cumsum(counts, out=after_off[1:])
    del counts
    # each check a chunk at a time: whole, their temporaries were 30 MB of a million spans'
    if m and ((eid < 0).any() or not ended_after_start(is_start, eid)):
        raise NotClean("a span_end names a span that did not start before it")
    ended = np.zeros(n, np.bool_)
    ended[eid] = True
    if int(ended.sum()) != m:
        raise NotClean("a span ended twice")
    t0, t1e = st["t"], ends["t"]
    if any_in_chunks(m, lambda a, b: t1e[a:b] < t0[eid[a:b]]):
        raise NotClean("a span ends before it starts")
    if any_in_chunks(n, lambda a, b: (parent[a:b] < -1) | (parent[a:b] >= np.arange(a, b))):
        raise NotClean("a parent unknown or not started before its span")
    if any_in_chunks(n, lambda a, b: unknown_after(after_off, after_idx, a, b)):
        raise NotClean("an 'after' span unknown or not started before its span")
    status = np.full(n, F.STATUSES.index("in_flight"), _CODE)
    status[eid] = ends["status"]
    t1 = np.full(n, -1, I64)
    t1[eid] = t1e
    return {
        "ids": ids,
        "kind": st["kind"],
        "names": st["name"],
        "eid": eid,
        "is_start": is_start,  # where each end record is, read when a set-up span's is
        "parent": parent,
        "after_off": after_off,
        "after_idx": after_idx,
        "t0": t0,
        "t1": t1,  # -1: in flight
        "status": status,
    }


def _kept(kind: np.ndarray, parent: np.ndarray, after_off: np.ndarray) -> np.ndarray:
    """The spans the analysis sees: not a set-up or check root span (OUTSIDE_KINDS, no parent,
    no ``after``) nor under one, as the reader keeps them out of ``Trace.spans``."""
    out = np.isin(kind, [_KIND[k] for k in OUTSIDE_KINDS]) & (parent < 0)
    out &= np.diff(after_off) == 0
    under = parent >= 0
    while out.any():  # one round per level of nesting under a set-up span
        grown = out | (under & out[np.maximum(parent, 0)])
        if np.array_equal(grown, out):
            break
        out = grown
    kept: np.ndarray = ~out
    return kept


def _graph(r: dict[str, Any], keep: np.ndarray, end: EndRecord | None) -> dict[str, Any]:
    """The kept spans' columns, renumbered, with the Graph's view: in-flight spans ending at
    the run's end; the end record not before the first root span (the reader's check).
    Every span kept (a trace without set-up or check spans): ``r``'s own arrays, not copies
    (50 MB of a million spans' peak)."""
    whole = bool(keep.all())
    new = np.cumsum(keep) - 1

    def kept(a: np.ndarray) -> np.ndarray:
        return a if whole else a[keep]

    def renumbered(idx: np.ndarray) -> np.ndarray:
        return idx if whole else new[idx]

    aft = keep[owners(r["after_off"])] if not whole else None
    if not whole and not keep[r["after_idx"][aft]].all():
        raise NotClean("an 'after' names a set-up or check span: the Graph notes it")
    after_off = r["after_off"]
    if not whole:
        after_off = np.zeros(int(keep.sum()) + 1, r["after_off"].dtype)
        np.cumsum(np.diff(r["after_off"])[keep], out=after_off[1:])
    parent = kept(r["parent"])
    t0, t1 = kept(r["t0"]), kept(r["t1"])
    in_flight = t1 < 0
    roots = t0[parent < 0]
    if end is not None:
        end_ns = end.t
        if roots.size and end_ns < roots.min():
            raise NotClean("the run ends before its run span started")
    else:
        end_ns = int(max(t0.max(initial=0), t1.max(initial=0)))
    return {
        "eid": renumbered(r["eid"]),
        "ids": r["ids"] if whole else take(as_ids(r["ids"]), np.flatnonzero(keep)),
        "kind": kept(r["kind"]),
        "status": kept(r["status"]),
        "parent": parent if whole else np.where(parent >= 0, new[parent], -1),
        "after_off": after_off,
        "after_idx": renumbered(r["after_idx"] if whole else r["after_idx"][aft]),
        "t0": t0,
        "t1": np.where(in_flight, end_ns, t1),
        "in_flight": in_flight,
        "end_ns": int(end_ns),
    }


def _late_header(
    run: RunHeader, st: dict[str, Any], r: dict[str, Any], keep: np.ndarray, f: FileIO, path: Path
) -> RunHeader:
    """The header with what the set-up span learnt (:func:`agentloop.trace.reader.
    late_header`), from its end record's attributes as written (its line, read again)."""
    outside: dict[str, SpanRecord] = {}
    pos_e = np.flatnonzero(~r["is_start"])  # where each end record is
    for j in np.flatnonzero(~keep & (r["parent"] < 0) & (r["kind"] == _KIND["setup"])).tolist():
        k = np.flatnonzero(r["eid"] == j)
        attrs = {} if not k.size else _attrs_at(f, int(pos_e[k[0]]) + 1)
        sid, name = as_ids(r["ids"])[j].as_py(), st["name"][j].as_py()  # the reader took them out
        outside[sid] = SpanRecord(sid, None, "setup", name, int(st["t"][j]), [], attrs=attrs)
    return late_header(run, outside, path)


def _attrs_at(f: FileIO, line: int) -> dict[str, Any]:
    """The ``attrs`` of the record on line ``line`` (0: the header), as written: read again
    from the file already read (the same descriptor, so the same file)."""
    f.seek(0)
    with open(f.fileno(), "rb", closefd=False) as lines:
        # the set-up ends before the run starts: a few lines in
        text = next(itertools.islice(lines, line, None), b"")  # gone: orjson refuses
    attrs = orjson.loads(text).get("attrs")
    return attrs if type(attrs) is dict else {}


def _encode(codes: np.ndarray, values: list[str] | tuple[str, ...]) -> pa.DictionaryArray:
    """``values[codes]`` dictionary-encoded as Arrow's ``dictionary_encode`` does it: the
    dictionary in order of first appearance."""
    got, order = _first_seen(codes, values)
    return pa.DictionaryArray.from_arrays(pa.array(got), pa.array(order, pa.string()))


def _first_seen(codes: np.ndarray, values: list[str] | tuple[str, ...]) -> tuple[Any, list[str]]:
    """``codes`` (into ``values``) renumbered in order of first appearance, and the values in
    that order."""
    seen, first = np.unique(codes, return_index=True)
    order = seen[np.argsort(first)]
    renumber = np.zeros(len(values), np.int32)
    renumber[order] = np.arange(len(order), dtype=np.int32)
    return renumber[codes], [values[c] for c in order.tolist()]


def _tools(
    tool: Taken, rows: np.ndarray, span: np.ndarray, named: np.ndarray, n: int
) -> dict[str, Any]:
    """The finished tool spans' category (dictionary-encoded in start order, as
    ``columns_of``'s) and queue time; whether each tool span name books one category. The
    reader's tool checks: a named tool (``gen_ai.tool.name``), its output text."""
    c = tool.cols
    code = c["tool"][rows]
    empty = tool.codes.index("") if "" in tool.codes else NONE
    if (code < 0).any() or (code == empty).any() or (c["output"][rows] == 0).any():
        raise NotClean("a tool span's end attributes")
    queued = np.zeros(n, I64)
    queued[span] = c["queued"][rows]
    codes, dictionary = _first_seen(code, tool.codes)
    cats = [tool_category(t, {A.GEN_AI_TOOL_NAME: t}) for t in dictionary]
    at = np.zeros(n, np.int32)
    at[span] = codes
    has = np.zeros(n, np.bool_)
    has[span] = True
    category = pa.DictionaryArray.from_arrays(pa.array(at, mask=~has), pa.array(cats, pa.string()))
    # one category per span name: each (name, tool) pair's name appears once (``named``: each
    # tool span's name as a code, coded as the records were read)
    name_code = named[span].astype(I64)
    pairs = np.unique(name_code * max(len(cats), 1) + codes)
    one = len(np.unique(pairs // max(len(cats), 1))) == len(pairs)
    return {"tool_category": category, "queued_ns": queued, "tools_by_name": one}
