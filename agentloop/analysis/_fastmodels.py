"""The fast cold builder's model columns: each call's attribution, usage and lateness, on arrays.

For :mod:`agentloop.analysis.fastcols`, from the values of the finished model calls' end
attributes that the windows took (:class:`agentloop.analysis._fastwin.Taken`).

The formulas are their owners' (:func:`agentloop.analysis.attribution.model_parts`,
:func:`agentloop.model.timing.split_ns`, :func:`agentloop.analysis.lateness.of_trace`) on
arrays, in their order of operations so that the floats agree to the bit; the reader's checks
of a model span's end attributes that the Structs do not make (instants in order, an attempt
not ending before it starts, a finite lateness bound) are made here, NotClean otherwise.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import numpy as np

from agentloop.analysis import _fastshape as F
from agentloop.analysis._fastshape import NotClean
from agentloop.analysis._fastwin import Taken
from agentloop.analysis.agents import call_tier, recorded_tiers
from agentloop.analysis.columnar import PART_COLUMNS, USAGE_COLUMNS
from agentloop.analysis.graph import fallback_tps
from agentloop.analysis.lateness import Lateness
from agentloop.model.timing import late_fraction
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace

I64 = np.int64
_MAX_ROUND = float(2**62)  # round() of more than any span's ns: min() with the span keeps the span


_COUNTS = ("inp", "out", "rea", "cac", "wait_ns")  # -1: the key missing
_KEPT = ("tier", "attempts")  # what calls and _attempts read of the model values after
_INSTANTS = ("t_send", "t_first", "t_first_visible", "t_last", "t_end")  # -1: None


def model_columns(
    trace: Trace,
    model: Taken,
    rows: np.ndarray,
    span: np.ndarray,
    s: dict[str, Any],
    has_kids: np.ndarray,
    last: bool = False,
) -> dict[str, Any]:
    """The model columns: the re-timed spans' parts (finished, childless), every finished
    call's usage and lateness, in start order (the reader's and the Graph's); ``rows``: the
    calls' rows of ``model`` (:meth:`~agentloop.analysis._fastwin.Taken.rows`), ``span``
    their spans. ``last``: the caller's last use of ``model``'s values but its tiers (and
    its rows): each is dropped from it as it is taken (24 MB of a million spans')."""
    c = _checked(_taken(model, rows, last))
    num = {f: c[f] for f in _COUNTS}
    usage = np.stack([num["inp"], num["cac"], num["rea"], num["out"], c["step"]], axis=1)
    tm = _timing(c)
    wait, retry = _attempts(model, rows, num["wait_ns"])
    dur = s["t1"][span] - s["t0"][span]
    failed = s["status"][span] == F.STATUSES.index("error")
    vis = np.maximum(0, num["out"] - num["rea"])
    tps = _fallbacks(trace, c["tier"], model.codes)
    base, reasoning, decode, tail, otps = _split(tm, num["rea"], vis, tps)
    retry = np.where(~tm["timed"] & failed & (retry == 0), dur - wait, retry)
    overhead = dur - (base + reasoning + decode + tail + wait + retry)
    parts = np.stack(
        [base, reasoning, decode, tail, wait, retry, overhead, num["inp"], num["rea"], vis], 1
    )
    keep = ~has_kids[span]
    every = bool(keep.all())  # (a mask's copy of parts: 16 MB of a million spans')

    def kept(v: np.ndarray) -> np.ndarray:
        return v if every else v[keep]

    is_m = np.zeros(len(has_kids), np.bool_)
    is_m[kept(span)] = True
    return {
        "is_model": is_m,
        "parts": kept(parts).reshape(-1, len(PART_COLUMNS)),
        "output_tps": kept(otps),
        "timed": kept(tm["timed"]),
        "cached_tokens": kept(num["cac"]),
        "usage": usage.reshape(-1, len(USAGE_COLUMNS)),
        "lateness": _lateness(c),
        "unsplit": (),
    }


def _taken(model: Taken, rows: np.ndarray, last: bool) -> dict[str, np.ndarray]:
    """``model``'s values of ``rows``, each dropped from it as it is taken when ``last`` (but
    :data:`_KEPT`)."""
    c = {}
    for k in list(model.cols):
        c[k] = model.cols[k][rows]
        if last and k not in _KEPT:
            del model.cols[k]
    return c


def _checked(c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``c``, or NotClean when a call lacks a key the writer writes, or holds what only the
    checked path reads (an output text, unsplit phases, older trims)."""
    if (
        any((c[f] < 0).any() for f in _COUNTS)
        or (c["step_state"] == 2).any()  # the writer writes these keys: a missing one
        or (c["timing_state"] == 2).any()
        or (c["attempts"] < 0).any()
    ):
        raise NotClean("a model span's end attributes lack a key the writer writes")
    if (c["output"] != 0).any() or not c["unknown_unset"].all():
        raise NotClean("a model span's output, or an imported call's unsplit phases")
    if not c["trimmed_unset"].all():
        # only a model span's are read (context_window.recorded_trims), by the checked path
        raise NotClean("an older trace's trims, in its model spans' attributes")
    return c


def _timing(c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The instants of each call's timing (-1: unknown, or no timing) and whether it has one;
    NotClean unless the known ones are in order, as the reader's fast path requires."""
    out = {"timed": c["timed"], **{f: c[f] for f in _INSTANTS}}
    timed, prev = c["timed"], c["t_send"]
    for f in _INSTANTS[1:]:
        v = out[f]
        if (timed & (v >= 0) & (v < prev)).any():
            raise NotClean(f"timing.{f} out of order")
        prev = np.where(v >= 0, v, prev)
    return out


def _attempts(model: Taken, rows: np.ndarray, wait_ns: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each call's back-off (its attempts' waits, or its ``wait_ns`` without attempts) and the
    service time of its failed attempts (:func:`agentloop.analysis.attribution.model_parts`);
    ``rows``: the calls' rows, the attempts flattened in the order of all rows."""
    count = np.maximum(model.cols["attempts"], 0)
    off = np.zeros(len(count) + 1, I64)
    np.cumsum(count, out=off[1:])
    f = model.flat
    ts, te = f["t_start"], f["t_end"]
    bad = np.flatnonzero(te < ts)
    if bad.size:
        mine = np.zeros(len(count), np.bool_)
        mine[rows] = True
        if mine[np.searchsorted(off, bad, side="right") - 1].any():
            raise NotClean("an attempt ends before it starts")

    def per_call(v: np.ndarray) -> np.ndarray:
        cs = np.zeros(len(v) + 1, I64)
        np.cumsum(v, out=cs[1:])
        sums: np.ndarray = (cs[off[1:]] - cs[off[:-1]])[rows]
        return sums

    wait = np.where(count[rows] > 0, per_call(f["wait"]), wait_ns)
    return wait, per_call(np.where(f["failed"], te - ts, 0))


def _fallbacks(trace: Trace, tier: np.ndarray, codes: list[str]) -> np.ndarray:
    """Each call's fallback output speed: its own tier's (``tier``: a code of ``codes``) when
    the header lists several (the Graph's ``_models``), else the header tier's."""
    tps = fallback_tps(trace)
    tiers = recorded_tiers(trace)
    if len(tiers) <= 1:
        return np.full(len(tier), tps)

    def own(t: str | None) -> float:
        prof = tiers[call_tier(trace, {A.TIER: t}, tiers)].profile
        return 0.0 if prof is None else prof.output_tps

    seen = np.unique(tier)
    speed = np.array([own(codes[k] if k >= 0 else None) for k in seen.tolist()], np.float64)
    return speed[np.searchsorted(seen, tier)]


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


def _lateness(c: dict[str, np.ndarray]) -> Lateness:
    """The client's lateness over the calls that measured it
    (:func:`agentloop.analysis.lateness.of_trace`, added up in the same order)."""
    measured = ~c["bound_none"] & c["timed"]
    if not measured.any():
        return Lateness()
    bounds = c["bound"][measured].tolist()
    if not all(0 <= b < float("inf") for b in bounds):
        raise NotClean("timing_error_s")
    shares = []
    for b, send, first, last, end in zip(
        bounds,
        *(c[f][measured].tolist() for f in ("t_send", "t_first_visible", "t_last", "t_end")),
        strict=True,
    ):  # -1: None; a 0 is as falsy as None (of_trace's)
        decode = (last - first) / 1e9 if last > 0 and first > 0 else None
        call = (end - send) / 1e9 if end > 0 else None
        shares.append(late_fraction(b, decode, call))
    return Lateness(
        len(bounds),
        int(c["late"][measured].sum()),
        max([0.0, *bounds]),
        max([0.0, *shares]),
        functools.reduce(operator.add, bounds, 0.0),
    )
