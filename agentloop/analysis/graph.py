"""The recorded dependency graph as flat arrays: forward re-timing pass and critical path walk.

Spans are indexed in recorded start order (the order of their ``span_start`` records), which is
a topological order: a span's parent and every span in its ``after`` list started before it.
A span depends on its parent's *start* and on the *end* of each span in ``after``; its recorded
``gap0`` is how long after the latest of those (as recorded) it started: framework time that a
faster model does not shrink. A span with children ends ``gap1`` after its last child ends
(step and run bookkeeping); a leaf ends ``duration`` after it starts. Instants are integer ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentloop.analysis.attribution import ModelParts, model_parts
from agentloop.trace.reader import Trace


@dataclass(slots=True)
class Graph:
    """A trace's spans as parallel lists (index = recorded start order) plus model attribution."""

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
    end_gap: int  # end instant minus the latest root end
    in_flight: list[bool]
    step_of: list[int]  # enclosing step span (itself for a step), -1 outside steps
    models: dict[int, ModelParts] = field(default_factory=dict)  # finished model leaves
    problems: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def is_leaf(self, i: int) -> bool:
        return i not in self.kids

    def durations(self) -> list[int]:
        """Recorded durations (the identity re-timing)."""
        return [b - a for a, b in zip(self.t0, self.t1, strict=True)]


def build_graph(trace: Trace) -> Graph:
    """Flatten a loaded trace into a :class:`Graph`; unknown or forward ``after`` ids are dropped
    with a note in ``problems``."""
    end_ns = trace.end_ns
    spans = list(trace.spans.values())
    n = len(spans)
    idx = {s.id: i for i, s in enumerate(spans)}
    ids = [s.id for s in spans]
    kinds = [s.kind for s in spans]
    names = [s.name for s in spans]
    t0 = [s.t0 for s in spans]
    t1 = [end_ns if s.t1 is None else s.t1 for s in spans]
    in_flight = [s.t1 is None for s in spans]
    par = [-1] * n
    aft: list[tuple[int, ...]] = [()] * n
    gap0 = [0] * n
    step_of = [-1] * n
    kids: dict[int, list[int]] = {}
    roots: list[int] = []
    problems: list[str] = []
    get = idx.get
    for i, s in enumerate(spans):
        p = get(s.parent, -1) if s.parent is not None else -1
        if p >= i:
            p = -1
        par[i] = p
        anchor = 0
        if p >= 0:
            kids.setdefault(p, []).append(i)
            anchor = t0[p]
            step_of[i] = step_of[p]
        else:
            roots.append(i)
        if s.kind == "step":
            step_of[i] = i
        if s.after:
            deps = []
            for a in s.after:
                j = get(a, -1)
                if 0 <= j < i:
                    deps.append(j)
                    if t1[j] > anchor:
                        anchor = t1[j]
                else:
                    problems.append(f"span {s.id}: 'after' names {a}, which did not start "
                                    f"before it; edge ignored")
            aft[i] = tuple(deps)
        gap0[i] = t0[i] - anchor
    gap1: dict[int, int] = {}
    last_desc = list(range(n))
    for p in sorted(kids, reverse=True):  # children have larger indices than their parent
        ks = kids[p]
        gap1[p] = t1[p] - max(t1[c] for c in ks)
        last_desc[p] = max(last_desc[c] for c in ks)
    fin: dict[int, list[int]] = {}
    for p in sorted(kids, reverse=True):  # deeper parents first at the same trigger
        fin.setdefault(last_desc[p], []).append(p)
    end_gap = end_ns - max((t1[r] for r in roots), default=end_ns)
    g = Graph(trace, ids, kinds, names, par, aft, t0, t1, gap0, kids, gap1, fin, roots,
              end_ns, end_gap, in_flight, step_of, problems=problems)
    tps = fallback_tps(trace)
    for i, s in enumerate(spans):
        if s.kind == "model" and s.t1 is not None and i not in kids:
            g.models[i] = model_parts(s.attrs, s.t1 - s.t0, tps)
    return g


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
    ``total``. A gap segment is framework time owned by that span (-1: before/after the run).

    Walking back from the end: a parent's end is decided by its latest-ending child (so of
    parallel tool calls only the longest branch counts); a span's start by its latest dependency
    (an ``after`` span wins a tie with the parent's start).
    """
    out: list[tuple[int, int, bool]] = []
    if not g.roots:
        return [(-1, total, True)]
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
        best, nxt, nxt_end = (S[p], p, False) if p >= 0 else (0, -1, False)
        for a in aft[i]:
            if E[a] >= best:
                best, nxt, nxt_end = E[a], a, True
        out.append((i, S[i] - best, True))
        if nxt < 0:
            return out
        i, at_end = nxt, nxt_end
