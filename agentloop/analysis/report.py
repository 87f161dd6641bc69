"""Where a recorded run's time went: per category, per step (compounding), the critical path.

The critical path is walked back over the recorded ``after`` edges and parent/child nesting
(:func:`agentloop.analysis.graph.critical_path`), so of parallel tool calls only the longest
branch counts; its segments add up exactly to the run's end-to-end time. ``busy`` time per
category adds every span, parallel ones included, and so can exceed the run's time. The report
as text is :mod:`agentloop.analysis.report_text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentloop.analysis._table import secs
from agentloop.analysis.attribution import FRAMEWORK, IN_FLIGHT, TOOL_QUEUE, tool_category
from agentloop.analysis.breakdown import MODEL_CATS, category_order, path_breakdown, step_label
from agentloop.analysis.flat import Graph
from agentloop.analysis.lateness import Lateness, of_trace
from agentloop.analysis.passes import critical_path
from agentloop.analysis.report_rows import StepColumns, StepRow, path_json, steps_json
from agentloop.loop.context_window import recorded_trims


@dataclass(frozen=True, slots=True)
class Report:
    """The analysis of one trace, ready to print or to dump as JSON."""

    task: str
    tier: str
    status: str
    complete: bool
    problems: tuple[str, ...]
    in_flight: tuple[str, ...]
    measured_ns: int
    critical: dict[str, int]  # category -> ns on the critical path (sums to measured_ns)
    busy: dict[str, int]  # category -> ns summed over all spans
    steps: Sequence[StepRow]  # a tuple, or a view that makes each row when asked (big traces)
    path: Sequence[tuple[str, str, str, int]]  # (step, kind, name, ns), chronological
    input_tokens: int = 0  # over every model call
    cached_tokens: int = 0  # of input_tokens, served from the server's prompt cache
    trims: tuple[dict[str, Any], ...] = ()  # context trims: step + attrs.TRIM_KEYS each
    lateness: Lateness = field(
        default_factory=Lateness
    )  # the client's own lateness over the model calls (issue 28)
    # issue 24: the wall time's parts outside the agent's (the run span's, ``measured_ns``): the
    # setup and check spans' times (None: not recorded) and the wall time from the set-up's start
    # to the check's end (None: a trace from before those were spans: the agent time only)
    setup_ns: int | None = None
    check_ns: int | None = None
    wall_ns: int | None = None
    outside_open: tuple[str, ...] = ()  # kinds of setup/check spans left open (a killed run)

    @property
    def model_share(self) -> float:
        model = sum(v for k, v in self.critical.items() if k in MODEL_CATS)
        return model / self.measured_ns if self.measured_ns else 0.0


def _leaf_category(g: Graph, i: int) -> str:
    if g.in_flight[i]:
        return IN_FLIGHT
    if g.kinds[i] == "tool":
        return tool_category(g.names[i], g.spans[i].tool)
    return FRAMEWORK


def _two_times(g: Graph) -> dict[str, Any]:
    """The wall time's parts outside the agent's time (issue 24), from the trace's setup and
    check root spans (``Trace.outside``)."""
    roots = [(s.kind, s.t0, s.t1) for s in g.trace.outside.values() if s.parent is None]
    return outside_times(roots, g.start_ns, g.start_ns + g.measured_ns)


def outside_times(
    roots: list[tuple[str, int, int | None]], start_ns: int, end_ns: int
) -> dict[str, Any]:
    """The wall time's parts outside the agent's (``start_ns`` to ``end_ns``) from the set-up
    and check root spans, as (kind, start, end or None while open) in start order: the finished
    ones timed, the open ones named. The one formula for both builders of a report's columns
    (:func:`_two_times`, :func:`agentloop.analysis._fastreport.outside`)."""
    done = [(k, t0, t1) for k, t0, t1 in roots if t1 is not None]
    left = tuple(k for k, _, t1 in roots if t1 is None)
    if not done:
        return {"outside_open": left} if left else {}
    setup = [t1 - t0 for k, t0, t1 in done if k == "setup"]
    check = [t1 - t0 for k, t0, t1 in done if k == "check"]
    return {
        "setup_ns": sum(setup) if setup else None,
        "check_ns": sum(check) if check else None,
        "wall_ns": max([end_ns, *(t1 for _, _, t1 in done)])
        - min([start_ns, *(t0 for _, t0, _ in done)]),
        "outside_open": left,
    }


def build_report(g: Graph) -> Report:
    """Analyse a graph: categories (critical path and busy), step rows, critical path."""
    tr = g.trace
    segments = critical_path(g, g.t0, g.t1, g.end_ns)
    critical, _ = path_breakdown(g, segments, None)
    busy: dict[str, int] = {}
    for i in range(len(g)):
        if not g.is_leaf(i):
            continue
        m = g.models.get(i)
        if m is not None:
            for k, v in m.as_dict().items():
                busy[k] = busy.get(k, 0) + v
        else:
            c = _leaf_category(g, i)
            busy[c] = busy.get(c, 0) + g.t1[i] - g.t0[i]
    busy[FRAMEWORK] = busy.get(FRAMEWORK, 0) + critical.get(FRAMEWORK, 0)
    queued = sum(g.queue)
    if queued:
        busy[TOOL_QUEUE] = queued
    steps = []
    for i in range(len(g)):
        if g.kinds[i] == "step":
            steps.append(_step_row(g, i))
    path: list[tuple[str, str, str, int]] = []
    for i, ns, gap in reversed(segments):
        if gap:
            if path and path[-1][1] == "gap":  # merge adjacent framework gaps
                s, k, n, v = path[-1]
                path[-1] = (s, k, n, v + ns)
            else:
                step = step_label(g, g.step_of[i]) if i >= 0 else "run"
                path.append((step, "gap", FRAMEWORK, ns))
        else:
            path.append((step_label(g, g.step_of[i]), g.kinds[i], g.names[i], ns))
    return Report(
        task=tr.run.task.name,
        tier=tr.run.tier.name,
        status=tr.end_record.status if tr.end_record else "incomplete",
        complete=tr.complete,
        problems=tuple(tr.problems + g.problems),
        in_flight=tuple(
            f"{s.id} {s.kind} '{s.name}', open since {secs(s.t0 - g.start_ns)} s into the run"
            for s in tr.in_flight
        ),
        measured_ns=g.measured_ns,
        critical={k: critical[k] for k in category_order(set(critical))},
        busy={k: busy[k] for k in category_order(set(busy))},
        steps=tuple(steps),
        path=tuple(path),
        input_tokens=sum(m.input_tokens for m in g.models.values()),
        cached_tokens=sum(m.cached_tokens for m in g.models.values()),
        trims=tuple(recorded_trims(tr)),
        **_two_times(g),
        lateness=of_trace(tr),
    )


def _step_row(g: Graph, i: int) -> StepRow:
    model = {"base": 0, "reasoning": 0, "decode": 0, "other": 0}
    tools: list[tuple[str, int]] = []
    n_in = n_out = n_r = n_c = 0
    for c in g.children.get(i, ()):
        m = g.models.get(c)
        if m is not None:
            n_c += m.cached_tokens
            model["base"] += m.base
            model["reasoning"] += m.reasoning
            model["decode"] += m.decode
            model["other"] += m.tail + m.wait + m.retry + m.overhead
            n_in += m.input_tokens
            n_out += m.reasoning_tokens + m.visible_tokens
            n_r += m.reasoning_tokens
        elif g.kinds[c] == "tool":
            tools.append((_leaf_category(g, c).removeprefix("tool:"), g.t1[c] - g.t0[c]))
        elif g.kinds[c] == "model":  # in flight
            model["other"] += g.t1[c] - g.t0[c]
    return StepRow(
        step_label(g, i),
        g.t0[i] - g.start_ns,
        g.t1[i] - g.t0[i],
        model,
        tuple(tools),
        n_in,
        n_out,
        n_r,
        g.t1[i] - g.start_ns,
        g.in_flight[i],
        n_c,
    )


def report_json(r: Report) -> dict[str, Any]:
    """The report as plain JSON-able data; times in seconds."""
    return {
        "task": r.task,
        "tier": r.tier,
        "status": r.status,
        "complete": r.complete,
        "problems": list(r.problems),
        "in_flight": list(r.in_flight),
        "measured_s": r.measured_ns / 1e9,
        "agent_s": r.measured_ns / 1e9,  # the run span: what the what-if re-times (issue 24)
        "wall_s": None if r.wall_ns is None else r.wall_ns / 1e9,  # None: not recorded
        "setup_s": None if r.setup_ns is None else r.setup_ns / 1e9,
        "check_s": None if r.check_ns is None else r.check_ns / 1e9,
        "model_share": r.model_share,
        "input_tokens": r.input_tokens,
        "cached_input_tokens": r.cached_tokens,
        "categories": {
            k: {"critical_s": r.critical.get(k, 0) / 1e9, "busy_s": r.busy.get(k, 0) / 1e9}
            for k in category_order(set(r.critical) | set(r.busy))
        },
        "steps": steps_json(StepColumns.of_rows(r.steps)),
        "critical_path": path_json(*zip(*r.path, strict=True)) if r.path else [],
        "context_trims": list(r.trims),
        "lateness": r.lateness.as_json(),
    }


UNSPLIT = "timing.t_first_visible"  # under an imported model span's unknown: phases not split
UNSPLIT_FIX = (
    "re-import with the tier the spans ran on (agentloop import FILE -o TRACE --tier NAME): its "
    "profile's output_tps estimates each call's decode"
)


def unsplit_calls(trace: Any) -> list[dict[str, Any]]:
    """The imported model calls whose phases the spans did not give and nothing estimated: all
    their time is booked as base, so ``--speedup`` cannot shorten them (empty for our own runs)."""
    out = []
    for s in trace.spans.values():
        if s.kind == "model" and UNSPLIT in ((s.attrs or {}).get("unknown") or ()):
            out.append({"span": s.id, "name": s.name, "step": (s.attrs or {}).get("step")})
    return out


def unsplit_note(calls: list[dict[str, Any]]) -> str:
    """One line naming the unsplit calls and the fix ('' when there are none)."""
    if not calls:
        return ""
    steps = ", ".join(str(c["step"]) for c in calls[:20]) + (" ..." if len(calls) > 20 else "")
    return (
        f"note: {len(calls)} model call(s) could not be split into base/reasoning/decode "
        f"(steps {steps}): booked all as base, so an output speed-up leaves them as measured; "
        + UNSPLIT_FIX
    )


def unsplit_json(trace: Any) -> dict[str, Any]:
    """``unsplit_calls`` and ``unsplit_fix`` for a JSON document, or nothing when all are split
    (old traces' documents stay as they were)."""
    return unsplit_fields(unsplit_calls(trace))


def unsplit_fields(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`unsplit_json` of the calls :func:`unsplit_calls` found (a trace's columns keep
    them)."""
    return {"unsplit_calls": calls, "unsplit_fix": UNSPLIT_FIX} if calls else {}


def report_document(trace: Any, report: Any = None, spent: Any = None) -> dict[str, Any]:
    """What ``report --json`` prints (and the service's ``/report`` serves) for ``trace``."""
    from agentloop.analysis import cost
    from agentloop.analysis.agents import has_sub_agents, usage
    from agentloop.analysis.graph import build_graph

    g = build_graph(trace)
    report = report if report is not None else build_report(g)
    spent = spent if spent is not None else cost.of_trace(trace)
    doc = {**report_json(report), "cost": cost.as_json(spent), "tiers": usage(g, "tier")}
    if has_sub_agents(g):  # issue 23: the tree's agents
        doc["agents"] = usage(g, "agent")
    doc.update(unsplit_json(trace))
    return doc
