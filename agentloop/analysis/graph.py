"""The recorded dependency graph as flat arrays, precomputed once for the re-timing passes.

Spans are indexed in recorded start order (the order of their ``span_start`` records), which is
a topological order: a span's parent and every span in its ``after`` list started before it.
A span depends on its parent's *start* and on the *end* of each span in ``after``; its recorded
``gap0`` is how long after the latest of those (as recorded) it started: framework time that a
faster model does not shrink. A span with children ends ``gap1`` after its last child ends
(step and run bookkeeping); a leaf ends ``duration`` after it starts. Instants are integer ns.

The re-timing passes and the critical path walk live in :mod:`agentloop.analysis.passes`
(re-exported here); the Graph precomputes what they need per span.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from operator import sub
from pathlib import Path

from agentloop.analysis.attribution import ModelParts, model_parts
from agentloop.analysis.passes import (
    critical_path,
    interleave,
    link_roots,
    retime,
    retime_pair,
)
from agentloop.trace.reader import SpanRecord, Trace, load_trace

__all__ = ["Graph", "build_graph", "critical_path", "gc_paused", "load_quickly", "retime",
           "retime_pair"]


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
    # precomputed for the passes (positions in V, see the module docstring)
    spans: list[SpanRecord]  # the trace's spans in index order
    dur0: list[int]  # recorded durations
    p0: list[int]  # position of the parent's start (of V[2n] for a root)
    af: list[tuple[int, ...]]  # positions of the after spans' ends, in recorded order
    ends: list[tuple[int, ...] | None]  # positions of the children's ends, last child first
    finl: list[tuple[tuple[int, tuple[int, ...], int], ...] | None]  # per i: (end position,
                                      # children's ends, gap1) of parents whose end is now known
    sop: list[int]  # per position in V: the step span owning it, -1 at run level
    back: list[int]  # per position: the critical path's next position back, as recorded
    leaf_end: list[bool]  # per position: the end of a leaf (its own time on the path)

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
        return list(self.dur0)


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
    # positions in V (module docstring): a start's candidates are the parent's start (V[2n], 0
    # while re-timing, for a root) and the ends of the after spans, in recorded order
    sent = 2 * n
    p0 = [2 * p if p >= 0 else sent for p in par]
    af = [tuple([2 * j + 1 for j in a]) if a else () for a in aft]
    V = interleave(t0, t1, 0)
    vget = V.__getitem__
    # the recorded critical-path links (next position back); a leaf's end links to its start
    back = list(range(-1, sent))
    gap0 = [0] * n
    for i, t, w, deps in zip(range(n), t0, p0, af, strict=True):
        best = V[w]
        for x in deps:  # an after span wins a tie with the parent, a later listed one too
            e = V[x]
            if e >= best:
                best, w = e, x
        gap0[i] = t - best
        back[2 * i] = w
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
    ends: list[tuple[int, ...] | None] = [None] * n
    finl: list[tuple[tuple[int, tuple[int, ...], int], ...] | None] = [None] * n
    for p in sorted(kids, reverse=True):  # children have larger indices than their parent;
        ks = kids[p]                       # at one trigger, deeper parents come first
        ends[p] = kend = tuple([2 * c + 1 for c in reversed(ks)])
        back[2 * p + 1] = latest = max(kend, key=vget)  # the last child wins a tie
        gap1[p] = g1 = t1[p] - V[latest]
        last_desc[p] = ld = max(last_desc.get(c, c) for c in ks)
        fin.setdefault(ld, []).append(p)
        finl[ld] = (*(finl[ld] or ()), (2 * p + 1, kend, g1))
    sop = [-1] * (sent + 1)  # step owning each position, -1 for run level
    sop[0:-1:2] = step_of
    sop[1::2] = step_of
    V[sent] = start_ns = min((t0[r] for r in roots), default=0)
    link_roots(roots, af, V, back)
    leaf_end = [False] * (sent + 1)
    leaf_end[1::2] = [e is None for e in ends]
    end_gap = end_ns - max((t1[r] for r in roots), default=end_ns)
    tps = fallback_tps(trace)
    models = {i: model_parts(spans[i].attrs, t1[i] - t0[i], tps, spans[i].status == "error")
              for i, k in enumerate(kinds) if k == "model" and not in_flight[i] and i not in kids}
    return Graph(trace, ids, kinds, names, par, aft, t0, t1, gap0, kids, gap1, fin, roots,
                 end_ns, start_ns, end_gap, in_flight, step_of, models, problems,
                 spans, list(map(sub, t1, t0)), p0, af, ends, finl, sop, back, leaf_end)


def fallback_tps(trace: Trace) -> float:
    """The recorded tier's profile ``output_tps`` (for spans with fewer than two visible tokens)."""
    try:
        v = float(trace.header["tier"]["profile"]["output_tps"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return v if v > 0 else 0.0
