"""Builds a clean trace's :class:`Columns` without a Python object per span: the cold path.

The checked path (:func:`agentloop.trace.reader.load_trace`, then
:func:`agentloop.analysis.graph.build_graph`, then :func:`agentloop.analysis.columnar.columns_of`)
builds a ``SpanRecord``, typed views and Graph lists for every span: 5.5x the time of
``orjson.loads`` on every line for a million spans. Here msgspec decodes each span record into
the typed Structs of :mod:`agentloop.analysis._fastshape` (in C), the columns are taken from
them in whole-list passes, and the reader's checks that span records (ids, order, instants,
the model and tool end attributes) must pass are made on the arrays.

This is a screen, never a second door: :func:`fast_columns` returns None for anything it does
not recognise as a clean trace in the shape the writer writes (a line msgspec rejects, an
unknown record type, ``span_event`` records, set-up and check spans, an id started or ended
twice, a parent or ``after`` span that did not start before, a cut last line, an attribute
outside the writer's shape, ...), and the caller hands the whole file to the checked path,
which keeps its own errors and notes. What it accepts, the checked path accepts with the same
values (``tests/test_fastcols.py`` compares both paths' Columns field by field, and fuzzes).
The formulas are the checked path's owners' (:func:`agentloop.model.timing.split_ns` is
vectorised in :func:`_split`, kept beside its source's order of operations so the floats agree).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from agentloop.analysis import _fastshape as F
from agentloop.analysis.agents import call_tier, recorded_tiers, step_text
from agentloop.analysis.attribution import tool_category
from agentloop.analysis.columnar import PART_COLUMNS, USAGE_COLUMNS, Columns
from agentloop.analysis.graph import fallback_tps
from agentloop.analysis.lateness import Lateness
from agentloop.errors import TraceFileError
from agentloop.model.timing import late_fraction
from agentloop.trace import attrs as A
from agentloop.trace.fields import Where
from agentloop.trace.reader import NO_END, OUTSIDE_KINDS, Trace
from agentloop.trace.schema import EndRecord, RunHeader, parse_header, parse_record

I64 = np.int64
_BOUNDARY = b'}\n{"type":"'  # between two records as the writer writes them
_MAX_ROUND = float(2**62)  # round() of more than any span's ns: min() with the span keeps the span


class NotClean(Exception):
    """The trace is not one the screen recognises: the checked path decides what it is."""


def fast_columns(path: Path) -> Columns | None:
    """The columns of the trace at ``path`` if it is a clean trace in the writer's shape, else
    None (the caller loads it through the checked reader)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return _build(data, path)
    except (NotClean, msgspec.MsgspecError, TraceFileError, ValueError):
        return None  # orjson's and UnicodeDecodeError are ValueErrors


def _decode(data: bytes, path: Path) -> tuple[RunHeader, EndRecord | None, list[Any]]:
    """The header (checked), the end record (checked) and the span records (typed).

    The reader takes a line as a record (``bytes.splitlines``); msgspec decodes the records one
    after the other, whatever the lines. They agree when every line boundary is a record's
    closing brace, a newline and the next record's opening (``}\\n{"type":"``, as the writer
    writes): a brace, then a newline, then a brace cannot sit inside a JSON value, so no record
    spans two lines, and as many records as lines put one on each. No ``\\r`` either (the
    reader splits there too), and UTF-8 throughout (orjson refuses a line that is not).
    """
    if not data.isascii():
        data.decode()
    head = data.find(b"\n")
    stop = len(data) - data.endswith(b"\n")
    lines = data.count(b"\n", 0, stop) + 1
    if (
        head < 0
        or data.endswith(b"\n\n")
        or data.find(b"\r") >= 0
        or data.count(_BOUNDARY, 0, stop) != lines - 1
    ):
        raise NotClean("not one record a line in the writer's shape")
    run = parse_header(orjson.loads(data[:head]), path)
    recs = F.decoder().decode_lines(memoryview(data)[head + 1 : stop])
    end = None
    if recs and type(recs[-1]) is F.RunEnd:
        last = data[data.rfind(b"\n", 0, stop) + 1 : stop]
        rec = parse_record(orjson.loads(last), Where(path, lines))
        if type(rec) is not EndRecord:
            raise NotClean("end")
        end = rec
        recs.pop()
    return run, end, recs


