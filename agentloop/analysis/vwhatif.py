"""What-if re-timing on columns: :func:`agentloop.analysis.whatif.whatif` for big traces.

The rule, the formulas and the result are :mod:`agentloop.analysis.whatif`'s; only the work is
done on arrays (:mod:`agentloop.analysis.vector`). A tier's speed model is asked once per
distinct (input, reasoning, visible, cached) token count, not once per model call.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from agentloop.analysis._fasttext import take
from agentloop.analysis.breakdown import category_order
from agentloop.analysis.cands import Cands, seg_max
from agentloop.analysis.columnar import F64, I64, Columns, frozen_rows, release_heap
from agentloop.analysis.vector import (
    VGraph,
    build,
    path_links,
    recorded,
    run_end,
    solve,
    tally_arrays,
)
from agentloop.analysis.whatif import CURVE_K, Contribution, Scenario, WhatIf
from agentloop.model.speed import SpeedProfile


def new_parts(vg: VGraph, sc: Scenario) -> I64:
    """New (base, reasoning, decode) ns per re-timed model span (rows in ``vg.models`` order),
    as :func:`agentloop.analysis.whatif.new_parts`."""
    c = vg.c
    measured = c.parts[:, 0:3]
    prof = sc.profile
    if prof is not None:
        out = measured.copy()
        timed = c.timed
        keys = np.stack([c.parts[:, 7], c.parts[:, 8], c.parts[:, 9], c.cached_tokens], axis=1)[
            timed
        ]
        if len(keys):
            out[timed] = _profile_parts(prof, keys)
        return out
    k, p = sc.speedup, sc.prefill_speedup
    base = measured[:, 0]
    if math.isinf(k):
        return np.stack([_div(base, p), base * 0, base * 0], axis=1)
    if k == 1 and p == 1:
        return measured.copy()
    return np.stack([_div(base, p), _div(measured[:, 1], k), _div(measured[:, 2], k)], axis=1)


def _profile_parts(prof: SpeedProfile, keys: I64) -> I64:
    """``round(x * 1e9)`` of ``prof.parts(input, reasoning, visible, cached)`` for each row of
    ``keys``: on arrays for a plain :class:`SpeedProfile` (:func:`speed_parts`, the same float
    operations in the same order, so the same bits), else asked once per distinct row."""
    if type(prof) is SpeedProfile:
        b, r, d = speed_parts(prof, keys[:, 0], keys[:, 1], keys[:, 2], keys[:, 3])
        return np.stack([np.rint(x * 1e9) for x in (b, r, d)], axis=1).astype(np.int64)
    uniq, inv = _distinct_rows(keys)
    vals = [prof.parts(*row) for row in uniq.tolist()]
    table = np.array(
        [[round(b * 1e9), round(r * 1e9), round(d * 1e9)] for b, r, d in vals], np.int64
    )
    return table[inv]


def _decode_s(prof: SpeedProfile, context: I64, n: I64) -> F64:
    """:meth:`SpeedProfile.decode_s` on arrays."""
    k = prof.tpot_ms_per_1k / 1e6
    nf = n.astype(np.float64)
    ctx = (n * np.maximum(0, context)).astype(np.float64)
    tri = (n * (n - 1)).astype(np.float64) / 2
    return np.where(n <= 0, 0.0, nf / prof.output_tps + k * (ctx + tri))


def speed_parts(
    prof: SpeedProfile, inp: I64, reasoning: I64, visible: I64, cached: I64
) -> tuple[F64, F64, F64]:
    """:meth:`SpeedProfile.parts` (seconds) for arrays of calls, operation for operation: every
    int is below 2**53, so each conversion is exact and each float operation rounds as
    Python's does (``tests/test_columnar.py`` compares the two on random calls)."""
    c = np.minimum(np.maximum(0, cached), np.maximum(0, inp))
    fresh = np.maximum(0, inp) - c
    ff, cf = fresh.astype(np.float64), c.astype(np.float64)
    pre = ff / prof.prefill_tps if prof.prefill_tps > 0 else np.zeros(len(ff))
    if prof.prefill_ms_per_1k:
        pre = pre + prof.prefill_ms_per_1k * ff * (cf + ff / 2) / 1e6
    if prof.cached_prefill_tps:
        pre = pre + cf / prof.cached_prefill_tps  # 0 where nothing was cached: x + 0.0 is x
    base = prof.base_latency_s + pre
    r = np.maximum(0, reasoning)
    return base, _decode_s(prof, inp, r), _decode_s(prof, inp + r, np.maximum(0, visible - 1))


def _distinct_rows(keys: I64) -> tuple[I64, I64]:
    """The distinct rows of ``keys`` and each row's index among them: one sort of a 1-D code
    (each column's rank among its own distinct values, combined), where ``np.unique(axis=0)``
    sorts the rows as opaque records (ten times slower on 200,000 calls)."""
    code = np.zeros(len(keys), np.int64)
    span = 1
    for col in keys.T:
        vals, rank = np.unique(col, return_inverse=True)
        span *= len(vals)
        if span >= 2**62:  # the code would overflow: sort the rows themselves
            uniq, inv = np.unique(keys, axis=0, return_inverse=True)
            return uniq, inv.reshape(-1)
        code = code * len(vals) + rank.reshape(-1)
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    return keys[first], inv.reshape(-1)


