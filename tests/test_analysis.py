"""Attribution, critical path, report and what-if re-timing on hand-built traces."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from agentloop.analysis.graph import Graph, build_graph, critical_path, retime, retime_pair
from agentloop.analysis.report import build_report, report_json
from agentloop.analysis.report_text import render_report
from agentloop.analysis.synthetic import TraceBuilder, agent_lines, model_attrs
from agentloop.analysis.synthetic_runs import StepSpec, sequential_run
from agentloop.analysis.whatif import (
    Scenario,
    durations,
    new_parts,
    predict_ns,
    whatif,
    whatif_json,
)
from agentloop.analysis.whatif_text import render_whatif
from agentloop.config.tiers import SpeedProfile
from agentloop.trace.reader import parse_lines

S = 1_000_000_000
MS = 1_000_000
ULTRA = SpeedProfile(0.2, 100_000, 750)


def two_steps():
    """Step 1: base 0.3 s, 1 s decode, tool read 0.5 s; step 2: base 0.3 s, 0.5 s decode."""
    return build_graph(
        sequential_run(
            [
                StepSpec(300 * MS, visible=61, tools=(("read", 500 * MS),)),
                StepSpec(300 * MS, visible=31),
            ]
        ).trace()
    )


def model_beside_tool() -> Graph:
    """One step where a 3 s model call (1 s base, 121 visible tokens) runs beside a 2 s tool."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    st = b.start("step", "step 1", 0, run, step=1)
    m = b.start("model", "chat demo", 0, st)
    tl = b.start("tool", "execute_tool t", 0, st)
    b.end(tl, 2 * S, **{"gen_ai.tool.name": "t"})
    b.end(m, 3 * S, **model_attrs(0, 1 * S, 0, 121, 60.0))
    b.end(st, 3 * S)
    b.end(run, 3 * S)
    b.finish(3 * S)
    return build_graph(b.trace())


def test_sequential_steps_categories_sum_to_end_to_end_time():
    """Critical-path categories of a sequential run are its known parts and add up to its time."""
    r = build_report(two_steps())
    assert r.measured_ns == 2_613 * MS
    assert r.critical["base"] == 600 * MS
    assert r.critical["decode"] == 1500 * MS
    assert 0 == r.critical["reasoning"]
    assert r.critical["tool:read"] == 500 * MS
    assert r.critical["overhead"] == 4 * MS  # request build + after t_end, per model call
    assert r.critical["framework"] == 9 * MS  # the nine 1 ms gaps
    assert sum(r.critical.values()) == r.measured_ns
    assert r.model_share == pytest.approx(2104 / 2613)


def test_sequential_steps_table_is_cumulative():
    """The step table gives each step's duration, split and tools, and run time at its end."""
    r = build_report(two_steps())
    assert ["1", "2"] == [s.step for s in r.steps]
    assert [s.cumulative_ns for s in r.steps] == [1806 * MS, 2611 * MS]
    assert r.steps[0].duration_ns == 1805 * MS
    assert r.steps[0].tools == (("read", 500 * MS),)
    assert r.steps[0].model["decode"] == 1000 * MS
    assert 31 == r.steps[1].output_tokens
    text = render_report(r)
    assert "agent time 2.613 s" in text
    assert "read 0.50" in text


def test_speedup_on_sequential_steps_shrinks_only_model_output():
    """Output speed x2 halves reasoning + decode and keeps tools, base and every gap."""
    w = whatif(two_steps(), Scenario.multipliers(2))
    assert w.measured_ns == 2613 * MS
    assert w.predicted_ns == 2613 * MS - 750 * MS
    cats = {c.name: c for c in w.categories}
    assert cats["decode"].saved_ns == 750 * MS
    assert 0 == cats["tool:read"].saved_ns
    assert 0 == cats["framework"].saved_ns
    assert w.ceiling_ns == 2613 * MS - 1500 * MS