def _build(data: bytes, path: Path) -> Columns:
    run, end, recs = _decode(data, path)
    flags = list(map(F.SpanStart.__instancecheck__, recs))
    starts = list(itertools.compress(recs, flags))
    ends = list(itertools.compress(recs, map(operator.not_, flags)))
    if not starts or not set(map(type, ends)) <= {F.SpanEnd}:
        raise NotClean("no spans, or an end record before the last line")
    is_start = np.array(flags, np.bool_)
    del recs, flags
    s = _spans(starts, ends, is_start, end)
    trace = Trace(path, run, {}, end)  # the header and end record: what the formulas read
    n = len(starts)
    kinds, names = s["kinds"], s["names"]
    code = {k: i for i, k in enumerate(kinds.dictionary.to_pylist())}
    if OUTSIDE_KINDS & code.keys():
        raise NotClean("set-up or check spans")
    kcode = np.asarray(kinds.indices, I64)
    eid, end_kind = s["eid"], kcode[s["eid"]]
    attrs = [F.NO_ATTRS if e.attrs is None else e.attrs for e in ends]
    names = pa.array(names, pa.string())
    tools = _tools(attrs, eid, end_kind == code.get("tool", -1), names, n)
    has_kids = np.bincount(s["parent"][s["parent"] >= 0], minlength=n) > 0
    models = _models(trace, attrs, eid, end_kind == code.get("model", -1), s, has_kids)
    return Columns(
        header=run.raw,
        end=None if end is None else end.raw,
        problems=() if end is not None else (NO_END,),
        ids=s["ids"],
        kinds=kinds,
        names=names,
        statuses=s["statuses"],
        step_label=_step_labels(starts, s["names"], kcode == code.get("step", -1)),
        parent=s["parent"],
        after_off=s["after_off"],
        after_idx=s["after_idx"],
        t0=s["t0"],
        t1=s["t1"],
        in_flight=s["in_flight"],
        end_ns=s["end_ns"],
        **tools,
        **models,
    )


def _spans(
    starts: list[F.SpanStart], ends: list[F.SpanEnd], is_start: np.ndarray, end: EndRecord | None
) -> dict[str, Any]:
    """The span columns, and the reader's checks of the records' ids and order: every id
    starts once, every span_end names a span that started before it, once, and not earlier
    than its start; parents and ``after`` spans started before the span (the Graph's notes
    for those are the checked path's: not clean here)."""
    n, m = len(starts), len(ends)
    afters = [r.after for r in starts]
    after_off = np.zeros(n + 1, I64)
    np.cumsum(np.fromiter(map(len, afters), I64, n), out=after_off[1:])
    ids, (eid, parent, after_idx) = _resolve(
        [r.id for r in starts],
        [e.id for e in ends],
        [r.parent for r in starts],
        list(itertools.chain.from_iterable(afters)),
    )
    pos_s, pos_e = np.flatnonzero(is_start), np.flatnonzero(~is_start)
    if m and ((eid < 0).any() or (pos_s[eid] > pos_e).any()):
        raise NotClean("a span_end names a span that did not start before it")
    if m and (np.bincount(eid, minlength=n) > 1).any():
        raise NotClean("a span ended twice")
    t0 = np.fromiter([r.t for r in starts], I64, n)
    t1e = np.fromiter([e.t for e in ends], I64, m)
    if (t1e < t0[eid]).any():
        raise NotClean("a span ends before it starts")
    if ((parent < -1) | (parent >= np.arange(n))).any():
        raise NotClean("a parent unknown or not started before its span")
    owner = np.repeat(np.arange(n), np.diff(after_off))
    if ((after_idx < 0) | (after_idx >= owner)).any():
        raise NotClean("an 'after' span unknown or not started before its span")
    roots = t0[parent < 0]
    if end is not None:
        end_ns = end.t
        if roots.size and end_ns < roots.min():
            raise NotClean("the run ends before its run span started")
    else:
        end_ns = int(max(t0.max(initial=0), t1e.max(initial=0)))
    t1 = np.full(n, end_ns, I64)
    t1[eid] = t1e
    in_flight = np.ones(n, np.bool_)
    in_flight[eid] = False
    statuses = np.full(n, "in_flight", object)
    statuses[eid] = [e.status for e in ends]
    return {
        "ids": ids,
        "kinds": pa.array([r.kind for r in starts], pa.string()).dictionary_encode(),
        "names": [r.name for r in starts],
        "statuses": pa.array(statuses, pa.string()).dictionary_encode(),
        "eid": eid,
        "parent": parent,
        "after_off": after_off,
        "after_idx": after_idx,
        "t0": t0,
        "t1": t1,
        "in_flight": in_flight,
        "end_ns": int(end_ns),
        "status_of_end": statuses,
    }


