"""Builds the flat dependency Graph (:mod:`agentloop.analysis.flat`) from a loaded trace.

Flattening precomputes, once, what every pass needs per span: its recorded start gap after its
latest dependency, its parent's close gap, the positions a pass compares, the recorded
critical-path links, the attribution of each model span, and each tool span's queue time.
The passes live in :mod:`agentloop.analysis.passes`; ``Graph``, ``critical_path``, ``retime``
and ``retime_pair`` are re-exported here for callers.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator
from operator import sub
from pathlib import Path

from agentloop.analysis.agents import call_tier, recorded_tiers
from agentloop.analysis.attribution import ModelParts, model_parts
from agentloop.analysis.flat import Closing, Graph, interleave, link_roots
from agentloop.analysis.passes import critical_path, retime, retime_pair
from agentloop.trace.reader import SpanRecord, Trace, load_trace

__all__ = [
    "Graph",
    "build_graph",
    "critical_path",
    "fallback_tps",
    "gc_paused",
    "load_quickly",
    "retime",
    "retime_pair",
]


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
    """:func:`agentloop.trace.reader.load_trace` with the cyclic collector paused while loading.

    Freezing the loaded objects out of the collector's sight (``gc.freeze``) is left to the
    program: the CLI does it after loading (:func:`agentloop.commands.report.load_for_analysis`),
    a library call must not change the process's collector.
    """
    with gc_paused():
        return load_trace(path)


def build_graph(trace: Trace) -> Graph:
    """Flatten a loaded trace into a :class:`Graph`; unknown or forward ``after`` ids are dropped
    with a note in ``problems``."""
    with gc_paused():
        return _build(trace)


def _build(trace: Trace) -> Graph:
    # whole-list passes (comprehensions, map) rather than one loop doing everything; each helper
    # below is one or two such passes over every span
    end_ns = trace.end_ns
    spans = list(trace.spans.values())
    n = len(spans)
    ids = [s.id for s in spans]
    kinds = [s.kind for s in spans]
    t0 = [s.t0 for s in spans]
    t1 = [end_ns if s.t1 is None else s.t1 for s in spans]
    in_flight = [s.t1 is None for s in spans]
    par, aft, problems = _edges(spans, ids)
    # positions in V (module docstring): a start's candidates are the parent's start (V[2n], 0
    # while re-timing, for a root) and the ends of the after spans, in recorded order
    sent = 2 * n
    p0 = [2 * p if p >= 0 else sent for p in par]
    af = [tuple([2 * j + 1 for j in a]) if a else () for a in aft]
    V = interleave(t0, t1, 0)
    # the recorded critical-path links (next position back); a leaf's end links to its start
    back = list(range(-1, sent))
    gap0 = _start_gaps(t0, p0, af, V, back)
    kids, step_of = _children(par, kinds)
    gap1, fin, ends, finl = _closings(kids, t1, V, back)
    roots = [i for i, p in enumerate(par) if p < 0]
    V[sent] = start_ns = min((t0[r] for r in roots), default=end_ns)  # no run span: no agent time
    link_roots(roots, af, V, back)
    sop, leaf_end = _position_marks(step_of, ends)
    return Graph(
        trace=trace,
        ids=ids,
        kinds=kinds,
        names=[s.name for s in spans],
        parent=par,
        after=aft,
        t0=t0,
        t1=t1,
        start_gap=gap0,
        children=kids,
        close_gap=gap1,
        closes=fin,
        roots=roots,
        end_ns=end_ns,
        start_ns=start_ns,
        run_end_gap=end_ns - max((t1[r] for r in roots), default=end_ns),
        in_flight=in_flight,
        step_of=step_of,
        models=_models(trace, spans, kinds, in_flight, kids, t0, t1),
        queue=_queue(spans, gap0),
        problems=problems,
        spans=spans,
        recorded_dur=list(map(sub, t1, t0)),
        parent_start=p0,
        after_ends=af,
        child_ends=ends,
        closes_at=finl,
        step_at=sop,
        back_link=back,
        is_leaf_end=leaf_end,
    )


def _position_marks(
    step_of: list[int], ends: list[tuple[int, ...] | None]
) -> tuple[list[int], list[bool]]:
    """Per position in V: the step owning it (-1 at run level), and whether it is a leaf's end."""
    sop = [-1] * (2 * len(step_of) + 1)
    sop[0:-1:2] = step_of
    sop[1::2] = step_of
    leaf_end = [False] * (2 * len(step_of) + 1)
    leaf_end[1::2] = [e is None for e in ends]
    return sop, leaf_end


def _queue(spans: list[SpanRecord], gap0: list[int]) -> list[int]:
    """A tool span opens once the max_parallel_tools bound lets it: that wait, in its start gap."""
    return [
        0 if s.tool is None else max(0, min(s.tool.queued_ns, g))
        for s, g in zip(spans, gap0, strict=True)
    ]