def test_tier_profile_prediction_uses_base_and_token_counts():
    """On a tier profile a model call takes base + input/prefill + (R + V - 1)/output_tps."""
    w = whatif(two_steps(), Scenario.tier("ultra", ULTRA))
    base_b = 200 * MS + 10 * MS  # 0.2 s + 1000 tokens / 100000 tok/s
    expected = 2613 * MS - 2100 * MS + 2 * base_b + round(60 / 750 * S) + round(30 / 750 * S)
    assert w.predicted_ns == expected
    assert w.speedup == pytest.approx(2613 * MS / expected)


def test_parallel_tools_longest_branch_counts_once():
    """Of parallel tool calls only the longest is on the critical path and none is counted twice."""
    g = build_graph(
        sequential_run(
            [
                StepSpec(300 * MS, visible=61, tools=(("a", 1 * S), ("b", 3 * S), ("c", 2 * S))),
                StepSpec(300 * MS, visible=2),
            ]
        ).trace()
    )
    r = build_report(g)
    assert r.critical["tool:b"] == 3 * S
    assert "tool:a" not in r.critical and "tool:c" not in r.critical
    assert r.busy["tool:a"] + r.busy["tool:b"] + r.busy["tool:c"] == 6 * S
    assert sum(r.critical.values()) == r.measured_ns
    tools_on_path = [n for _, k, n, _ in r.path if k == "tool"]
    assert ["execute_tool b"] == tools_on_path
    w = whatif(g, Scenario.multipliers(4))
    saved = (1000 * MS + round(S / 60)) - (250 * MS + round(S / 60 / 4))
    assert w.measured_ns - w.predicted_ns == saved


def test_critical_path_moves_to_the_branch_that_becomes_longest():
    """When re-timing changes which branch ends last, the path follows it and still sums up."""
    g = model_beside_tool()
    w = whatif(g, Scenario.multipliers(4))
    assert w.predicted_ns == 2 * S  # the tool is now the longer branch
    cats = {c.name: c for c in w.categories}
    assert 0 == cats["tool:t"].measured_ns and cats["tool:t"].predicted_ns == 2 * S
    assert sum(c.saved_ns for c in w.categories) == w.measured_ns - w.predicted_ns


def test_reasoning_is_split_from_base_never_booked_as_prefill():
    """Hidden reasoning R/output_tps is taken out of time-to-first-visible-token, the rest is base."""
    g = build_graph(sequential_run([StepSpec(300 * MS, reasoning=120, visible=61)]).trace())
    (m,) = g.models.values()
    assert (m.base, m.reasoning, m.decode) == (300 * MS, 2 * S, 1 * S)
    assert m.output_tps == pytest.approx(60.0)
    w = whatif(g, Scenario.tier("ultra", ULTRA))
    cats = {c.name: c for c in w.categories}
    assert cats["reasoning"].predicted_ns == round(120 / 750 * S)
    assert cats["base"].predicted_ns == 210 * MS


def test_single_visible_token_uses_the_header_output_speed():
    """With fewer than two visible tokens the tier profile's output_tps splits reasoning from base."""
    g = build_graph(sequential_run([StepSpec(300 * MS, reasoning=60, visible=1)]).trace())
    (m,) = g.models.values()
    assert (m.base, m.reasoning, m.decode) == (300 * MS, 1 * S, 0)


def test_retries_book_wait_and_failed_service_time():
    """Failed attempts' service time is retry, back-off is wait, and speedup leaves both alone."""
    g = build_graph(
        sequential_run([StepSpec(300 * MS, visible=61, attempts=((500 * MS, 1 * S),))]).trace()
    )
    (m,) = g.models.values()
    assert (m.retry, m.wait) == (500 * MS, 1 * S)
    assert m.overhead == 2 * MS
    w = whatif(g, Scenario.multipliers(2))
    cats = {c.name: c for c in w.categories}
    assert cats["wait"].predicted_ns == 1 * S
    assert cats["retry"].predicted_ns == 500 * MS
    assert w.measured_ns - w.predicted_ns == 500 * MS


def incomplete():
    """Step 1 finished; step 2's model call was in flight when the run was killed."""
    b = sequential_run([StepSpec(300 * MS, visible=61, tools=(("read", 500 * MS),))], finish=False)
    run = b.records[1]["id"]
    st = b.start("step", "step 2", 1807 * MS, run, ["s2"], step=2)
    b.start("model", "chat demo", 1808 * MS, st, ["s4"], step=2)
    b.records.append({"type": "span_end", "id": "zz", "t": 0})  # never written out
    lines = [*b.lines()[:-1], b'{"type": "span_end", "id": "s7", "t": 19']  # cut mid-write
    return parse_lines(lines, "killed.jsonl")