def _resolve(ids: list[str], *refs: list[Any]) -> tuple[pa.Array, list[np.ndarray]]:
    """The ids as an Arrow array, and each list of references as span indices (-1: None, -2:
    an id that never started); NotClean when an id starts twice. The writer's ids ("s1",
    "s2", ... in start order) are read as numbers in Arrow; any others through a dict."""
    n, arr = len(ids), pa.array(ids, pa.string())
    own = _writer_numbers(arr)
    if own is not None and np.array_equal(own, np.arange(1, n + 1)):
        out = [_writer_numbers(pa.array(r, pa.string())) for r in refs]
        if all(k is not None for k in out):
            return arr, [np.where(k > n, -2, k - 1) for k in out]  # type: ignore[operator]
    idx: dict[str | None, int] = dict(zip(ids, range(n), strict=True))
    if len(idx) != n:
        raise NotClean("a span started twice")
    idx[None] = -1  # a root's parent (an id is a string)
    return arr, [np.fromiter(map(idx.get, r, itertools.repeat(-2)), I64, len(r)) for r in refs]


def _writer_numbers(a: pa.Array) -> np.ndarray | None:
    """k for each "s<k>" of ``a`` (k >= 1, written as the writer writes it), 0 for a null; None
    when another string is there."""
    digits = pc.utf8_slice_codeunits(a, 1)
    try:
        k = pc.cast(digits, pa.int64())
    except pa.ArrowInvalid:
        return None
    ok = pc.and_(
        pc.and_(pc.starts_with(a, "s"), pc.greater(k, 0)),
        pc.equal(pc.cast(k, pa.string()), digits),
    )
    if pc.all(ok).as_py() not in (True, None):
        return None
    got: np.ndarray = np.asarray(pc.fill_null(k, 0), I64)
    return got


def _step_labels(starts: list[F.SpanStart], names: list[str], is_step: np.ndarray) -> pa.Array:
    """A step span's label (:func:`agentloop.analysis.agents.step_text`), else null."""
    labels = np.full(len(starts), None, object)
    rows = np.flatnonzero(is_step)
    out = []
    for j in rows.tolist():
        a = starts[j].attrs
        if a is None:
            out.append(names[j])
        else:
            who = {A.STEP: a.step, A.GEN_AI_AGENT_NAME: a.agent, A.AGENT_INVOCATION: a.inv}
            out.append(step_text(who, names[j]))
    labels[rows] = out
    return pa.array(labels, pa.string())


