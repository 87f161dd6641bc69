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
positions no other position links to (a parallel tool's start and end, a model call's end),
and sums only what is left, the chain of the recorded critical path, by pointer doubling over a
compact numbering; the peeled ones take one gather each, last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentloop.analysis.columnar import I64, B

_PEEL = 4  # rounds of peeling at most: a tool's start and end, a model call's end, ...


@dataclass(frozen=True, slots=True)
class Cands:
    """Candidate lists by width. Positions ``0 .. len(single) - 2``; the last is the run's
    start, which has none."""

    off: I64  # every position's candidates: idx[off[v]:off[v + 1]] (recorded order)
    idx: I64
    single: B  # per position (the run's start included, False): exactly one candidate
    first: I64  # per position: its first candidate (the parent's start for a start)
    two: I64  # positions with exactly two candidates ...
    two_a: I64  # ... their first ...
    two_b: I64  # ... and second
    wide: I64  # positions with three or more
    wide_off: I64  # their candidates: wide_idx[wide_off[k]:wide_off[k + 1]]
    wide_idx: I64


def cands_of(off: I64, idx: I64) -> Cands:
    """Split every position's candidate list (``idx[off[v]:off[v + 1]]``, none empty) by width."""
    cnt = np.diff(off)
    two = np.flatnonzero(cnt == 2)
    wide = np.flatnonzero(cnt > 2)
    lens = cnt[wide]
    wide_off = np.zeros(len(wide) + 1, np.int64)
    np.cumsum(lens, out=wide_off[1:])
    at = np.repeat(off[wide] - wide_off[:-1], lens) + np.arange(int(wide_off[-1]))
    return Cands(
        off=off,
        idx=idx,
        single=np.append(cnt == 1, False),
        first=idx[off[:-1]],
        two=two,
        two_a=idx[off[two]],
        two_b=idx[off[two] + 1],
        wide=wide,
        wide_off=wide_off,
        wide_idx=idx[at],
    )


def seg_max(vals: I64, off: I64) -> I64:
    """Max of each non-empty segment ``vals[off[k]:off[k + 1]]``."""
    return np.maximum.reduceat(vals, off[:-1]) if len(vals) else np.zeros(0, np.int64)


def latest(cd: Cands, V: I64) -> tuple[I64, I64]:
    """Per position: the latest candidate's instant in V and that candidate (of several as late,
    the last listed, as the loops choose)."""
    arg = cd.first.copy()
    a, b = cd.two_a, cd.two_b
    later = V[b] >= V[a]
    arg[cd.two] = np.where(later, b, a)
    if len(cd.wide):
        ev = V[cd.wide_idx]
        top = seg_max(ev, cd.wide_off)
        slot = np.where(ev == np.repeat(top, np.diff(cd.wide_off)), np.arange(len(ev)), -1)
        arg[cd.wide] = cd.wide_idx[np.maximum.reduceat(slot, cd.wide_off[:-1])]
    return V[arg], arg


def sum_links(cd: Cands, links: I64, w: np.ndarray) -> np.ndarray:
    """Per position: the weights ``w`` (one column or several) summed along ``links`` (the last
    position, the run's start, links to itself and counts 0) down to the run's start."""
    sent = len(links) - 1
    hop = cd.single[links]  # V[v] = w[v] + w[u] + V[link[u]] for u = link[v]: u's link is fixed
    w = w.copy()
    w[sent] = 0
    w[hop] += w[links[hop]]
    links = np.where(hop, links[links], links)
    live = np.arange(sent)
    layers = []
    for _ in range(_PEEL):
        linked = np.zeros(sent + 1, np.bool_)
        linked[links[live]] = True
        keep = linked[live]
        if keep.sum() * 8 > len(keep) * 7:  # fewer than 1 in 8 to peel: not worth a round
            break
        layers.append(live[~keep])  # a live position links only to live ones: no one to these
        live = live[keep]
    acc = _double(links, w, live)
    for layer in reversed(layers):
        acc[layer] = w[layer] + acc[links[layer]]
    return acc


def _double(links: I64, w: np.ndarray, live: I64) -> np.ndarray:
    """:func:`sum_links` for the ``live`` positions (ascending; their links are live or the
    run's start) by pointer doubling over them alone, numbered 0 .. len(live) - 1."""
    sent = len(links) - 1
    m = len(live)
    itype = np.int32 if m < 2**31 else np.int64
    loc = np.empty(sent + 1, itype)
    loc[live] = np.arange(m, dtype=itype)
    loc[sent] = m
    anc = np.append(loc[links[live]], itype(m))
    acc = np.concatenate([w[live], np.zeros((1, *w.shape[1:]), w.dtype)])
    buf, nxt = np.empty_like(acc), np.empty_like(anc)
    while anc.min() != m:  # every link reaches the run's start once all are done
        np.take(acc, anc, axis=0, out=buf)
        acc += buf
        np.take(anc, anc, out=nxt)
        anc, nxt = nxt, anc
    out = np.zeros_like(w)
    out[live] = acc[:m]
    return out