def test_incomplete_trace_is_reported_with_spans_in_flight():
    """A killed run's trace is analysed as far as it goes and says what was in flight."""
    tr = incomplete()
    r = build_report(build_graph(tr))
    assert not r.complete and "incomplete" == r.status
    assert 3 == len(r.in_flight)
    assert any("model 'chat demo'" in s for s in r.in_flight)
    assert r.measured_ns == 1808 * MS
    assert sum(r.critical.values()) == r.measured_ns
    text = render_report(r)
    assert "INCOMPLETE" in text and "in flight" in text
    w = whatif(build_graph(tr), Scenario.multipliers(2))
    assert w.predicted_ns == 1808 * MS - 500 * MS
    assert not w.complete and "INCOMPLETE" in render_whatif(w)


@pytest.mark.parametrize(
    "make",
    [
        two_steps,
        lambda: build_graph(incomplete()),
        lambda: build_graph(parse_lines(list(agent_lines(40)))),
    ],
)
def test_speedup_one_reproduces_the_recorded_run(make):
    """Re-timing with unchanged durations gives back every recorded instant and the total."""
    g = make()
    starts, ends, total = retime(g, g.durations())
    assert total == g.end_ns
    assert starts == g.t0 and ends == g.t1
    w = whatif(g, Scenario.multipliers(1))
    assert w.predicted_ns == w.measured_ns
    assert w.curve[0] == (1.0, w.measured_ns)


