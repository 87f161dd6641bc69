"""Benchmark: load and re-time a one-million-span synthetic trace (target: re-timing < 2 s).

Run as ``python tests/benchmarks/bench_analysis.py [STEPS]``. Writes a trace in the real record
format to a temporary file (200,000 steps of one model call and three parallel tool calls: one
million spans, two million span records), then times separately: loading it, flattening it into
the graph (attribution included), one what-if re-timing (new durations + forward pass), and the
full ``whatif`` analysis (both critical paths, ceiling and the nine-point speedup curve).
Figures vary with the machine's load: the script prints what it saw.
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop.analysis.graph import Graph, build_graph, load_quickly  # noqa: E402
from agentloop.analysis.synthetic import agent_lines  # noqa: E402
from agentloop.analysis.whatif import Scenario, WhatIf, predict_ns, whatif  # noqa: E402
from agentloop.tiers import SpeedProfile  # noqa: E402
from agentloop.trace.reader import Trace, load_trace  # noqa: E402


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.jsonl"
        t = time.perf_counter()
        with path.open("wb") as f:
            f.writelines(line + b"\n" for line in agent_lines(steps, tools_per_step=3))
        write_s = time.perf_counter() - t
        size = path.stat().st_size
        # as the commands do: one load_quickly, then the analysis (the plain load_trace, for
        # comparison, comes last: a million spans of its garbage would scatter the heap first)
        t = time.perf_counter()
        trace = load_quickly(path)
        quick_s = time.perf_counter() - t
        graph_s, runs, full_s, g, w, predicted = analyse(trace)
        del g, trace
        gc.collect()
        t = time.perf_counter()
        trace = load_trace(path)
        load_s = time.perf_counter() - t
    n_spans = len(trace.spans)
    n_models = sum(s.kind == "model" for s in trace.spans.values())
    retime_s = min(runs)
    n_records = 2 * n_spans + 2
    print(
        f"spans {n_spans:,}  records {n_records:,}  file {size / 1e6:.0f} MB "
        f"(written in {write_s:.2f} s)"
    )
    print(f"load           {load_s:6.2f} s   {n_records / load_s:,.0f} records/s  (load_trace)")
    print(
        f"load, GC off   {quick_s:6.2f} s   {n_records / quick_s:,.0f} records/s  "
        f"(load_quickly: the cyclic collector paused, as the commands do)"
    )
    print(f"build graph    {graph_s:6.2f} s   (flatten + attribute {n_models:,} model spans)")
    print(
        f"one re-timing  {retime_s:6.2f} s   (target < 2 s; best of 3, runs "
        f"{', '.join(f'{r:.2f}' for r in runs)} s)"
    )
    print(
        f"               predicted {predicted / 1e9:,.1f} s "
        f"of {w.measured_ns / 1e9:,.1f} s measured, speedup {w.measured_ns / predicted:.2f}x"
    )
    print(f"graph + re-timing {graph_s + retime_s:6.2f} s")
    print(
        f"full whatif    {full_s:6.2f} s   (re-timing, both critical paths and their "
        f"breakdowns, ceiling and {len(w.curve)}-point curve from one lockstep pass)"
    )


def analyse(trace: Trace) -> tuple[float, list[float], float, Graph, WhatIf, int]:
    """Time building the graph, three single re-timings and one full what-if."""
    ultra = Scenario.tier("sim-ultrafast", SpeedProfile(0.2, 100_000, 750))
    gc.collect()  # each timed phase starts without a collection owed by the one before
    t = time.perf_counter()
    g = build_graph(trace)
    graph_s = time.perf_counter() - t
    runs = []
    for _ in range(3):
        gc.collect()
        t = time.perf_counter()
        predicted = predict_ns(g, ultra)
        runs.append(time.perf_counter() - t)
    gc.collect()
    t = time.perf_counter()
    w = whatif(g, ultra)
    full_s = time.perf_counter() - t
    assert w.predicted_ns == predicted
    assert predict_ns(g, Scenario.multipliers(1)) == g.measured_ns
    return graph_s, runs, full_s, g, w, predicted


if __name__ == "__main__":
    main()
