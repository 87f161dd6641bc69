"""A trace laid out for a timeline: spans as bars on lanes, model phases, critical path, edges.

The one layout behind the Perfetto export and the HTML waterfall, so both draw the same thing:

- lane 0 ("agent") holds the run, its steps and their model calls, which nest in time;
- the tool calls of a turn run concurrently, so tools go on lanes 1.. ("tools 1", ...), each
  on the lowest lane free at its start;
- sub-agents of one turn run concurrently too (issue 23): each sub-run (its agent span, steps
  and model calls) gets a lane of its own, "sub-agent 1", ..., between the agent lane and the
  tool lanes, the lowest one free when it starts; its tools share the tool lanes;
- a model span is split into its phases (failed attempts and back-off, base, hidden reasoning,
  visible decode, tail) from its typed end attributes by the one split of a call's time
  (:func:`agentloop.model.timing.phase_bounds`): reasoning is the stretch just before the first
  visible token, base the rest of the time to it;
- a leaf is on the critical path when its own time is a segment of the path
  (:func:`agentloop.analysis.graph.critical_path`);
- instants are ns from the run span's start (what the analysis calls end-to-end time).

Spans still open when a killed run's trace stops end at the trace's last instant, marked
``in_flight``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentloop.analysis.agents import who
from agentloop.analysis.attribution import tool_category
from agentloop.analysis.graph import build_graph, critical_path, fallback_tps
from agentloop.model.timing import phase_bounds
from agentloop.trace.reader import SpanRecord, Trace

AGENT_LANE = "agent"


@dataclass(frozen=True, slots=True)
class Phase:
    """A named stretch inside a model span (ns from the run's start)."""

    name: str  # retry | wait | base | reasoning | decode | tail
    t0: int
    t1: int


@dataclass(frozen=True, slots=True)
class Bar:
    """One span on the timeline; ``t0``/``t1`` are ns from the run's start."""

    id: str
    parent: str | None
    kind: str
    name: str
    label: str  # what a viewer shows: the tool's or model's name
    category: str  # run | step | model | tool:<name>
    lane: int
    t0: int
    t1: int
    status: str
    in_flight: bool
    critical: bool
    phases: tuple[Phase, ...]
    span: SpanRecord


@dataclass(frozen=True, slots=True)
class Timeline:
    """A whole trace laid out: bars in recorded start order, lane names, ``after`` edges."""

    trace: Trace
    bars: tuple[Bar, ...]
    lanes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]  # (waited-for span, waiting span)
    start_ns: int  # the run span's start, run clock
    end_ns: int  # end-to-end time: the end record (else the last instant) from the start


def model_phases(span: SpanRecord, t1: int, tps: float) -> tuple[Phase, ...]:
    """The phases of a model span on the run clock (absolute; callers shift them): failed
    attempts and their back-off, then the successful attempt's phases from
    :func:`agentloop.model.timing.phase_bounds`, each clamped to the span."""
    m = span.model
    if m is None:  # still in flight: nothing recorded yet
        return ()
    lo, hi = span.t0, t1

    def clamp(t: int) -> int:
        return min(hi, max(lo, t))

    out: list[Phase] = []
    for att in m.attempts:
        if att.error is not None and att.t_end is not None:
            s, e = clamp(att.t_start if att.t_start is not None else lo), clamp(att.t_end)
            if e > s:
                out.append(Phase("retry", s, e))
            if att.wait_ns:
                out.append(Phase("wait", e, clamp(e + att.wait_ns)))
    tm = m.timing
    if tm is None:
        return tuple(out)
    bounds = phase_bounds(
        tm.t_send,
        tm.t_first_visible,
        tm.t_last,
        hi if tm.t_end is None else tm.t_end,
        m.reasoning_tokens,
        m.visible_tokens,
        tps,
    )
    out += [Phase(name, clamp(s), clamp(e)) for name, s, e in bounds if clamp(e) > clamp(s)]
    return tuple(out)