def _tools(
    attrs: list[F.EndAttrs], eid: np.ndarray, is_tool: np.ndarray, names: pa.Array, n: int
) -> dict[str, Any]:
    """The finished tool spans' category (dictionary-encoded in start order, as
    ``columns_of``'s) and queue time; whether each tool span name books one category. The
    reader's tool checks: a named tool (``gen_ai.tool.name``), its output text."""
    rows = np.flatnonzero(is_tool)
    rows = rows[np.argsort(eid[rows], kind="stable")]
    span = eid[rows]
    ta = [attrs[k] for k in rows.tolist()]
    tool = [a.tool for a in ta]
    if (
        not set(map(type, tool)) <= {str}
        or "" in tool
        or F.Output in set(map(type, [a.output for a in ta]))
    ):
        raise NotClean("a tool span's end attributes")
    queued = np.zeros(n, I64)
    queued[span] = np.fromiter([a.queued_ns for a in ta], I64, len(ta))
    by_tool = pa.array(tool, pa.string()).dictionary_encode()
    codes = np.asarray(by_tool.indices, np.int32)
    cats = [tool_category(t, {A.GEN_AI_TOOL_NAME: t}) for t in by_tool.dictionary.to_pylist()]
    at = np.zeros(n, np.int32)
    at[span] = codes
    has = np.zeros(n, np.bool_)
    has[span] = True
    category = pa.DictionaryArray.from_arrays(pa.array(at, mask=~has), pa.array(cats, pa.string()))
    # one category per span name: each (name, tool) pair's name appears once
    name_code = np.asarray(names.take(pa.array(span)).dictionary_encode().indices, I64)
    pairs = np.unique(name_code * max(len(cats), 1) + codes)
    one = len(np.unique(pairs // max(len(cats), 1))) == len(pairs)
    return {"tool_category": category, "queued_ns": queued, "tools_by_name": one}


_REQUIRED = ("step", "inp", "out", "rea", "cac", "timing", "attempts", "wait_ns")


def _models(
    trace: Trace,
    attrs: list[F.EndAttrs],
    eid: np.ndarray,
    is_model: np.ndarray,
    s: dict[str, Any],
    has_kids: np.ndarray,
) -> dict[str, Any]:
    """The model columns: the re-timed spans' parts (finished, childless), every finished
    call's usage and lateness, in start order (the reader's and the Graph's)."""
    rows = np.flatnonzero(is_model)
    rows = rows[np.argsort(eid[rows], kind="stable")]
    span = eid[rows]
    ma = [attrs[k] for k in rows.tolist()]
    cols = {f: [getattr(a, f) for a in ma] for f in _REQUIRED}
    if any(msgspec.UNSET in c for c in cols.values()):
        raise NotClean("a model span's end attributes lack a key the writer writes")
    if set(map(type, [a.output for a in ma])) - {F.Output} or [a.unknown for a in ma].count(
        msgspec.UNSET
    ) != len(ma):
        raise NotClean("a model span's output, or an imported call's unsplit phases")
    k = len(ma)
    num = {f: np.fromiter(cols[f], I64, k) for f in ("inp", "out", "rea", "cac", "wait_ns")}
    step = np.fromiter([v or 0 for v in cols["step"]], I64, k)
    usage = np.stack([num["inp"], num["cac"], num["rea"], num["out"], step], axis=1)
    tm = _timing(cols["timing"])
    wait, retry = _attempts(cols["attempts"], num["wait_ns"])
    dur = s["t1"][span] - s["t0"][span]
    failed = s["status_of_end"][span] == "error"
    vis = np.maximum(0, num["out"] - num["rea"])
    tps = _fallbacks(trace, [a.tier for a in ma])
    base, reasoning, decode, tail, otps = _split(tm, num["rea"], vis, tps)
    retry = np.where(~tm["timed"] & failed & (retry == 0), dur - wait, retry)
    overhead = dur - (base + reasoning + decode + tail + wait + retry)
    parts = np.stack(
        [base, reasoning, decode, tail, wait, retry, overhead, num["inp"], num["rea"], vis], 1
    )
    keep = ~has_kids[span]
    is_m = np.zeros(len(has_kids), np.bool_)
    is_m[span[keep]] = True
    return {
        "is_model": is_m,
        "parts": parts[keep].reshape(-1, len(PART_COLUMNS)),
        "output_tps": otps[keep],
        "timed": tm["timed"][keep],
        "cached_tokens": num["cac"][keep],
        "usage": usage.reshape(-1, len(USAGE_COLUMNS)),
        "lateness": _lateness(ma),
        "unsplit": (),
    }


def _timing(timings: list[F.Timing | None]) -> dict[str, np.ndarray]:
    """The instants of each call's timing (-1: unknown, or no timing) and whether it has one;
    NotClean unless the known ones are in order, as the reader's fast path requires."""
    k = len(timings)
    timed = np.fromiter([t is not None for t in timings], np.bool_, k)
    got = [t for t in timings if t is not None]
    out: dict[str, np.ndarray] = {"timed": timed}
    for f in ("t_send", "t_first", "t_first_visible", "t_last", "t_end"):
        col = np.full(k, -1, I64)
        col[timed] = np.fromiter(
            [-1 if v is None else v for v in map(operator.attrgetter(f), got)], I64, len(got)
        )
        out[f] = col
    prev = out["t_send"]
    for f in ("t_first", "t_first_visible", "t_last", "t_end"):
        v = out[f]
        if (timed & (v >= 0) & (v < prev)).any():
            raise NotClean(f"timing.{f} out of order")
        prev = np.where(v >= 0, v, prev)
    return out


def _attempts(attempts: list[list[F.Attempt]], wait_ns: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each call's back-off (its attempts' waits, or its ``wait_ns`` without attempts) and the
    service time of its failed attempts (:func:`agentloop.analysis.attribution.model_parts`)."""
    k = len(attempts)
    off = np.zeros(k + 1, I64)
    np.cumsum(np.fromiter(map(len, attempts), I64, k), out=off[1:])
    flat = list(itertools.chain.from_iterable(attempts))
    ts = np.fromiter([a.t_start for a in flat], I64, len(flat))
    te = np.fromiter([a.t_end for a in flat], I64, len(flat))
    if (te < ts).any():
        raise NotClean("an attempt ends before it starts")
    failed = np.fromiter([a.error is not None for a in flat], np.bool_, len(flat))
    waits = np.fromiter([a.wait_ns for a in flat], I64, len(flat))

    def per_call(v: np.ndarray) -> np.ndarray:
        cs = np.zeros(len(v) + 1, I64)
        np.cumsum(v, out=cs[1:])
        sums: np.ndarray = cs[off[1:]] - cs[off[:-1]]
        return sums

    wait = np.where(np.diff(off) > 0, per_call(waits), wait_ns)
    return wait, per_call(np.where(failed, te - ts, 0))


def _fallbacks(trace: Trace, tiers_used: Sequence[str | None]) -> np.ndarray:
    """Each call's fallback output speed: its own tier's when the header lists several (the
    Graph's ``_models``), else the header tier's."""
    tps = fallback_tps(trace)
    tiers = recorded_tiers(trace)
    if len(tiers) <= 1:
        return np.full(len(tiers_used), tps)

    @functools.cache
    def own(t: str | None) -> float:
        prof = tiers[call_tier(trace, {A.TIER: t}, tiers)].profile
        return 0.0 if prof is None else prof.output_tps

    return np.fromiter(map(own, tiers_used), np.float64, len(tiers_used))


def _split(
    tm: dict[str, np.ndarray], n_r: np.ndarray, n_v: np.ndarray, fallback: np.ndarray
) -> tuple[np.ndarray, ...]:
    """:func:`agentloop.model.timing.split_ns` on arrays (-1: an unknown instant; a call
    without timing splits into zeros at its fallback speed, as ``model_parts`` books it)."""
    s, fv, la, e = tm["t_send"], tm["t_first_visible"], tm["t_last"], tm["t_end"]
    first = np.where(fv >= 0, fv, np.where(la >= 0, la, e))
    some = tm["timed"] & (first >= 0)
    ttv = np.where(some, np.maximum(0, first - s), 0)
    decode = np.where(some & (la >= 0), np.maximum(0, la - first), 0)
    own = (n_v >= 2) & (decode > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tps = np.where(own, (n_v - 1).astype(np.float64) * 1e9 / decode, fallback)
        x = n_r.astype(np.float64) * 1e9 / tps
    pos = tps > 0
    if not np.isfinite(x[some & pos]).all():
        raise NotClean("a reasoning time past any float")  # round() raises there: let it
    r = np.rint(np.minimum(np.where(pos, x, 0.0), _MAX_ROUND)).astype(I64)
    reasoning = np.where(some & pos, np.minimum(ttv, r), 0)
    tail = np.where(some & (e >= 0), np.maximum(0, e - np.where(la >= 0, la, first)), 0)
    return ttv - reasoning, reasoning, decode, tail, np.where(some, tps, fallback)


def _lateness(ma: list[F.EndAttrs]) -> Lateness:
    """The client's lateness over the calls that measured it
    (:func:`agentloop.analysis.lateness.of_trace`, added up in the same order)."""
    calls = [a for a in ma if a.bound is not None and isinstance(a.timing, F.Timing)]
    if not calls:
        return Lateness()
    bounds = [float(a.bound) for a in calls]  # type: ignore[arg-type]
    if not all(0 <= b < float("inf") for b in bounds):
        raise NotClean("timing_error_s")
    shares = []
    for a, b in zip(calls, bounds, strict=True):
        t = a.timing
        assert isinstance(t, F.Timing)
        decode = (t.t_last - t.t_first_visible) / 1e9 if t.t_last and t.t_first_visible else None
        call = (t.t_end - t.t_send) / 1e9 if t.t_end else None
        shares.append(late_fraction(b, decode, call))
    return Lateness(
        len(calls),
        sum(a.late for a in calls),
        max([0.0, *bounds]),
        max([0.0, *shares]),
        functools.reduce(operator.add, bounds, 0.0),
    )