def _div(a: I64, x: float) -> I64:
    """``round(v / x)`` for each v, as Python rounds a float (half to even)."""
    return np.rint(a.astype(np.float64) / x).astype(np.int64)


def durations(vg: VGraph, parts: I64) -> I64:
    """Leaf durations with the model spans' base, reasoning and decode replaced."""
    dur = vg.recorded_dur.copy()
    m = vg.models
    dur[m] += parts.sum(axis=1) - vg.c.parts[:, 0:3].sum(axis=1)
    return dur


def _k_durations(vg: VGraph, p: float, k: float) -> I64:
    return durations(vg, new_parts(vg, Scenario("k", speedup=k, prefill_speedup=p)))


def predict_ns(vg: VGraph, sc: Scenario) -> int:
    """End-to-end time (ns) of the run re-timed under ``sc``."""
    (V,) = solve(vg, [durations(vg, new_parts(vg, sc))])
    return run_end(vg, V) - vg.start_ns


def _retimed(vg: VGraph, sc: Scenario) -> tuple[I64, I64, int, tuple[int, int] | None]:
    """``sc``'s new durations, the forward pass's instants V and run end, and the ends at
    infinite and measured output speed when one pass gives the whole curve
    (:func:`pair_ends`). The new parts are made again by who needs them (kept through the
    passes, they were 16 MB of a million spans' peak)."""
    dur = durations(vg, new_parts(vg, sc))
    p = _prefill(sc)
    # measured output speed with no prefill change is the recorded durations themselves
    one = vg.recorded_dur if p == 1 else _k_durations(vg, p, 1)
    V, A, Bv = solve(vg, [dur, _k_durations(vg, p, math.inf), one])
    ends = pair_ends(vg, A, Bv)
    # V alone outlives this: a copy, so the passes' sums it may be a column of can go
    return dur, V.copy(), run_end(vg, V), ends


def _prefill(sc: Scenario) -> float:
    return 1.0 if sc.profile is not None else sc.prefill_speedup


def _ceiling(vg: VGraph, sc: Scenario, ends: tuple[int, int] | None) -> int:
    if ends is not None:
        return ends[0] - vg.start_ns
    return predict_ns(vg, Scenario("ceiling", speedup=math.inf, prefill_speedup=_prefill(sc)))


def headline(vg: VGraph, sc: Scenario) -> WhatIf:
    """:func:`whatif` without its breakdown and curve: the predicted time and the ceiling
    (what ``report``'s headline says; ``categories``, ``steps`` and ``curve`` are empty)."""
    _, _, end, ends = _retimed(vg, sc)
    c = vg.c
    return WhatIf(
        sc,
        vg.measured_ns,
        end - vg.start_ns,
        _ceiling(vg, sc, ends),
        (),
        (),
        (),
        c.complete,
        int(c.parts[:, 7].sum()),
        int(c.cached_tokens.sum()),
    )


def whatif(vg: VGraph, sc: Scenario, curve: tuple[float, ...] = CURVE_K) -> WhatIf:
    """Re-time ``vg`` under ``sc``: the same :class:`WhatIf` as the loops give."""
    return _with_steps(vg.c, *_retimed_steps(vg, sc, curve))


def whatif_columns(c: Columns, sc: Scenario, curve: tuple[float, ...] = CURVE_K) -> WhatIf:
    """:func:`whatif` of ``c``'s graph, the graph gone before the step rows are made (a long
    run's 200,000 rows of Python objects, made beside a million spans' graph arrays: the
    warm command's peak)."""
    w, steps = _retimed_steps(build(c), sc, curve)
    c.drop_pages()  # the step labels are a few of the file's pages
    release_heap()
    return _with_steps(c, w, steps)


def _retimed_steps(
    vg: VGraph, sc: Scenario, curve: tuple[float, ...]
) -> tuple[WhatIf, tuple[I64, I64, I64, I64, I64]]:
    """:func:`whatif` without its step rows, and what makes them: the recorded and predicted
    path's step ids and ns (:func:`_with_steps`)."""
    dur, V, end, ends = _retimed(vg, sc)
    p = _prefill(sc)
    parts = new_parts(vg, sc)
    vg.c.drop_pages()  # the model columns the parts were made from: the tally reads few pages
    new_cats, new_ids, new_ns = tally_arrays(vg, V, path_links(vg, V), dur, end, parts)
    del parts, dur, V  # before the recorded instants are made: 32 MB fewer at once
    rec = recorded(vg, vg.start_ns)
    vg.c.drop_pages()  # the instants read to make them: 16 MB of a million spans' peak
    old = tally_arrays(vg, rec, vg.back_link, vg.recorded_dur, vg.end_ns, None)
    del rec
    old_cats, old_ids, old_ns = old
    ceiling = _ceiling(vg, sc, ends)
    if ends is not None:
        t_inf, t_one = ends[0] - vg.start_ns, ends[1] - vg.start_ns
        points = tuple((float(k), round(t_inf + (t_one - t_inf) / k)) for k in curve)
    else:
        points = tuple(
            (float(k), predict_ns(vg, Scenario("curve", speedup=k, prefill_speedup=p)))
            for k in curve
        )
    cats = tuple(
        Contribution(c, old_cats.get(c, 0), new_cats.get(c, 0))
        for c in category_order(set(old_cats) | set(new_cats))
    )
    step_ids = np.union1d(old_ids, new_ids)  # ascending: -1 (the run's level) first
    w = WhatIf(
        sc,
        vg.measured_ns,
        end - vg.start_ns,
        ceiling,
        cats,
        (),
        points,
        vg.c.complete,
        int(vg.c.parts[:, 7].sum()),
        int(vg.c.cached_tokens.sum()),
    )
    return w, (step_ids, old_ids, old_ns, new_ids, new_ns)