def _free_lane(free: list[int], t0: int, t1: int) -> int:
    """The lowest lane free at ``t0`` (a new one if none), now busy until ``t1``."""
    k = next((k for k, f in enumerate(free) if f <= t0), len(free))
    if k == len(free):
        free.append(t1)
    else:
        free[k] = t1
    return k


def _label(s: SpanRecord) -> str:
    if s.kind == "tool":
        return tool_category(s.name, s.attrs).removeprefix("tool:")
    return s.name


def layout(trace: Trace) -> Timeline:
    """Lay a loaded trace out on lanes (see the module docstring)."""
    g = build_graph(trace)
    start = g.start_ns
    last = trace.end_ns
    on_path = {
        g.ids[i] for i, _, gap in critical_path(g, g.t0, g.t1, g.end_ns) if not gap and i >= 0
    }
    tps = fallback_tps(trace)
    placed, n_sub, n_tool = _lanes(trace)
    bars: list[Bar] = []
    edges: list[tuple[str, str]] = []
    for s, lane in placed:
        bars.append(_bar(s, lane, start, last, s.id in on_path, tps))
        edges += [(a, s.id) for a in s.after if a in trace.spans]
    lanes = (
        AGENT_LANE,
        *(f"sub-agent {k + 1}" for k in range(n_sub)),
        *(f"tools {k + 1}" for k in range(n_tool)),
    )
    return Timeline(trace, tuple(bars), lanes, tuple(edges), start, max(0, last - start))


def _lanes(trace: Trace) -> tuple[list[tuple[SpanRecord, int]], int, int]:
    """Each span with its lane: the main agent's on lane 0, then a lane per overlapping
    sub-run (one sub-run keeps its lane), then a lane per overlapping tool call. Returns the
    spans with their lanes and the number of sub-agent and tool lanes."""
    last = trace.end_ns
    lane_free: list[int] = []  # per tool lane: when its last tool ends
    sub_free: list[int] = []  # per sub-agent lane: when its last sub-run ends
    sub_lane: dict[tuple[str, int], int] = {}  # (agent, invocation) -> its sub-agent lane
    placed: list[tuple[SpanRecord, int, str]] = []  # (span, lane, kind of lane)
    for s in trace.spans.values():
        t1 = last if s.t1 is None else s.t1
        w = who(s.start_attrs)
        if s.kind == "tool":
            placed.append((s, _free_lane(lane_free, s.t0, t1), "tool"))
        elif w.depth > 0:
            key = (w.agent, w.invocation)
            if key not in sub_lane:
                sub_lane[key] = _free_lane(sub_free, s.t0, t1)
            placed.append((s, sub_lane[key], "sub"))
        else:
            placed.append((s, 0, "main"))
    n_sub = len(sub_free)
    return (
        [
            (s, 0 if where == "main" else 1 + k if where == "sub" else 1 + n_sub + k)
            for s, k, where in placed
        ],
        n_sub,
        len(lane_free),
    )


def _bar(s: SpanRecord, lane: int, start: int, last: int, critical: bool, tps: float) -> Bar:
    """Span ``s`` as a bar on ``lane``, its instants from the trace's ``start`` (an open span
    ends at ``last``), a model call with its phases."""
    t1 = last if s.t1 is None else s.t1
    phases = (
        tuple(Phase(p.name, p.t0 - start, p.t1 - start) for p in model_phases(s, t1, tps))
        if s.kind == "model"
        else ()
    )
    cat = tool_category(s.name, s.attrs) if s.kind == "tool" else s.kind
    return Bar(
        s.id,
        s.parent,
        s.kind,
        s.name,
        _label(s),
        cat,
        lane,
        max(0, s.t0 - start),
        max(0, t1 - start),
        s.status,
        s.t1 is None,
        critical,
        phases,
        s,
    )
