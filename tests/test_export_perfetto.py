"""The Perfetto export: Chrome trace-event JSON checked against the format's rules."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from agentloop.export.perfetto import to_perfetto
from agentloop.trace.reader import load_trace
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
STANDARD = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"


def trace_event_problems(doc: dict[str, Any]) -> list[str]:
    """Every way ``doc`` breaks the trace-event format's rules (empty: it keeps them all).

    JSON object format with a ``traceEvents`` array; ``ph`` one of X, M, C, s, f; every event
    has pid and a numeric ``ts``; complete events have ``dur >= 0`` and nest properly on their
    track (no partial overlap); timestamps are monotonic per track (pid, tid) for slices and
    flows and per counter; every flow id has exactly one ``s`` and one ``f``, the ``s`` inside a
    slice of its track, the ``f`` (``bp: e``) inside a slice of its track and not before its
    ``s``; every track used is named by an ``M`` thread_name event.
    """
    out: list[str] = []
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ["traceEvents is not an array"]
    last: dict[tuple[Any, ...], float] = {}
    stacks: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
    slices: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
    flows: dict[Any, dict[str, list[dict[str, Any]]]] = {}
    named: set[tuple[Any, Any]] = set()
    for n, ev in enumerate(events):
        ph = ev.get("ph")
        if ph not in ("X", "M", "C", "s", "f"):
            out.append(f"event {n}: ph {ph!r} not used by this exporter's format")
            continue
        if not isinstance(ev.get("pid"), int) or not isinstance(ev.get("ts"), int | float):
            out.append(f"event {n}: pid or ts missing")
            continue
        if ph == "M":
            if ev.get("name") == "thread_name":
                named.add((ev["pid"], ev["tid"]))
            continue
        ts = float(ev["ts"])
        track = (ev["pid"], "counter", ev["name"]) if ph == "C" else (ev["pid"], ev.get("tid"))
        if ts < last.get(track, float("-inf")):
            out.append(f"event {n}: ts {ts} goes back on track {track}")
        last[track] = ts
        if ph == "X":
            dur = ev.get("dur")
            if not isinstance(dur, int | float) or dur < 0:
                out.append(f"event {n}: complete event without dur >= 0")
                continue
            key = (ev["pid"], ev["tid"])
            stack = stacks.setdefault(key, [])
            while stack and stack[-1][1] <= ts + 1e-6:  # viewers read ts as integer ns
                stack.pop()
            if stack and ts + dur > stack[-1][1] + 1e-6:
                out.append(
                    f"event {n} ({ev['name']}): overlaps its enclosing slice without nesting in it"
                )
            stack.append((ts, ts + dur))
            slices.setdefault(key, []).append((ts, ts + dur))
        if ph in ("s", "f"):
            flows.setdefault(ev.get("id"), {"s": [], "f": []})[ph].append(ev)
    for fid, pair in flows.items():
        if len(pair["s"]) != 1 or len(pair["f"]) != 1:
            out.append(f"flow {fid}: {len(pair['s'])} start(s), {len(pair['f'])} finish(es)")
            continue
        s, f = pair["s"][0], pair["f"][0]
        if f["ts"] < s["ts"]:
            out.append(f"flow {fid}: finishes before it starts")
        if f.get("bp") != "e":
            out.append(f"flow {fid}: finish not bound to its enclosing slice (bp e)")
        for ev in (s, f):
            if not any(a <= ev["ts"] <= b for a, b in slices.get((ev["pid"], ev["tid"]), ())):
                out.append(f"flow {fid}: {ev['ph']} at {ev['ts']} is in no slice of its track")
    used = {(ev["pid"], ev["tid"]) for ev in events if ev.get("ph") in ("X", "s", "f")}
    out += [f"track {t} has no thread_name" for t in sorted(used - named)]
    return out


def test_reference_trace_exports_valid_trace_events() -> None:
    """The reference run exports as trace events that keep every rule of the format."""
    doc = orjson.loads(orjson.dumps(to_perfetto(load_trace(STANDARD))))
    assert [] == trace_event_problems(doc)


def test_every_span_is_a_slice_and_every_edge_a_flow() -> None:
    """One complete event per span, model phases nested in their call, one flow per edge."""
    trace = load_trace(STANDARD)
    events = to_perfetto(trace)["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and not e["cat"].startswith("model.")]
    phases = Counter(e["name"] for e in events if e["ph"] == "X" and e["cat"].startswith("model."))
    edges = sum(len(s.after) for s in trace.spans.values())
    starts = Counter(e["ph"] for e in events)
    assert len(trace.spans) == len(spans)
    models = len(trace.of_kind("model"))
    assert (models, models, models) == (phases["base"], phases["reasoning"], phases["decode"])
    assert (edges, edges) == (starts["s"], starts["f"])


def test_model_phases_sum_to_what_the_report_attributes() -> None:
    """The base, reasoning and decode slices of a call last what the analysis books for it."""
    from agentloop.analysis.graph import build_graph

    trace = load_trace(STANDARD)
    g = build_graph(trace)
    events = to_perfetto(trace)["traceEvents"]
    first = trace.of_kind("model")[0]
    mine = {
        e["name"]: e["dur"]
        for e in events
        if e["ph"] == "X" and e["cat"].startswith("model.") and e["args"]["span_id"] == first.id
    }
    parts = g.models[g.ids.index(first.id)]
    expected = {k: round(getattr(parts, k) / 1000) for k in ("base", "reasoning", "decode")}
    assert expected == {k: round(mine[k]) for k in expected}


def test_tools_of_one_turn_get_their_own_tracks() -> None:
    """The three read_file calls of step 1 run at once and sit on three different tracks."""
    events = to_perfetto(load_trace(STANDARD))["traceEvents"]
    step1 = [
        e
        for e in events
        if e["ph"] == "X" and e["cat"] == "tool:read_file" and e["args"].get("step") == 1
    ]
    assert 3 == len({e["tid"] for e in step1})


def test_counters_and_metadata() -> None:
    """Counters carry tokens per second and tokens so far; metadata names the run's tier."""
    doc = to_perfetto(load_trace(STANDARD))
    counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
    total = max(
        e["args"]["tokens"]
        for e in doc["traceEvents"]
        if e["ph"] == "C" and e["name"] == "output tokens"
    )
    assert {"output tok/s", "output tokens"} == counters
    assert 1183 == total
    assert ("sim-standard", True) == (doc["metadata"]["tier"]["name"], doc["metadata"]["complete"])