def _with_steps(c: Columns, w: WhatIf, steps: tuple[I64, I64, I64, I64, I64]) -> WhatIf:
    """``w`` with its step rows: each step on either path, its label and ns on each."""
    step_ids, old_ids, old_ns, new_ids, new_ns = steps
    named = step_ids[step_ids >= 0]
    labels = take(c.step_label, named).to_pylist()  # no Arrow kernels loaded for one gather
    rows = _contributions(
        ["run"] * (len(step_ids) - len(named)) + list(map(str, labels)),
        _spread(step_ids, old_ids, old_ns).tolist(),
        _spread(step_ids, new_ids, new_ns).tolist(),
    )
    return dataclasses.replace(w, steps=rows)


def _spread(ids: I64, keys: I64, values: I64) -> I64:
    """``values`` at their ``keys``' places among ``ids`` (every key is one), 0 elsewhere."""
    out = np.zeros(len(ids), np.int64)
    out[np.searchsorted(ids, keys)] = values
    return out


def _contributions(
    names: list[str], measured: list[int], predicted: list[int]
) -> tuple[Contribution, ...]:
    """``tuple(map(Contribution, names, measured, predicted))``, a column at a time
    (:func:`frozen_rows`: a long run has 200,000 steps)."""
    return frozen_rows(Contribution, name=names, measured_ns=measured, predicted_ns=predicted)


def pair_ends(vg: VGraph, A: I64, Bv: I64) -> tuple[int, int] | None:
    """:func:`agentloop.analysis.passes.retime_pair`'s verdict from the two passes' instants:
    the run's ends at x = 0 and x = 1 when no max changed hands between them, else None."""
    cd, sent = vg.cd, 2 * len(vg)
    if A[sent] or Bv[sent]:  # solve's passes have the run's start at 0 already: no copies
        A, Bv = A.copy(), Bv.copy()
        A[sent] = Bv[sent] = 0
    # two candidates (a start's parent and one after span, or two children): the later at one
    # end must not be the earlier at the other
    a, b = cd.two_a, cd.two_b
    if (np.sign(A[a] - A[b]) * np.sign(Bv[a] - Bv[b]) < 0).any():
        return None
    if len(cd.wide) and not _wide_ok(cd, A, Bv):
        return None
    if not len(vg.roots):
        return (vg.end_ns, vg.end_ns)
    ra, rb = A[2 * vg.roots + 1], Bv[2 * vg.roots + 1]
    if not ((ra == ra.max()) & (rb == rb.max())).any():
        return None
    return int(ra.max()) + vg.run_end_gap, int(rb.max()) + vg.run_end_gap


def _wide_ok(cd: Cands, A: I64, Bv: I64) -> bool:
    """:func:`pair_ends` for the positions of three or more candidates: a start's, in order,
    must each compare at both ends with the max so far; of a parent's end's, some child must
    end last at both ends."""
    off, cand = cd.wide_off, cd.wide_idx
    at_start = (cd.wide & 1) == 0
    if at_start.any():  # rank by rank over the starts' lists, the max so far kept
        first = off[:-1][at_start]
        lens = np.diff(off)[at_start]
        sa, sb = A[cand[first]], Bv[cand[first]]
        for k in range(1, int(lens.max())):
            live = lens > k
            x = cand[first[live] + k]
            ea, eb, a0, b0 = A[x], Bv[x], sa[live], sb[live]
            if ((ea > a0) & (eb < b0)).any() or ((ea < a0) & (eb > b0)).any():
                return False
            sa[live], sb[live] = np.maximum(a0, ea), np.maximum(b0, eb)
    if at_start.all():
        return True
    cnt = np.diff(off)
    hit = _at_max(A[cand], off, cnt)  # one pass's instants at a time: a million spans' wide
    hit &= _at_max(Bv[cand], off, cnt)  # lists are 1.8 million, 14 MB a gather
    return bool(np.logical_or.reduceat(hit, off[:-1])[~at_start].all())


def _at_max(vals: I64, off: I64, cnt: I64) -> np.ndarray:
    """Per value: whether it is the max of its segment ``vals[off[k]:off[k + 1]]``."""
    out: np.ndarray = vals == np.repeat(seg_max(vals, off), cnt)
    return out
