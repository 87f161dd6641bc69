"""The graph, the forward re-timing pass and the critical path on numpy arrays (big traces).

The same analysis as :mod:`agentloop.analysis.graph` and :mod:`agentloop.analysis.passes`, over
:class:`agentloop.analysis.columnar.Columns` instead of one Python object per span, with the
same results to the nanosecond (``tests/test_columnar.py`` compares them field by field).

Positions are those of :mod:`agentloop.analysis.flat` (``2i`` span i's start, ``2i + 1`` its
end, ``2n`` the run's start). Every position's instant is its weight plus the latest of its
candidates: a start's are its parent's start and its ``after`` spans' ends (weight: the recorded
start gap), a leaf's end its own start (weight: its duration), a parent's end its children's
ends (weight: the recorded close gap). Ties go to the last candidate in that order, as in the
loops. The forward pass is a longest-path problem solved by policy iteration: take each
position's recorded winner, sum the weights along those links (:func:`agentloop.analysis.cands.
sum_links`), and where some candidate now ends later switch to it and sum again; a recorded
run's winners are mostly still the winners, so one or two rounds do (a run whose branches
trade places often takes more: eight in the tangled runs of the tests). The candidate lists
are kept by width (:class:`agentloop.analysis.cands.Cands`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from agentloop.analysis.attribution import FRAMEWORK, IN_FLIGHT, TOOL_QUEUE
from agentloop.analysis.cands import STRIDE, Cands, Ix, cands_of, index_type, latest, sum_links
from agentloop.analysis.columnar import I64, B, Columns
from agentloop.analysis.strcols import codes, kind_is


@dataclass(frozen=True, slots=True)
class VGraph:
    """Columns flattened for the passes: candidate lists per position, gaps, recorded links."""

    c: Columns
    cd: Cands  # each position's candidates, by width
    is_leaf: B
    start_gap: I64
    parents: Ix  # the spans with children, ascending ...
    parent_close: I64  # ... and their recorded close gaps (a leaf's is 0)
    back_link: Ix  # per position: the recorded critical path's next position back
    step_of: Ix  # per span: the step span owning it, -1 at run level
    roots: Ix
    start_ns: int
    run_end_gap: int
    recorded_dur: I64
    models: Ix  # indices of the re-timed model spans, ascending
    tool_code: Ix  # per span: index of its tool category in tool_names, -1 for none
    tool_names: list[str]

    def __len__(self) -> int:
        return len(self.c)

    @property
    def end_ns(self) -> int:
        return self.c.end_ns

    @property
    def measured_ns(self) -> int:
        return self.c.end_ns - self.start_ns

    # per span or position, made when asked (a million spans' are 8 MB each; the passes read
    # the compact forms)
    @property
    def close_gap(self) -> I64:
        """Per span: the recorded close gap, 0 for a leaf."""
        out = np.zeros(len(self), np.int64)
        out[self.parents] = self.parent_close
        return out

    @property
    def step_at(self) -> Ix:
        """Per position: the step span owning it, -1 at run level."""
        return np.append(np.repeat(self.step_of, 2), np.array([-1], self.step_of.dtype))

    @property
    def queue(self) -> I64:
        """Per span: its recorded wait for ``max_parallel_tools`` (:meth:`queue_at`)."""
        return self.queue_at(slice(None))

    def queue_at(self, at: Any) -> I64:
        """The queue time of the spans ``at``: the recorded wait, within the start gap."""
        out: I64 = np.maximum(0, np.minimum(self.c.queued_ns[at], self.start_gap[at]))
        return out


def _candidates(c: Columns, is_leaf: B, n_kids: Ix) -> tuple[Ix, Ix]:
    """Every position's candidates in the loops' order: a start's parent start (the run's start
    for a root) then its ``after`` spans' ends; a leaf's end its own start; a parent's end its
    children's ends, in index order: position v's are ``idx[off[v]:off[v + 1]]``, (off, idx),
    both in ``n_kids``' type (:func:`index_type`)."""
    n = len(c)
    sent = 2 * n
    ix = n_kids.dtype
    par = c.parent
    idx = np.arange(n, dtype=ix)
    has_par = par >= 0
    alen = np.diff(c.after_off).astype(ix)
    cnt = np.empty(sent, ix)
    cnt[0::2] = 1 + alen
    cnt[1::2] = np.where(is_leaf, 1, n_kids)
    off = np.zeros(sent + 1, ix)
    np.cumsum(cnt, out=off[1:])
    del cnt
    cand = np.empty(int(off[-1]), ix)
    cand[off[0:-1:2]] = np.where(has_par, 2 * par, sent)
    if len(c.after_idx):
        owner = np.repeat(idx, alen)
        rank = np.arange(len(c.after_idx), dtype=ix) - c.after_off[owner].astype(ix)
        cand[off[2 * owner] + 1 + rank] = 2 * c.after_idx + 1
        del owner, rank
    cand[off[1::2][is_leaf]] = 2 * idx[is_leaf]
    kids = idx[has_par]  # ascending, so each parent's children come in index order
    if len(kids):
        kp = par[has_par].astype(ix)
        order = np.argsort(kp, kind="stable")
        kids, kp = kids[order], kp[order]
        del order
        first = np.zeros(n, ix)
        np.cumsum(n_kids[:-1], out=first[1:])
        cand[off[2 * kp + 1] + np.arange(len(kids), dtype=ix) - first[kp]] = 2 * kids + 1
    return off, cand


