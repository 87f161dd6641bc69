"""The recorded dependency graph as flat arrays: the Graph type and its flat instant list.

Spans are indexed in recorded start order (the order of their ``span_start`` records), which is
a topological order: a span's parent and every span in its ``after`` list started before it.
A span depends on its parent's *start* and on the *end* of each span in ``after``; its recorded
``start_gap`` is how long after the latest of those (as recorded) it started: framework time
that a faster model does not shrink. A span with children ends ``close_gap`` after its last
child ends (step and run bookkeeping); a leaf ends its duration after it starts. Instants are
integer ns.

The passes (:mod:`agentloop.analysis.passes`) run over one flat list of instants ``V``:
``V[2i]`` is span i's start, ``V[2i + 1]`` its end, ``V[2n]`` the run's start. The Graph holds,
per span, the *positions* in V a pass compares (``parent_start``, ``after_ends``,
``child_ends``, ``closes_at``), so a pass is one plain loop. :func:`agentloop.analysis.graph.
build_graph` makes a Graph from a loaded trace; this module only defines its shape, so the
passes and the builder both import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentloop.analysis.attribution import ModelParts
from agentloop.trace.reader import SpanRecord, Trace

Closing = tuple[int, tuple[int, ...], int]  # (end position, children's end positions, close gap)


@dataclass(frozen=True, slots=True)
class Graph:
    """A trace's spans as parallel lists (index = recorded start order) plus model attribution.

    Built once by :func:`agentloop.analysis.graph.build_graph` and only read afterwards.
    """

    trace: Trace
    ids: list[str]
    kinds: list[str]
    names: list[str]
    parent: list[int]  # parent index, -1 for a root
    after: list[tuple[int, ...]]  # indices of the spans this one waited for
    t0: list[int]
    t1: list[int]  # spans in flight end at the trace's last instant
    start_gap: list[int]  # recorded start minus the latest dependency's recorded instant
    children: dict[int, list[int]]  # children of spans that have any
    close_gap: dict[int, int]  # recorded end minus the last child's end, spans with children
    closes: dict[int, list[int]]  # once span i is placed, these parents' ends are known
    roots: list[int]
    end_ns: int  # the trace's own end instant (end record, else last instant seen)
    start_ns: int  # the run span's start: setup before it (simulator, workspace) is not run time
    run_end_gap: int  # end instant minus the latest root end
    in_flight: list[bool]
    step_of: list[int]  # enclosing step span (itself for a step), -1 outside steps
    models: dict[int, ModelParts]  # finished model spans without children
    queue: list[int]  # tool spans: the part of start_gap spent waiting for max_parallel_tools
    problems: list[str]
    # precomputed for the passes (positions in V, see the module docstring)
    spans: list[SpanRecord]  # the trace's spans in index order
    recorded_dur: list[int]  # recorded durations
    parent_start: list[int]  # position of the parent's start (of V[2n] for a root)
    after_ends: list[tuple[int, ...]]  # positions of the after spans' ends, in recorded order
    child_ends: list[tuple[int, ...] | None]  # positions of the children's ends, last first
    closes_at: list[tuple[Closing, ...] | None]  # per i: parents whose end is known once i is
    step_at: list[int]  # per position in V: the step span owning it, -1 at run level
    back_link: list[int]  # per position: the critical path's next position back, as recorded
    is_leaf_end: list[bool]  # per position: the end of a leaf (its own time on the path)

    @property
    def measured_ns(self) -> int:
        """The run's end-to-end time: from the run span's start to the end record."""
        return self.end_ns - self.start_ns

    def __len__(self) -> int:
        return len(self.ids)

    def is_leaf(self, i: int) -> bool:
        return i not in self.children

    def durations(self) -> list[int]:
        """Recorded durations (the identity re-timing)."""
        return list(self.recorded_dur)


def interleave(starts: list[int], ends: list[int], run_start: int) -> list[int]:
    """The flat instant list V: ``starts[i]`` at 2i, ``ends[i]`` at 2i + 1, ``run_start`` last."""
    v = [run_start] * (2 * len(starts) + 1)
    v[0:-1:2] = starts
    v[1::2] = ends
    return v


def link_roots(
    roots: list[int], after_ends: list[tuple[int, ...]], V: list[int], back: list[int]
) -> None:
    """Link the roots' starts: to an after span ending at or after the run's start ``V[2n]``,
    else to the run's start (the passes compare roots with 0 instead)."""
    for r in roots:
        best, w = V[-1], len(V) - 1
        for x in after_ends[r]:
            if V[x] >= best:
                best, w = V[x], x
        back[2 * r] = w
