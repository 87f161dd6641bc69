"""The fast cold builder's model columns: each call's attribution, usage and lateness, on arrays.

For :mod:`agentloop.analysis.fastcols`, from the finished model calls' typed end attributes.

The formulas are their owners' (:func:`agentloop.analysis.attribution.model_parts`,
:func:`agentloop.model.timing.split_ns`, :func:`agentloop.analysis.lateness.of_trace`) on
arrays, in their order of operations so that the floats agree to the bit; the reader's checks
of a model span's end attributes that the Structs do not make (instants in order, an attempt
not ending before it starts, a finite lateness bound) are made here, NotClean otherwise.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from agentloop.analysis import _fastshape as F
from agentloop.analysis._fastshape import NotClean
from agentloop.analysis.agents import call_tier, recorded_tiers
from agentloop.analysis.columnar import PART_COLUMNS, USAGE_COLUMNS
from agentloop.analysis.graph import fallback_tps
from agentloop.analysis.lateness import Lateness
from agentloop.model.timing import late_fraction
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace

I64 = np.int64
_MAX_ROUND = float(2**62)  # round() of more than any span's ns: min() with the span keeps the span


_REQUIRED = ("step", "inp", "out", "rea", "cac", "timing", "attempts", "wait_ns")


def model_columns(
    trace: Trace,
    ends: list[F.SpanEnd],
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
    ma = F.end_attrs(ends, rows)
    cols = {f: list(map(operator.attrgetter(f), ma)) for f in _REQUIRED}
    if any(msgspec.UNSET in c for c in cols.values()):
        raise NotClean("a model span's end attributes lack a key the writer writes")
    if set(map(type, [a.output for a in ma])) - {F.Output} or [a.unknown for a in ma].count(
        msgspec.UNSET
    ) != len(ma):
        raise NotClean("a model span's output, or an imported call's unsplit phases")
    if [a.trimmed for a in ma].count(msgspec.UNSET) != len(ma):
        # only a model span's are read (context_window.recorded_trims), by the checked path
        raise NotClean("an older trace's trims, in its model spans' attributes")
    k = len(ma)
    num = {f: np.fromiter(cols[f], I64, k) for f in ("inp", "out", "rea", "cac", "wait_ns")}
    step = np.fromiter([v or 0 for v in cols["step"]], I64, k)
    usage = np.stack([num["inp"], num["cac"], num["rea"], num["out"], step], axis=1)
    tm = _timing(cols["timing"])
    wait, retry = _attempts(cols["attempts"], num["wait_ns"])
    dur = s["t1"][span] - s["t0"][span]
    failed = s["status"][span] == F.STATUSES.index("error")
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