def _steps(c: Columns, ix: type[np.signedinteger[Any]]) -> Ix:
    """Per span: the step span owning it (itself for a step), -1 outside steps (type ``ix``)."""
    n = len(c)
    idx = np.arange(n, dtype=ix)
    par, has_par = c.parent, c.parent >= 0
    is_step = kind_is(c, "step")
    step_of = np.where(is_step, idx, -1)
    while True:  # a span's step is its own (a step) or its parent's: one round per tree level
        nxt = np.where(is_step, idx, np.where(has_par, step_of[np.maximum(par, 0)], -1))
        if np.array_equal(nxt, step_of):
            return step_of
        step_of = nxt


def build(c: Columns, ix: type[np.signedinteger[Any]] | None = None) -> VGraph:
    """Flatten columns for the passes (what :func:`agentloop.analysis.graph.build_graph` works
    out per span, in whole-array operations). Positions, candidate slots and span indices are
    ``ix`` (default: int32 while they fit, :func:`agentloop.analysis.cands.index_type`)."""
    n = len(c)
    sent = 2 * n
    ix = index_type(3 * n + len(c.after_idx) + 1) if ix is None else ix  # slots <= 3n + afters
    idx = np.arange(n, dtype=ix)
    n_kids = np.bincount(c.parent[c.parent >= 0], minlength=n).astype(ix)
    is_leaf = n_kids == 0
    off, cand = _candidates(c, is_leaf, n_kids)
    del n_kids
    cd = cands_of(off, cand)
    roots = idx[c.parent < 0]
    step_of = _steps(c, ix)
    c.drop_pages()  # the parents, the after lists and the kinds: read for the last time
    start_ns = int(c.t0[roots].min()) if len(roots) else 0
    V0 = np.empty(sent + 1, np.int64)
    V0[0:-1:2], V0[1::2], V0[sent] = c.t0, c.t1, start_ns  # the path sees the run's start
    top, back = latest(cd, V0)
    if len(roots):  # the gaps see the run's start at 0: a root's start from its own instant
        V0[sent] = 0
        top[2 * roots] = _root_tops(off, cand, V0, roots)
    del off, cand
    start_gap = c.t0 - top[0::2]
    tc = c.tool_category
    if not isinstance(tc, pa.DictionaryArray):
        tc = tc.dictionary_encode()
    del V0
    parents = idx[~is_leaf]
    vg = VGraph(
        c=c,
        cd=cd,
        is_leaf=is_leaf,
        start_gap=start_gap,
        parents=parents,
        parent_close=c.t1[parents] - top[1::2][parents],
        back_link=np.append(back, np.array([sent - 1], back.dtype)),
        step_of=step_of,
        roots=roots,
        start_ns=start_ns,
        run_end_gap=c.end_ns - int(c.t1[roots].max()) if len(roots) else 0,
        recorded_dur=c.t1 - c.t0,
        models=idx[c.is_model],
        tool_code=codes(tc),
        tool_names=tc.dictionary.to_pylist(),
    )
    c.drop_pages()  # what the graph was made from; the passes read a third of it again
    return vg


def _root_tops(off: Ix, idx: Ix, V: I64, roots: Ix) -> I64:
    """The latest candidate's instant in V at each root's start."""
    starts, ends = off[2 * roots], off[2 * roots + 1]
    lens = ends - starts
    at = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
    return np.maximum.reduceat(V[idx[at]], np.cumsum(lens) - lens)