def _edges(
    spans: list[SpanRecord], ids: list[str]
) -> tuple[list[int], list[tuple[int, ...]], list[str]]:
    """Each span's parent index (-1 for a root) and ``after`` indices, a parent or after span
    that did not start before it dropped with a note (the third list)."""
    n = len(spans)
    idx = dict(zip(ids, range(n), strict=True))
    # dict.get(parent, -1) mapped in C: a root's parent None maps to -1 too
    par: list[int] = list(
        map(
            idx.get,  # type: ignore[arg-type]
            [s.parent for s in spans],
            itertools.repeat(-1, n),
        )
    )
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
                problems.append(
                    f"span {ids[i]}: 'after' names {a}, which did not start before it; edge ignored"
                )
        aft[i] = tuple(j for j in aft[i] if j < i)
    return par, aft, problems


def _start_gaps(
    t0: list[int], p0: list[int], af: list[tuple[int, ...]], V: list[int], back: list[int]
) -> list[int]:
    """Each span's recorded start gap after its latest candidate; that candidate is its start's
    link in ``back`` (set here)."""
    gap0 = [0] * len(t0)
    for i, t, w, deps in zip(range(len(t0)), t0, p0, af, strict=True):
        best = V[w]
        for x in deps:  # an after span wins a tie with the parent, a later listed one too
            e = V[x]
            if e >= best:
                best, w = e, x
        gap0[i] = t - best
        back[2 * i] = w
    return gap0


def _children(par: list[int], kinds: list[str]) -> tuple[dict[int, list[int]], list[int]]:
    """The children of each span that has any, and the step span owning each span."""
    kids: dict[int, list[int]] = {}
    step_of = [-1] * len(par)
    for i, p, k in zip(range(len(par)), par, kinds, strict=True):
        if p >= 0:
            ks = kids.get(p)
            if ks is None:
                kids[p] = [i]
            else:
                ks.append(i)
            step_of[i] = i if k == "step" else step_of[p]
        elif k == "step":
            step_of[i] = i
    return kids, step_of


def _closings(
    kids: dict[int, list[int]], t1: list[int], V: list[int], back: list[int]
) -> tuple[
    dict[int, int],
    dict[int, list[int]],
    list[tuple[int, ...] | None],
    list[tuple[Closing, ...] | None],
]:
    """Per parent: its close gap, and the span whose placing closes it (``closes`` and
    ``closes_at``); per span: its children's end positions (``child_ends``). A parent's end
    links in ``back`` to its latest child's (set here)."""
    n = len(t1)
    vget = V.__getitem__
    gap1: dict[int, int] = {}
    last_desc: dict[int, int] = {}
    fin: dict[int, list[int]] = {}
    ends: list[tuple[int, ...] | None] = [None] * n
    finl: list[tuple[Closing, ...] | None] = [None] * n
    for p in sorted(kids, reverse=True):  # children have larger indices than their parent;
        ks = kids[p]  # at one trigger, deeper parents come first
        ends[p] = kend = tuple([2 * c + 1 for c in reversed(ks)])
        back[2 * p + 1] = latest = max(kend, key=vget)  # the last child wins a tie
        gap1[p] = g1 = t1[p] - V[latest]
        last_desc[p] = ld = max(last_desc.get(c, c) for c in ks)
        fin.setdefault(ld, []).append(p)
        finl[ld] = (*(finl[ld] or ()), (2 * p + 1, kend, g1))
    return gap1, fin, ends, finl


def _models(
    trace: Trace,
    spans: list[SpanRecord],
    kinds: list[str],
    in_flight: list[bool],
    kids: dict[int, list[int]],
    t0: list[int],
    t1: list[int],
) -> dict[int, ModelParts]:
    """The attribution of each finished model span without children, at its own tier's fallback
    output speed (issue 23: a call's fallback speed is its own tier's)."""
    tps = fallback_tps(trace)
    models = {
        i: model_parts(spans[i].model, t1[i] - t0[i], tps, spans[i].status == "error")
        for i, k in enumerate(kinds)
        if k == "model" and not in_flight[i] and i not in kids
    }
    tiers = recorded_tiers(trace)
    if len(tiers) > 1:
        for i in models:
            prof = tiers[call_tier(trace, spans[i].attrs, tiers)].profile
            own = 0.0 if prof is None else prof.output_tps
            if own != tps:
                s = spans[i]
                models[i] = model_parts(s.model, t1[i] - t0[i], own, s.status == "error")
    return models


def fallback_tps(trace: Trace) -> float:
    """The recorded tier's profile ``output_tps`` (for spans with fewer than two visible tokens);
    0 when the header has no profile (the schema refuses a profile with ``output_tps <= 0``)."""
    profile = trace.run.tier.profile
    return 0.0 if profile is None else profile.output_tps
