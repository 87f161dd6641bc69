"""Chrome trace-event JSON of a trace, for Perfetto's UI and ``chrome://tracing``-style viewers.

The JSON object format (``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``):

- ``M`` metadata events name the process (task and tier), label it (status, steps, tier
  profile), and name and order one thread per lane of :mod:`agentloop.export._layout`;
- one complete event (``ph: "X"``, ``ts``/``dur`` in microseconds from the run's start) per
  span, and nested inside each model call its phases (retry, wait, base, reasoning, decode,
  tail); spans in flight when the trace stopped end at its last instant, ``(in flight)`` in
  their name and ``in_flight: true`` in their args;
- one flow (``ph: "s"`` at the end of the waited-for span, ``ph: "f"`` with ``bp: "e"`` at the
  start of the waiting one, the same ``id``) per recorded ``after`` edge;
- counters (``ph: "C"``): output tokens per second while a model call decodes, and the run's
  output tokens so far.

Events are sorted by timestamp (an enclosing slice before the slices it holds), so every
track's timestamps are monotonic.
"""

from __future__ import annotations

from typing import Any

from agentloop._version import __version__
from agentloop.export._layout import Bar, Timeline, layout
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace

PID = 1
_EPS_US = 0.001  # 1 ns: a flow leaves from inside its span, not from the instant it closes


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def _dur(t0: int, t1: int) -> float:
    """A duration that ends exactly where the slice's end instant is written (no rounding gap)."""
    return round(_us(t1) - _us(t0), 3)


def _args(b: Bar) -> dict[str, Any]:
    a = b.span.attrs
    out: dict[str, Any] = {"span_id": b.id, "status": b.status, "critical_path": b.critical}
    if b.in_flight:
        out["in_flight"] = True
    for key in (
        A.STEP,
        A.GEN_AI_REQUEST_MODEL,
        A.GEN_AI_USAGE_INPUT_TOKENS,
        A.GEN_AI_USAGE_OUTPUT_TOKENS,
        A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
        A.OUTPUT_TPS,
        A.OK,
        A.ERROR,
    ):
        v = a.get(key, b.span.start_attrs.get(key))
        if v is not None:
            out[key] = v
    if b.kind == "tool" and isinstance(a.get(A.ARGUMENTS), str):
        out[A.ARGUMENTS] = a[A.ARGUMENTS][:500]
    return out


def _meta(tl: Timeline) -> list[dict[str, Any]]:
    h, end = tl.trace.run, tl.trace.end_record
    task, tier, prof = h.task.name, h.tier.name, h.tier.profile
    status = end.status if end else "incomplete (in flight when the trace stopped)"
    speed = (
        f"base {prof.base_latency_s:g} s, prefill {prof.prefill_tps:g} tok/s, "
        f"output {prof.output_tps:g} tok/s"
        if prof is not None
        else "unknown"
    )
    labels = f"status {status}; tier {tier} profile {speed}"
    ev: list[dict[str, Any]] = [
        {
            "ph": "M",
            "pid": PID,
            "tid": 0,
            "ts": 0,
            "name": "process_name",
            "args": {"name": f"agentloop {task} on {tier}"},
        },
        {
            "ph": "M",
            "pid": PID,
            "tid": 0,
            "ts": 0,
            "name": "process_labels",
            "args": {"labels": labels},
        },
    ]
    for k, lane in enumerate(tl.lanes):
        ev.append(
            {
                "ph": "M",
                "pid": PID,
                "tid": k + 1,
                "ts": 0,
                "name": "thread_name",
                "args": {"name": lane},
            }
        )
        ev.append(
            {
                "ph": "M",
                "pid": PID,
                "tid": k + 1,
                "ts": 0,
                "name": "thread_sort_index",
                "args": {"sort_index": k},
            }
        )
    return ev


def perfetto_events(tl: Timeline) -> list[dict[str, Any]]:
    """The trace events of a laid-out trace, sorted by timestamp (metadata first)."""
    events: list[dict[str, Any]] = []
    out_tokens = 0
    for b in tl.bars:
        events += _bar_events(b)
        m = b.span.model
        if m is not None and not b.in_flight:  # the running total of output tokens
            out_tokens += m.output_tokens
            events.append(_counter(b.t1, "output tokens", {"tokens": out_tokens}))
    events += _flow_events(tl)
    timed = sorted(((ev["ts"], -ev.get("dur", 0.0)), k, ev) for k, ev in enumerate(events))
    return _meta(tl) + [ev for _, _, ev in timed]


def _slice(tid: int, t0: int, t1: int, name: str, cat: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ph": "X",
        "pid": PID,
        "tid": tid,
        "ts": _us(t0),
        "dur": _dur(t0, t1),
        "name": name,
        "cat": cat,
        "args": args,
    }


def _counter(t: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "C", "pid": PID, "ts": _us(t), "name": name, "args": args}


def _bar_events(b: Bar) -> list[dict[str, Any]]:
    """A bar's slice, its model phases as slices inside it, and the output speed while it decodes."""
    tid = b.lane + 1
    name = b.label + (" (in flight)" if b.in_flight else "")
    out = [_slice(tid, b.t0, b.t1, name, b.category, _args(b))]
    tps = b.span.attrs.get(A.OUTPUT_TPS)  # the runner's measured figure (agentloop.model.timing)
    for p in b.phases:
        out.append(_slice(tid, p.t0, p.t1, p.name, f"model.{p.name}", {"span_id": b.id}))
        if p.name == "decode" and isinstance(tps, int | float):
            out.append(_counter(p.t0, "output tok/s", {"tok/s": round(float(tps), 2)}))
            out.append(_counter(p.t1, "output tok/s", {"tok/s": 0}))
    return out


def _flow_events(tl: Timeline) -> list[dict[str, Any]]:
    """An ``after`` edge as a flow from inside the waited-for span to the waiting one's start."""
    by_id = {b.id: b for b in tl.bars}
    out: list[dict[str, Any]] = []
    for flow_id, (a, w) in enumerate(tl.edges, start=1):
        src, dst = by_id[a], by_id[w]
        common = {"pid": PID, "id": flow_id, "cat": "after", "name": "after"}
        out.append(
            {
                "ph": "s",
                **common,
                "tid": src.lane + 1,
                "ts": max(_us(src.t0), round(_us(src.t1) - _EPS_US, 3)),
            }
        )
        out.append({"ph": "f", "bp": "e", **common, "tid": dst.lane + 1, "ts": _us(dst.t0)})
    return out


def to_perfetto(trace: Trace) -> dict[str, Any]:
    """The whole Chrome trace-event JSON object for ``trace``."""
    tl = layout(trace)
    h, end = trace.run, trace.end_record
    meta = {
        "agentloop": __version__,
        "run_id": h.run_id,
        "task": h.task.name,
        "tier": h.raw.get("tier"),  # the recorded tier, copied whole as the trace holds it
        "clock_wall": h.wall,
        "complete": trace.complete,
        "status": end.status if end else None,
        "end_to_end_s": tl.end_ns / 1e9,
        "in_flight": [s.id for s in trace.in_flight],
    }
    return {"traceEvents": perfetto_events(tl), "displayTimeUnit": "ms", "metadata": meta}
