"""The recorded dependency graph as flat arrays: forward re-timing pass and critical path walk.

Spans are indexed in recorded start order (the order of their ``span_start`` records), which is
a topological order: a span's parent and every span in its ``after`` list started before it.
A span depends on its parent's *start* and on the *end* of each span in ``after``; its recorded
``gap0`` is how long after the latest of those (as recorded) it started: framework time that a
faster model does not shrink. A span with children ends ``gap1`` after its last child ends
(step and run bookkeeping); a leaf ends ``duration`` after it starts. Instants are integer ns.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentloop.analysis.attribution import ModelParts, model_parts
from agentloop.trace.reader import Trace, load_trace


@dataclass(frozen=True, slots=True)
class Graph:
    """A trace's spans as parallel lists (index = recorded start order) plus model attribution.

    Built once by :func:`build_graph` and only read afterwards.
    """

    trace: Trace
    ids: list[str]
    kinds: list[str]
    names: list[str]
    par: list[int]  # parent index, -1 for a root
    aft: list[tuple[int, ...]]  # indices of the spans this one waited for
    t0: list[int]
    t1: list[int]  # spans in flight end at the trace's last instant
    gap0: list[int]
    kids: dict[int, list[int]]  # children of spans that have any
    gap1: dict[int, int]  # end gap of spans with children
    fin: dict[int, list[int]]  # after index i is placed, these parents' ends are known
    roots: list[int]
    end_ns: int  # the trace's own end instant (end record, else last instant seen)
    start_ns: int  # the run span's start: setup before it (simulator, workspace) is not run time
    end_gap: int  # end instant minus the latest root end
    in_flight: list[bool]
    step_of: list[int]  # enclosing step span (itself for a step), -1 outside steps
    models: dict[int, ModelParts]  # finished model spans without children
    problems: list[str]

    @property
    def measured_ns(self) -> int:
        """The run's end-to-end time: from the run span's start to the end record."""
        return self.end_ns - self.start_ns

    def __len__(self) -> int:
        return len(self.ids)

    def is_leaf(self, i: int) -> bool:
        return i not in self.kids

    def durations(self) -> list[int]:
        """Recorded durations (the identity re-timing)."""
        return [b - a for a, b in zip(self.t0, self.t1, strict=True)]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for an allocation-heavy pass over a big trace.

    With a million spans alive, every automatic collection rescans the whole trace heap: loading
    and flattening then spend most of their time in the collector (4x slower measured). Nothing
    here makes reference cycles, so reference counting frees everything meanwhile.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_quickly(path: str | Path) -> Trace:
    """:func:`agentloop.trace.reader.load_trace` with the cyclic collector kept off the trace.

    The collector is paused while loading, and the loaded objects are then frozen
    (``gc.freeze``: moved out of the collector's sight; reference counting still frees them).
    Without this, the first collection after loading a million spans rescans the whole trace
    (seconds), and every later full collection again. Garbage is collected first so nothing
    collectable gets frozen; loading itself makes no reference cycles.
    """
    gc.collect()
    with gc_paused():
        trace = load_trace(path)
        gc.freeze()
    return trace


def build_graph(trace: Trace) -> Graph:
    """Flatten a loaded trace into a :class:`Graph`; unknown or forward ``after`` ids are dropped
    with a note in ``problems``."""
    with gc_paused():
        return _build(trace)


def _build(trace: Trace) -> Graph:
    # whole-list passes (comprehensions, map) rather than one loop doing everything
    end_ns = trace.end_ns
    spans = list(trace.spans.values())
    n = len(spans)
    ids = [s.id for s in spans]
    idx = dict(zip(ids, range(n), strict=True))
    kinds = [s.kind for s in spans]
    names = [s.name for s in spans]
    t0 = [s.t0 for s in spans]
    t1 = [end_ns if s.t1 is None else s.t1 for s in spans]
    in_flight = [s.t1 is None for s in spans]
    # dict.get(parent, -1) mapped in C: a root's parent None maps to -1 too
    par: list[int] = list(map(idx.get, [s.parent for s in spans],  # type: ignore[arg-type]
                              itertools.repeat(-1, n)))
    problems: list[str] = []
    for i in [i for i, p in enumerate(par) if p >= i]:
        problems.append(f"span {ids[i]}: parent {spans[i].parent} did not start before it")
        par[i] = -1
    getitem = idx.__getitem__
    try:
        aft = [tuple(map(getitem, s.after)) if s.after else () for s in spans]
    except KeyError:
        aft = [tuple(idx.get(a, n) for a in s.after) if s.after else () for s in spans]
    for i in [i for i, a in enumerate(aft) if a and max(a) >= i]:
        for a in spans[i].after:
            if not 0 <= idx.get(a, n) < i:
                problems.append(f"span {ids[i]}: 'after' names {a}, which did not start "
                                f"before it; edge ignored")
        aft[i] = tuple(j for j in aft[i] if j < i)
    t1g = t1.__getitem__
    gap0 = [t - max(t0[p] if p >= 0 else 0, max(map(t1g, a)) if a else 0)
            for t, p, a in zip(t0, par, aft, strict=True)]
    kids: dict[int, list[int]] = {}
    step_of = [-1] * n
    for i, p, k in zip(range(n), par, kinds, strict=True):
        if p >= 0:
            ks = kids.get(p)
            if ks is None:
                kids[p] = [i]
            else:
                ks.append(i)
            step_of[i] = i if k == "step" else step_of[p]
        elif k == "step":
            step_of[i] = i
    roots = [i for i, p in enumerate(par) if p < 0]
    gap1: dict[int, int] = {}
    last_desc: dict[int, int] = {}
    fin: dict[int, list[int]] = {}
    for p in sorted(kids, reverse=True):  # children have larger indices than their parent;
        ks = kids[p]                       # at one trigger, deeper parents come first
        gap1[p] = t1[p] - max(map(t1g, ks))
        last_desc[p] = ld = max(last_desc.get(c, c) for c in ks)
        fin.setdefault(ld, []).append(p)
    end_gap = end_ns - max((t1[r] for r in roots), default=end_ns)
    start_ns = min((t0[r] for r in roots), default=0)
    tps = fallback_tps(trace)
    models = {i: model_parts(spans[i].attrs, t1[i] - t0[i], tps, spans[i].status == "error")
              for i, k in enumerate(kinds) if k == "model" and not in_flight[i] and i not in kids}
    return Graph(trace, ids, kinds, names, par, aft, t0, t1, gap0, kids, gap1, fin, roots,
                 end_ns, start_ns, end_gap, in_flight, step_of, models, problems)


def fallback_tps(trace: Trace) -> float:
    """The recorded tier's profile ``output_tps`` (for spans with fewer than two visible tokens)."""
    try:
        v = float(trace.header["tier"]["profile"]["output_tps"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return v if v > 0 else 0.0


def retime(g: Graph, dur: list[int]) -> tuple[list[int], list[int], int]:
    """Forward pass: new starts and ends for leaf durations ``dur``, and the run's new end.

    Each span starts ``gap0`` after the latest of its parent's new start and its ``after`` spans'
    new ends; a leaf ends ``dur`` later; a parent ends ``gap1`` after its latest child's new end.
    """
    n = len(g.ids)
    S = [0] * n
    E = [0] * n
    eget = E.__getitem__
    fget = g.fin.get
    kids, gap1 = g.kids, g.gap1
    for i, p, af, gp, d in zip(range(n), g.par, g.aft, g.gap0, dur, strict=True):
        s = S[p] if p >= 0 else 0
        if af:
            e = max(map(eget, af))
            if e > s:
                s = e
        s += gp
        S[i] = s
        E[i] = s + d
        f = fget(i)
        if f:
            for q in f:
                E[q] = max(map(eget, kids[q])) + gap1[q]
    last = max((E[r] for r in g.roots), default=0)
    return S, E, (last + g.end_gap) if g.roots else g.end_ns


def critical_path(g: Graph, S: list[int], E: list[int], total: int) -> list[tuple[int, int, bool]]:
    """Segments ``(span index, ns, is_gap)`` of the critical path, latest first; they sum to
    ``total - g.start_ns``. A gap segment is framework time owned by that span (-1: before/after the run).

    Walking back from the end: a parent's end is decided by its latest-ending child (so of
    parallel tool calls only the longest branch counts); a span's start by its latest dependency
    (an ``after`` span wins a tie with the parent's start).
    """
    out: list[tuple[int, int, bool]] = []
    if not g.roots:
        return [(-1, total - g.start_ns, True)]
    r = max(g.roots, key=E.__getitem__)
    out.append((-1, total - E[r], True))
    i, at_end = r, True
    kids, par, aft = g.kids, g.par, g.aft
    while True:
        if at_end:
            ks = kids.get(i)
            if ks is None:
                out.append((i, E[i] - S[i], False))
                at_end = False
            else:
                c = max(reversed(ks), key=E.__getitem__)
                out.append((i, E[i] - E[c], True))
                i = c
            continue
        p = par[i]
        best, nxt, nxt_end = (S[p], p, False) if p >= 0 else (g.start_ns, -1, False)
        for a in aft[i]:
            if E[a] >= best:
                best, nxt, nxt_end = E[a], a, True
        out.append((i, S[i] - best, True))
        if nxt < 0:
            return out
        i, at_end = nxt, nxt_end


def retime_pair(g: Graph, dur0: list[int], dur1: list[int]) -> tuple[int, int] | None:
    """Two forward passes in lockstep, for durations that vary as ``dur0 + (dur1 - dur0) * x``.

    Returns the run's end at ``x = 0`` and ``x = 1`` when every max in the pass was won by one
    candidate at both ends: then every instant, the end included, is affine in ``x`` on [0, 1]
    (``x = 1 / K`` for an output speedup K >= 1), so one pass gives the whole speedup curve.
    Returns None when some max changed hands between the ends (the caller re-times per point).
    """
    n = len(g.ids)
    SA, SB = [0] * n, [0] * n
    EA, EB = [0] * n, [0] * n
    ea_get, eb_get = EA.__getitem__, EB.__getitem__
    fget = g.fin.get
    kids, gap1 = g.kids, g.gap1
    for i, p, af, gp, da, db in zip(range(n), g.par, g.aft, g.gap0, dur0, dur1, strict=True):
        if p >= 0:
            sa, sb = SA[p], SB[p]
        else:
            sa = sb = 0
        for a in af:
            ea, eb = EA[a], EB[a]
            if ea > sa:
                if eb < sb:
                    return None
                sa, sb = ea, eb
            elif eb > sb:
                if ea < sa:
                    return None
                sb = eb
        sa += gp
        sb += gp
        SA[i], SB[i] = sa, sb
        EA[i], EB[i] = sa + da, sb + db
        f = fget(i)
        if f:
            for q in f:
                ks = kids[q]
                ma, mb = max(map(ea_get, ks)), max(map(eb_get, ks))
                if not any(EA[c] == ma and EB[c] == mb for c in ks):
                    return None
                EA[q], EB[q] = ma + gap1[q], mb + gap1[q]
    if not g.roots:
        return g.end_ns, g.end_ns
    ma, mb = max(EA[r] for r in g.roots), max(EB[r] for r in g.roots)
    if not any(EA[r] == ma and EB[r] == mb for r in g.roots):
        return None
    return ma + g.end_gap, mb + g.end_gap
