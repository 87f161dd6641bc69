"""The passes over a Graph: forward re-timing, the lockstep pair check, the critical path walk.

They run over one flat list of instants ``V``: ``V[2i]`` is span i's start, ``V[2i + 1]`` its
end, ``V[2n]`` the run's start (0 while re-timing, so a root starts its ``start_gap`` after 0 or its
``after`` spans). The Graph holds each span's candidate positions
(``parent_start``, ``after_ends``, ``child_ends``, ``closes_at``), so a pass is one plain loop with inline comparisons: at a million spans a function
call per span (``max(map(...))``, a key function) costs about as much as the rest of the loop.
"""

from __future__ import annotations

import itertools
from operator import rshift, sub

from agentloop.analysis.flat import Graph, interleave, link_roots


def retime(g: Graph, dur: list[int]) -> tuple[list[int], list[int], int]:
    """Forward pass: new starts and ends for leaf durations ``dur``, and the run's new end.

    Each span starts ``start_gap`` after the latest of its parent's new start and its ``after`` spans'
    new ends; a leaf ends ``dur`` later; a parent ends ``close_gap`` after its latest child's new end.
    """
    V, end = retime_flat(g, dur)
    return V[0:-1:2], V[1::2], end


def retime_flat(g: Graph, dur: list[int]) -> tuple[list[int], int]:
    """:func:`retime` into one flat instant list V, and the run's new end."""
    n = len(g.ids)
    V = [0] * (2 * n + 1)
    vget = V.__getitem__
    for i2, p, af, gp, d, f in zip(
        range(0, 2 * n, 2), g.parent_start, g.after_ends, g.start_gap, dur, g.closes_at, strict=True
    ):
        s = V[p]
        for x in af:
            e = V[x]
            if e > s:
                s = e
        s += gp
        V[i2] = s
        V[i2 + 1] = s + d
        if f:  # i is the last span under these parents: their ends are known now
            for q, ks, g1 in f:
                V[q] = max(map(vget, ks)) + g1
    if not g.roots:
        return V, g.end_ns
    return V, max(V[2 * r + 1] for r in g.roots) + g.run_end_gap


def retime_path(g: Graph, dur: list[int]) -> tuple[list[int], list[int], int]:
    """:func:`retime_flat` that also links each position to the one that decided it (the
    critical path's next position back, as :func:`walk` would choose it): V, links, end."""
    V, back, end, _ = retime_with_pair(g, dur, None, None)
    return V, back, end


def retime_with_pair(
    g: Graph, dur: list[int], dur0: list[int] | None, dur1: list[int] | None
) -> tuple[list[int], list[int], int, tuple[int, int] | None]:
    """:func:`retime_path` for ``dur`` and, in the same loop, :func:`retime_pair` for ``dur0``
    and ``dur1`` (None: not wanted); one loop over a million spans rather than two.

    The ``x = 1`` pass runs first on its own (with the recorded durations it is the recording
    itself); the ``x = 0`` pass then checks each max against it. Up to the first max that
    changes hands both are what a lockstep pass computes, so the verdict is the same. A hot
    loop, long on purpose: its body runs once per span, inline, with no call per span.
    """
    n = len(g.ids)
    V = [0] * (2 * n + 1)
    A = [0] * (2 * n + 1)
    ok, B, end_b = _x_one(g, dur0, dur1)
    if not ok or dur0 is None:
        B, dur0 = A, dur
    back = list(g.back_link)  # a leaf's end links to its own start already
    vget, aget = V.__getitem__, A.__getitem__
    for i2, p, af, gp, d, da, f in zip(
        range(0, 2 * n, 2),
        g.parent_start,
        g.after_ends,
        g.start_gap,
        dur,
        dur0,
        g.closes_at,
        strict=True,
    ):
        s, sa = V[p], A[p]
        if af:
            w, sb = p, B[p]
            for x in af:
                e = V[x]
                if e >= s:  # an after span wins a tie with the parent, a later listed one too
                    s, w = e, x
                if ok:  # in recorded order each candidate must compare at both ends with the
                    ea, eb = A[x], B[x]  # max so far, or the max changed hands
                    if ea > sa:
                        if eb < sb:
                            ok = False
                        sa, sb = ea, eb
                    elif eb > sb:
                        if ea < sa:
                            ok = False
                        sb = eb
            back[i2] = w
        s += gp
        V[i2] = s
        V[i2 + 1] = s + d
        sa += gp
        A[i2] = sa
        A[i2 + 1] = sa + da
        if f:  # i is the last span under these parents: their ends are known now
            for q, ks, g1 in f:
                back[q] = c = max(ks, key=vget)  # children's ends, last first: it wins a tie
                V[q] = V[c] + g1
                if ok:  # some child must end last at both ends
                    ma, mb = max(map(aget, ks)), B[q] - g1
                    ok = any(A[c] == ma and B[c] == mb for c in ks)
                    A[q] = ma + g1
    if not g.roots:
        return V, back, g.end_ns, ((g.end_ns, g.end_ns) if ok else None)
    pair = _root_pair(g, A, B, end_b) if ok else None
    V[-1] = g.start_ns  # as the path sees the run's start
    link_roots(g.roots, g.after_ends, V, back)
    return V, back, max(V[2 * r + 1] for r in g.roots) + g.run_end_gap, pair