def test_incomplete_trace_exports_with_spans_in_flight_marked(tmp_path: Path) -> None:
    """A trace cut mid-run exports what it holds, valid, its open spans named in flight."""
    lines = STANDARD.read_bytes().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"\n".join(lines[:40]) + b"\n")
    trace = load_trace(cut)
    doc = to_perfetto(trace)
    marked = {
        e["args"]["span_id"]
        for e in doc["traceEvents"]
        if e["ph"] == "X" and e["args"].get("in_flight")
    }
    assert [] == trace_event_problems(doc)
    assert {s.id for s in trace.in_flight} == marked
    assert all(
        e["name"].endswith("(in flight)")
        for e in doc["traceEvents"]
        if e["ph"] == "X" and e["args"].get("in_flight")
    )


def test_cli_writes_the_file_and_refuses_a_non_trace(tmp_path: Path) -> None:
    """``agentloop export --format perfetto`` writes the JSON; a non-trace is exit 2 naming it."""
    out = tmp_path / "run.perfetto.json"
    ok = run_cli("export", STANDARD, "--format", "perfetto", "-o", out)
    bad_input = tmp_path / "bad.jsonl"
    bad_input.write_text("hello\n")
    bad = run_cli("export", bad_input, "--format", "perfetto", "-o", out)
    assert (0, []) == (ok.returncode, trace_event_problems(orjson.loads(out.read_bytes())))
    assert (2, True, "") == (bad.returncode, str(bad_input) in bad.stderr, bad.stdout)
    assert "Traceback" not in bad.stderr


def test_concurrent_sub_agents_get_a_track_each() -> None:
    """Five sub-agents of one turn: each sub-run's agent, step and model slices on a track of
    its own (they overlap in time), the lead's on the agent track; the export stays valid."""
    from agentloop.analysis.synthetic_runs import fanout_run

    trace = fanout_run([3, 1, 2, 1, 1]).trace()
    doc = to_perfetto(trace)
    assert trace_event_problems(doc) == []
    names = {
        e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"
    }
    by_id = {s.id: s for s in trace.spans.values()}
    tracks: dict[str, set[str]] = {}
    for e in doc["traceEvents"]:
        span = by_id.get(e.get("args", {}).get("span_id", ""))
        if e.get("ph") == "X" and span is not None and span.kind in ("agent", "step", "model"):
            agent = span.start_attrs.get("gen_ai.agent.name", "main")
            tracks.setdefault(agent, set()).add(names[e["tid"]])
    assert tracks["main"] == {"agent"}
    subs = [tracks[f"w{j}"] for j in range(5)]
    assert all(len(t) == 1 for t in subs)
    assert sorted(t for s in subs for t in s) == [f"sub-agent {k}" for k in range(1, 6)]