def _weights(vg: VGraph, durs: list[I64]) -> I64:
    """Each position's weight for each of ``durs``, a column each, written in place (a column
    made apart and stacked: twice the memory at once)."""
    W = np.zeros((2 * len(vg) + 1, len(durs)), np.int64)
    for j, dur in enumerate(durs):
        W[0:-1:2, j] = vg.start_gap
        np.copyto(W[1::2, j], dur, where=vg.is_leaf)
        W[1::2, j][vg.parents] = vg.parent_close
    return W


def solve(vg: VGraph, durs: list[I64]) -> list[I64]:
    """The forward pass (:func:`agentloop.analysis.passes.retime_flat`'s V, the run's start at
    0) for each of ``durs``, by policy iteration from the recorded links. The recorded
    durations give the recorded instants, unsummed. The passes are summed together, one
    column each; a pass whose links change gets its weights made again (not kept: a million
    spans' weights are 16 MB a pass)."""
    sent = 2 * len(vg)
    same = [np.array_equal(d, vg.recorded_dur) for d in durs]
    todo = [d for d, s in zip(durs, same, strict=True) if not s]
    links = vg.back_link.copy()
    links[sent] = sent
    if todo:
        # the key first, its file pages gone before the weights are made; no name holds it, so
        # sum_links lets it go once it has its order (16 MB fewer while it sums)
        Vs = sum_links(vg.cd, links, key=_recorded_key(vg), w=_weights(vg, todo), spend=True)
    out = []
    j = 0
    for d, s in zip(durs, same, strict=True):
        if s:
            out.append(recorded(vg, 0))
            vg.c.drop_pages()
            continue
        V, pol, w = Vs[:, j], links, None
        j += 1
        while True:
            top, arg = latest(vg.cd, V)
            worse = top > V[pol[:-1]]
            del top
            if not worse.any():
                break
            pol = pol.copy()
            pol[:-1][worse] = arg[worse]
            del arg, worse
            w = _weights(vg, [d])[:, 0] if w is None else w
            V = sum_links(vg.cd, pol, w, V)  # the last round's instants: an order near this
        del arg, worse  # the last round's, before the next pass's: 10 MB
        out.append(V)
    return out


def _recorded_key(vg: VGraph) -> I64:
    """The recorded instants (:func:`recorded`, the run's start at 0), the pages of the file
    they and the durations were read from let go: the instants and model columns, 35 MB."""
    key = recorded(vg, 0)
    vg.c.drop_pages()
    return key


def recorded(vg: VGraph, start: int) -> I64:
    """The recorded instants as one list of positions, the run's start at ``start``."""
    rec = np.empty(2 * len(vg) + 1, np.int64)
    rec[0:-1:2], rec[1::2], rec[-1] = vg.c.t0, vg.c.t1, start
    return rec


def run_end(vg: VGraph, V: I64) -> int:
    """The run's new end: its latest root's end plus the recorded gap to the end record."""
    if not len(vg.roots):
        return vg.end_ns
    return int(V[2 * vg.roots + 1].max()) + vg.run_end_gap


def path_links(vg: VGraph, V: I64) -> Ix:
    """The critical path's links for instants V (the run's start at 0 in V): as
    :func:`agentloop.analysis.passes.retime_path` links them."""
    sent = len(V) - 1
    at0 = V[sent]
    V[sent] = vg.start_ns  # for this call only, not a copy of V (16 MB for a million spans)
    try:
        links = latest(vg.cd, V)[1]
    finally:
        V[sent] = at0
    return np.append(links, np.array([sent - 1], links.dtype))


def on_path(vg: VGraph, V: I64, links: Ix) -> I64:
    """Positions on the critical path from the latest root's end back (the run's start not
    included), ascending: the chain of ``links`` from there, by pointer doubling."""
    sent = len(V) - 1
    v0 = 2 * int(vg.roots[int(np.argmax(V[2 * vg.roots + 1]))]) + 1
    seen = np.zeros(sent + 1, np.bool_)
    seen[v0] = seen[sent] = True  # the run's start: where every chain ends
    members = np.array([v0], np.int64)
    # in links' type (int32 while it fits), in two buffers taken in turns rather than a new
    # array a round; gathered a slice at a time, so numpy's conversion of int32 indices to its
    # own index type is a slice's, not a whole intp copy (the time is the same: 0.12 s a call)
    jump, buf = links.copy(), np.empty_like(links)
    jump[sent] = sent
    while True:  # members: the chain's first 2^k positions; one chain has no repeats
        nxt = jump[members]
        new = nxt[~seen[nxt]]
        if not len(new):
            break
        seen[new] = True
        members = np.concatenate([members, new])
        for k in range(0, sent + 1, STRIDE):
            np.take(jump, jump[k : k + STRIDE], out=buf[k : k + STRIDE])
        jump, buf = buf, jump
    seen[sent] = False
    return np.flatnonzero(seen)