def _x_one(g: Graph, dur0: list[int] | None, dur1: list[int] | None) -> tuple[bool, list[int], int]:
    """For :func:`retime_with_pair`: whether the pair is wanted, and the ``x = 1`` pass's
    instants and run end (the recording itself for the recorded durations)."""
    if dur0 is None or dur1 is None:
        return False, [], 0
    if dur1 == g.recorded_dur:
        return True, interleave(g.t0, g.t1, 0), g.end_ns
    B, end_b = retime_flat(g, dur1)
    return True, B, end_b


def _root_pair(g: Graph, A: list[int], B: list[int], end_b: int) -> tuple[int, int] | None:
    """The run's ends at ``x = 0`` and ``x = 1`` when one root ends last at both, else None."""
    ends = [2 * r + 1 for r in g.roots]
    ma, mb = max(map(A.__getitem__, ends)), max(map(B.__getitem__, ends))
    if (ma, mb) in zip(map(A.__getitem__, ends), map(B.__getitem__, ends), strict=True):
        return ma + g.run_end_gap, end_b
    return None


def chase(
    g: Graph, V: list[int], back: list[int], total: int
) -> tuple[list[tuple[int, int]], list[int]]:
    """The critical path along precomputed links (:func:`retime_path`), as the segments of
    :func:`critical_path` summed per run of consecutive segments one step owns: (step span or
    -1, ns) pairs, plus the leaves passed.

    The segments telescope (each is an instant minus the next one back on the path), so a run's
    time is its first instant minus the next run's: only instants where the owner changes are
    read, and no per-segment list is built (a path can have a million segments).
    """
    sent = len(V) - 1
    sop, leaf_end = g.step_at, g.is_leaf_end
    owners, marks = [-1], [total]  # segment 0, from the end record back, is run level
    leaves: list[int] = []
    lapp = leaves.append
    cur = -1
    v = 2 * max(g.roots, key=lambda r: V[2 * r + 1]) + 1
    while v != sent:
        o = sop[v]
        if o != cur:
            owners.append(o)
            marks.append(V[v])
            cur = o
        if leaf_end[v]:  # a leaf's own segment; then its start's (same owner) links on
            lapp(v >> 1)
            v = back[v - 1]
        else:
            v = back[v]
    marks.append(V[sent])
    return list(
        zip(owners, map(sub, marks, itertools.islice(marks, 1, None)), strict=False)
    ), leaves


def retime_pair(g: Graph, dur0: list[int], dur1: list[int]) -> tuple[int, int] | None:
    """Two forward passes in lockstep, for durations that vary as ``dur0 + (dur1 - dur0) * x``.

    Returns the run's end at ``x = 0`` and ``x = 1`` when every max in the pass was won by one
    candidate at both ends: then every instant, the end included, is affine in ``x`` on [0, 1]
    (``x = 1 / K`` for an output speedup K >= 1), so one pass gives the whole speedup curve.
    Returns None when some max changed hands between the ends (the caller re-times per point).
    """
    return retime_with_pair(g, dur0, dur0, dur1)[3]


def walk(g: Graph, V: list[int]) -> tuple[list[int], list[int]]:
    """The critical path of instants V (``V[2n]`` holding ``g.start_ns``; g has roots): the
    positions visited from the latest root's end back to the run's start, and the leaves passed.

    A parent's end comes from its latest-ending child (the last one listed on a tie); a start
    from its latest candidate (an ``after`` span wins a tie with the parent's start, a later
    listed one with an earlier one); a leaf's end from its own start.
    """
    vget = V.__getitem__
    sent = len(V) - 1
    p0, af, ends = g.parent_start, g.after_ends, g.child_ends
    vs: list[int] = []
    leaves: list[int] = []
    app, lapp = vs.append, leaves.append
    v = 2 * max(g.roots, key=lambda r: V[2 * r + 1]) + 1
    while True:
        if v & 1:
            app(v)
            ks = ends[v >> 1]
            if ks is not None:
                v = max(ks, key=vget)  # children's ends, last child first: it wins a tie
                continue
            lapp(v >> 1)
            v -= 1
        app(v)
        i = v >> 1
        v = p0[i]
        best = V[v]
        for x in af[i]:
            e = V[x]
            if e >= best:
                best, v = e, x
        if v == sent:
            return vs, leaves


def critical_path(g: Graph, S: list[int], E: list[int], total: int) -> list[tuple[int, int, bool]]:
    """Segments ``(span index, ns, is_gap)`` of the critical path, latest first; they sum to
    ``total - g.start_ns``. A gap segment is framework time owned by that span (-1: before/after the run).

    Walking back from the end: a parent's end is decided by its latest-ending child (so of
    parallel tool calls only the longest branch counts); a span's start by its latest dependency
    (an ``after`` span wins a tie with the parent's start).
    """
    if not g.roots:
        return [(-1, total - g.start_ns, True)]
    V = interleave(S, E, g.start_ns)
    vs, _ = walk(g, V)
    vals = [total, *map(V.__getitem__, vs), g.start_ns]
    ns = map(sub, vals, itertools.islice(vals, 1, None))
    idx = [-1, *map(rshift, vs, itertools.repeat(1))]
    ends = g.child_ends
    gaps = [True, *[not v & 1 or ends[v >> 1] is not None for v in vs]]  # a leaf's own time
    return list(zip(idx, ns, gaps, strict=True))