def test_recorded_gaps_survive_re_timing():
    """Step bookkeeping gaps are kept: every span's start gap after its dependency is unchanged."""
    g = two_steps()
    dur = g.durations()
    starts, ends, total = retime(g, [d // 3 for d in dur])
    for i in range(len(g)):
        anchor = max(
            [starts[g.parent[i]] if g.parent[i] >= 0 else 0] + [ends[a] for a in g.after[i]]
        )
        assert starts[i] - anchor == g.start_gap[i]
    segs = critical_path(g, starts, ends, total)
    assert sum(ns for _, ns, _ in segs) == total


def test_curve_rises_towards_the_ceiling():
    """The speedup curve grows with K and stays under the Amdahl ceiling."""
    g = build_graph(parse_lines(list(agent_lines(30))))
    w = whatif(g, Scenario.multipliers(11))
    speeds = [w.measured_ns / ns for _, ns in w.curve]
    assert speeds == sorted(speeds)
    assert speeds[-1] < w.ceiling
    assert abs(dict(w.curve)[11.0] - w.predicted_ns) < 1000  # per-span rounding only
    assert predict_ns(g, Scenario.multipliers(math.inf)) == w.ceiling_ns


@pytest.mark.parametrize("moving", [False, True])
def test_curve_matches_one_pass_per_point(moving):
    """The one-pass curve (affine in 1/K) and the per-point fallback agree with direct re-timing."""
    if moving:  # the critical path moves from the model call to the tool as K grows
        g = model_beside_tool()
        fast, slow = (durations(g, new_parts(g, Scenario.multipliers(k))) for k in (math.inf, 1))
        assert retime_pair(g, fast, slow) is None  # so the curve takes the per-point way
    else:
        g = build_graph(parse_lines(list(agent_lines(25))))
    w = whatif(g, Scenario.multipliers(2))
    for k, ns in w.curve:
        assert abs(ns - predict_ns(g, Scenario.multipliers(k))) < 1000
    assert w.ceiling_ns == predict_ns(g, Scenario.multipliers(math.inf))


def test_prefill_speedup_divides_base():
    """--prefill-speedup P divides the measured base time by P."""
    w = whatif(two_steps(), Scenario.multipliers(1, 3))
    assert w.measured_ns - w.predicted_ns == 400 * MS


def test_json_outputs_have_the_documented_keys():
    """what-if and report JSON carry the keys scripts rely on."""
    w = whatif_json(whatif(two_steps(), Scenario.multipliers(2)))
    assert {
        "measured_s",
        "predicted_s",
        "speedup",
        "ceiling",
        "categories",
        "steps",
        "curve",
    } <= set(w)
    assert w["measured_s"] == pytest.approx(2.613)
    assert w["predicted_s"] == pytest.approx(1.863)
    assert ["run", "1", "2"] == [s["step"] for s in w["steps"]]
    r = report_json(build_report(two_steps()))
    assert {
        "measured_s",
        "categories",
        "steps",
        "critical_path",
        "model_share",
        "complete",
        "in_flight",
    } <= set(r)
    assert r["steps"][1]["cumulative_s"] == pytest.approx(2.611)


def test_time_before_the_run_span_is_not_run_time():
    """Set-up before the run span opens (simulator start) is left out of measured and predicted."""
    b = sequential_run(
        [
            StepSpec(300 * MS, visible=61, tools=(("read", 500 * MS),)),
            StepSpec(300 * MS, visible=31),
        ]
    )
    late = 700 * MS
    for rec in b.records[1:]:
        rec["t"] += late
        timing = rec.get("attrs", {}).get("timing")
        if timing:
            for k in ("t_send", "t_hdr", "t_first", "t_first_visible", "t_last", "t_end"):
                timing[k] += late
            for a in rec["attrs"]["attempts"]:
                a["t_start"] += late
                a["t_end"] += late
    g = build_graph(b.trace())
    assert g.measured_ns == 2613 * MS
    r = build_report(g)
    assert r.measured_ns == 2613 * MS and sum(r.critical.values()) == 2613 * MS
    assert [s.cumulative_ns for s in r.steps] == [1806 * MS, 2611 * MS]
    w = whatif(g, Scenario.multipliers(2))
    assert (w.measured_ns, w.predicted_ns) == (2613 * MS, 1863 * MS)
    assert w.curve[0] == (1.0, 2613 * MS)


def test_model_call_that_failed_for_good_is_retry_time():
    """A model span that ended in error without a successful attempt is booked as retry time."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    st = b.start("step", "step 1", 0, run, step=1)
    m = b.start("model", "chat demo", 0, st, step=1)
    b.end(m, 2 * S, status="error", error="ModelRetryError: retries outlasted")
    b.end(st, 2 * S, status="error")
    b.end(run, 2 * S, status="error")
    b.finish(2 * S, status="error")
    g = build_graph(b.trace())
    r = build_report(g)
    assert r.critical["retry"] == 2 * S and "error" == r.status
    w = whatif(g, Scenario.tier("ultra", ULTRA))
    assert w.predicted_ns == w.measured_ns == 2 * S


def test_empty_run_has_unit_speedup():
    """A trace with only its header loads, reports zero time and a speedup of 1."""
    g = build_graph(TraceBuilder().trace())
    w = whatif(g, Scenario.multipliers(5))
    assert (0, 0, 1.0) == (w.measured_ns, w.predicted_ns, w.speedup)
    assert "agent time 0.000 s" in render_report(build_report(g))


def test_long_runs_print_first_and_last_steps_only():
    """Text tables of a 100-step run show its first and last steps and say how many are left out."""
    g = build_graph(parse_lines(list(agent_lines(100))))
    text = render_report(build_report(g))
    assert "... 60 more rows (--json lists all)" in text
    assert "\n     1 " in text and "\n   100 " in text and "\n    50 " not in text
    assert 100 == len(report_json(build_report(g))["steps"])
    assert "more rows" in render_whatif(whatif(g, Scenario.multipliers(3)))


def test_the_package_names_stay_the_functions_after_their_submodules_are_imported() -> None:
    """``from agentloop.analysis import whatif`` is the function even when the submodule of the
    same name was imported first (a fresh interpreter, so the import order is this test's)."""
    code = (
        "import agentloop.analysis.whatif, agentloop.analysis.compare\n"
        "from agentloop.analysis import compare, whatif\n"
        "from agentloop.analysis.whatif import whatif_json\n"
        "print(whatif.__module__, compare.__module__, callable(whatif_json))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["agentloop.analysis.whatif", "agentloop.analysis.compare", "True"]