def tally(
    vg: VGraph, V: I64, links: Ix, dur: I64, total: int, parts: I64 | None
) -> tuple[dict[str, int], dict[int, int]]:
    """Critical-path ns per category and per step (:func:`agentloop.analysis.breakdown.
    path_tally`); ``parts``: re-timed (base, reasoning, decode) per model span (rows in
    ``vg.models`` order), None as measured."""
    cats, ids, ns = tally_arrays(vg, V, links, dur, total, parts)
    return cats, dict(zip(ids.tolist(), ns.tolist(), strict=True))


def tally_arrays(
    vg: VGraph, V: I64, links: Ix, dur: I64, total: int, parts: I64 | None
) -> tuple[dict[str, int], I64, I64]:
    """:func:`tally` with the steps as arrays: their ids ascending (-1, the run's level, always
    there) and ns (a long run has 200,000 steps: a dict of them is 23 MB)."""
    if not len(vg.roots):
        return {FRAMEWORK: total - vg.start_ns}, np.array([-1]), np.array([total - vg.start_ns])
    pos = on_path(vg, V, links)
    ids, ns = _step_sums(vg, V, links, pos, total)
    ends = pos[(pos & 1) == 1]
    del pos
    return _categories(vg, ends[vg.is_leaf[ends >> 1]] >> 1, dur, total, parts), ids, ns


def _step_sums(vg: VGraph, V: I64, links: Ix, pos: I64, total: int) -> tuple[I64, I64]:
    """The path's ns per step owning its positions ``pos`` (the run's start, V's last, at
    ``vg.start_ns``); the run's level (-1) also gets the time after the latest root's end."""
    sent = len(V) - 1
    v0 = 2 * int(vg.roots[int(np.argmax(V[2 * vg.roots + 1]))]) + 1
    owner = vg.step_of[pos >> 1] + 1  # pos holds no run's start
    back = links[pos]
    seg = V[back]
    seg[back == sent] = vg.start_ns
    del back
    np.subtract(V[pos], seg, out=seg)
    seen = np.bincount(owner, minlength=len(vg) + 1)
    seen[0] = 1
    keys = np.flatnonzero(seen)
    del seen
    sums = np.zeros(len(vg) + 1, np.int64)
    np.add.at(sums, owner, seg)
    sums[0] += total - int(V[v0])
    return keys - 1, sums[keys]


def _categories(vg: VGraph, leaves: I64, dur: I64, total: int, parts: I64 | None) -> dict[str, int]:
    """Critical-path ns per category of the path's leaves (:func:`tally`)."""
    c = vg.c
    leaf_ns = dur[leaves]
    gap_ns = total - vg.start_ns - int(leaf_ns.sum())
    cats: dict[str, int] = {}
    model_row = np.searchsorted(vg.models, leaves)
    is_m = c.is_model[leaves]
    others, other_ns = leaves[~is_m], leaf_ns[~is_m]
    fl = c.in_flight[others]
    if fl.any():
        cats[IN_FLIGHT] = int(other_ns[fl].sum())
    codes = vg.tool_code[others[~fl]]
    if len(codes):
        sums = np.zeros(len(vg.tool_names) + 1, np.int64)
        np.add.at(sums, codes + 1, other_ns[~fl])
        for k in np.unique(codes).tolist():
            name = FRAMEWORK if k < 0 else vg.tool_names[k]
            cats[name] = cats.get(name, 0) + int(sums[k + 1])
    rows = model_row[is_m]
    if len(rows):  # a column at a time: the rows of all ten are 16 MB for 200,000 calls
        new = c.parts if parts is None else parts
        for k, name in enumerate(("base", "reasoning", "decode")):
            cats[name] = int(new[rows, k].sum())
        for k, name in ((3, "tail"), (4, "wait"), (5, "retry"), (6, "overhead")):
            cats[name] = int(c.parts[rows, k].sum())
    queued = int(vg.queue_at(leaves).sum())
    if queued:
        cats[TOOL_QUEUE] = queued
    cats[FRAMEWORK] = cats.get(FRAMEWORK, 0) + gap_ns - queued
    return cats
