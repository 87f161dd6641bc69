"""Each position's candidates on arrays: the latest of them, and instants summed along links.

A position's instant is its weight plus the latest of its candidates (:mod:`agentloop.analysis.
vector`). Most positions have one candidate (a leaf's end: its own start; a start with no
``after``: its parent's start) or two (one ``after`` span, or two children), so the lists are
kept by width: one candidate is the answer as it stands, two are compared element by element,
and only the wider ones (a step's tools, the run's steps) go through segment reductions. A
million-span trace's latest candidates cost half the work of one pass over all four million
candidate slots that way.

:func:`sum_links` sums weights along one chosen candidate per position down to the run's start.
It first hops over every one-candidate position (its link never changes), then peels the
positions no other position links to (a parallel tool's start and end, a model call's end).
What is left is mostly the chain of the recorded critical path: in recorded-instant order each
of its positions links to the one before, so a run of them is one cumulative sum, and only the
runs' heads are summed by pointer doubling. The peeled ones take one gather each, last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agentloop.analysis.columnar import I64, B

# positions and candidate slots: int32 while they fit (:func:`index_type`), else int64
Ix = npt.NDArray[np.signedinteger[Any]]

STRIDE = 1 << 16  # positions at a time where a whole-length temporary is not needed
_PEEL = 4  # rounds of peeling at most: a tool's start and end, a model call's end, ...
# below this many positions, pointer doubling over all of them (a few whole-array operations a
# round) costs less than preparing the hops, peels and runs (a suite's runs of 2,000 positions)
DIRECT_BELOW = 50_000


def index_type(count: int) -> type[np.signedinteger[Any]]:
    """The integer type for ``count`` positions or candidate slots: int32 while they fit (half
    the memory: a million spans' lists and links are 4 million of them), else int64."""
    return np.int32 if count < 2**31 else np.int64


@dataclass(frozen=True, slots=True)
class Cands:
    """Candidate lists by width. Positions ``0 .. len(single) - 2``; the last is the run's
    start, which has none."""

    single: B  # per position (the run's start included, False): exactly one candidate
    first: Ix  # per position: its first candidate (the parent's start for a start)
    two: Ix  # positions with exactly two candidates ...
    two_a: Ix  # ... their first ...
    two_b: Ix  # ... and second
    wide: Ix  # positions with three or more
    wide_off: Ix  # their candidates: wide_idx[wide_off[k]:wide_off[k + 1]]
    wide_idx: Ix


def cands_of(off: Ix, idx: Ix) -> Cands:
    """Split every position's candidate list (``idx[off[v]:off[v + 1]]``, none empty) by width;
    the positions and slots in ``off``'s type."""
    ix = off.dtype
    cnt = np.diff(off)
    two = np.flatnonzero(cnt == 2).astype(ix)
    wide = np.flatnonzero(cnt > 2).astype(ix)
    lens = cnt[wide]
    wide_off = np.zeros(len(wide) + 1, ix)
    np.cumsum(lens, out=wide_off[1:])
    at = np.repeat(off[wide] - wide_off[:-1], lens) + np.arange(int(wide_off[-1]), dtype=ix)
    return Cands(
        single=np.append(cnt == 1, False),
        first=idx[off[:-1]],
        two=two,
        two_a=idx[off[two]],
        two_b=idx[off[two] + 1],
        wide=wide,
        wide_off=wide_off,
        wide_idx=idx[at],
    )


def seg_max(vals: I64, off: Ix) -> I64:
    """Max of each non-empty segment ``vals[off[k]:off[k + 1]]``."""
    return np.maximum.reduceat(vals, off[:-1]) if len(vals) else np.zeros(0, np.int64)


def latest(cd: Cands, V: I64) -> tuple[I64, Ix]:
    """Per position: the latest candidate's instant in V and that candidate (of several as late,
    the last listed, as the loops choose)."""
    arg = cd.first.copy()
    a, b = cd.two_a, cd.two_b
    later = V[b] >= V[a]
    arg[cd.two] = np.where(later, b, a)
    if len(cd.wide):  # each temporary freed as soon as it is read: a million spans' are 14 MB
        ev = V[cd.wide_idx]
        top = np.repeat(seg_max(ev, cd.wide_off), np.diff(cd.wide_off))
        off = np.not_equal(ev, top, out=np.empty(len(ev), np.bool_))  # not the latest
        del ev, top
        slot = np.arange(len(off), dtype=cd.wide_off.dtype)
        slot[off] = -1
        del off
        arg[cd.wide] = cd.wide_idx[np.maximum.reduceat(slot, cd.wide_off[:-1])]
    return V[arg], arg


def sum_links(
    cd: Cands,
    links: Ix,
    w: np.ndarray,
    key: I64,
    direct_below: int = DIRECT_BELOW,
    *,
    spend: bool = False,
) -> np.ndarray:
    """Per position: the weights ``w`` (one column or several) summed along ``links`` (the last
    position, the run's start, links to itself and counts 0) down to the run's start. ``key``:
    an order in which most positions come right after the one they link to (the recorded
    instants, for links near the recorded ones); any order gives the same sums. Fewer than
    ``direct_below`` positions are summed by pointer doubling over them all. ``spend``: ``w``
    is the caller's to lose (the sums are made in it instead of a copy: two columns of a
    million spans' weights are 32 MB)."""
    sent = len(links) - 1
    w = w if spend else w.copy()
    if sent < direct_below:
        return _tree_sums(links, w)
    hop = cd.single[links]  # V[v] = w[v] + w[u] + V[link[u]] for u = link[v]: u's link is fixed
    w[sent] = 0
    w[hop] += w[links[hop]]
    links = np.where(hop, links[links], links)
    del hop
    live = np.arange(sent, dtype=links.dtype)
    layers = []
    for _ in range(_PEEL):
        linked = np.zeros(sent + 1, np.bool_)
        linked[links[live]] = True
        keep = linked[live]
        if keep.sum() * 8 > len(keep) * 7:  # fewer than 1 in 8 to peel: not worth a round
            break
        layers.append(live[~keep])  # a live position links only to live ones: no one to these
        live = live[keep]
    if len(live):  # the sums replace the weights in w: a peeled position's weight is read
        # when its layer is summed, and no layer links to its own or an earlier one
        order = live[np.argsort(key[live], kind="stable")]
        del live, key  # the caller's to keep, or not (vector.solve's: 16 MB)
        _along_runs(links, w, order)
    for layer in reversed(layers):  # a slice at a time: a layer is up to a quarter of the
        for k in range(0, len(layer), STRIDE):  # positions, three gathers of it 24 MB
            part = layer[k : k + STRIDE]  # none links to another of its layer
            w[part] += w[links[part]]
    return w


def _along_runs(links: Ix, w: np.ndarray, order: Ix) -> None:
    """:func:`sum_links` for the positions ``order`` (their links are among them or the run's
    start), in that order, into ``w``: a run of positions each linking to the one before it is
    one cumulative sum; the runs' first positions are summed over the runs alone, by pointer
    doubling (a recorded critical path in instant order is one run). A column of ``w`` at a
    time: each whole-length temporary is one column's."""
    sent, m = len(links) - 1, len(order)
    at = np.full(sent + 1, m, links.dtype)  # a position's slot in order; the run's start: m
    at[order] = np.arange(m, dtype=links.dtype)
    head = np.empty(m, np.bool_)
    head[0] = True
    head[1:] = links[order[1:]] != order[:-1]
    run = np.cumsum(head, dtype=links.dtype) - 1  # each slot's run
    starts = np.flatnonzero(head)
    del head
    first = order[starts]
    u = at[links[first]]  # the slot each run's first position links to (m: the start)
    del at
    inside = u < m
    u = u[inside]
    up = np.full(len(starts) + 1, len(starts), np.int64)  # the run linked to; the root: last
    up[:-1][inside] = run[u]
    for col in w.reshape(len(w), -1).T:  # views: what is written lands in w
        C = col[order]  # np.take would copy a strided column whole first
        np.cumsum(C, out=C)
        before = C[starts] - col[first]  # the sums before each run
        X = np.zeros(len(starts) + 1, w.dtype)  # V of what each run's head links to
        X[:-1][inside] = C[u] - before[run[u]]
        X = _tree_sums(up, X)
        shift = X[:-1] - before  # C becomes C + X[run] - before[run]: exact in any order
        for k in range(0, m, STRIDE):  # a slice at a time: no whole-length gather
            C[k : k + STRIDE] += shift[run[k : k + STRIDE]]
        col[order] = C


def _tree_sums(anc: Ix, acc: np.ndarray) -> np.ndarray:
    """``acc`` summed along ``anc`` down to the root (the last row, which counts 0), by pointer
    doubling."""
    root = len(anc) - 1
    anc = anc.astype(np.int32) if root < 2**31 else anc.copy()
    anc[root] = root
    acc[root] = 0
    buf, nxt = np.empty_like(acc), np.empty_like(anc)
    while anc.min() != root:  # every chain reaches the root once all are done
        np.take(acc, anc, axis=0, out=buf)
        acc += buf
        np.take(anc, anc, out=nxt)
        anc, nxt = nxt, anc
    return acc
