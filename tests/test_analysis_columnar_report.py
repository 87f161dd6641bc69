"""``report`` on a trace's columns says what it says on the loops, to the byte (issue 27)."""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pytest

from agentloop.analysis import cost, jsontext, store, vreport
from agentloop.analysis.agents import render_usage
from agentloop.analysis.columnar import columns_of
from agentloop.analysis.graph import build_graph
from agentloop.analysis.report import build_report, report_document
from agentloop.analysis.synthetic import TraceBuilder, model_attrs, tier_record
from agentloop.analysis.synthetic_runs import fanout_run
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace
from agentloop.trace.schema import event_record
from tests.test_columnar import MS, SHAPES, S, late_and_unsplit

PRICED = [
    tier_record("a", output_tps=50, prices=(1.25, 0.125, 10.0)),
    tier_record("b", output_tps=500, prices=(0.3, 0.03, 2.5)),
]


def outside_and_trims(trim_events: bool = True, check: bool = True) -> Trace:
    """A set-up before the run span and a success check after it (issue 24), two trims (as
    events, or as an older trace's model span attribute), a tool in flight, and a tool whose
    name JSON must escape."""
    b = TraceBuilder()
    setup = b.start("setup", "setup", 0)
    b.end(setup, 2 * S)
    run = b.start("run", "invoke_agent demo", 2 * S)
    prev: list[str] = []
    for k in range(3):
        t = 2 * S + k * S
        st = b.start("step", f"step {k + 1}", t, run, prev, step=k + 1)
        m = b.start("model", "chat demo", t + MS, st, step=k + 1)
        attrs = model_attrs(t + MS, 100 * MS, 30, 40 + k, 60.0, step=k + 1)
        trims = [{"index": 3 + k, "call_id": f"c{k}", "tool": 'gr"ep', "tokens": 100 * k + 7}]
        if trim_events:
            b.records.append(event_record(m, t + 2 * MS, A.EVENT_CONTEXT_TRIM, trims[0]))
        else:
            attrs[A.CONTEXT_TRIMMED] = trims
        b.end(m, t + 700 * MS, **attrs)
        tl = b.start("tool", 'execute_tool gr"ep é', t + 701 * MS, st, [m], step=k + 1)
        if k < 2:
            b.end(tl, t + 900 * MS, **{"gen_ai.tool.name": 'gr"ep é'})
            b.end(st, t + 950 * MS)
        prev = [st]
    if check:  # a killed run's trace stops in flight, its check never run
        b.end(run, 5 * S)
        chk = b.start("check", "check", 5 * S)
        b.end(chk, 6 * S)
    return b.trace()


def stopped_in_setup() -> Trace:
    b = TraceBuilder()
    b.start("setup", "setup", 0)
    return b.trace()


EXTRA: dict[str, Callable[[], Trace]] = {
    "outside and trims": outside_and_trims,
    "old trims, in flight": lambda: outside_and_trims(trim_events=False, check=False),
    "stopped in set-up": stopped_in_setup,
    "sub-agents, priced tiers": lambda: fanout_run(
        [3, 1, 2], rounds=2, tiers=PRICED, sub_tier="b"
    ).trace(),
    "priced, one tier": lambda: fanout_run([], tiers=PRICED[:1]).trace(),
}
ALL = {**SHAPES, **EXTRA}


def test_the_extra_shapes_say_what_they_are_meant_to():
    """Trims, the set-up and check, a set-up left open, in-flight spans and several priced
    tiers are there (else the parity over them proves little)."""
    r = build_report(build_graph(outside_and_trims()))
    assert (len(r.trims), r.setup_ns, r.check_ns, r.wall_ns) == (3, 2 * S, S, 6 * S)
    old = build_report(build_graph(outside_and_trims(trim_events=False, check=False)))
    assert len(old.trims) == 3 and old.in_flight and old.check_ns is None
    assert build_report(build_graph(stopped_in_setup())).outside_open == ("setup",)
    spent = cost.of_trace(fanout_run([3, 1], tiers=PRICED, sub_tier="b").trace())
    assert spent.priced and len(spent.by_step) > 4


@pytest.mark.parametrize("name", list(ALL))
def test_the_report_on_columns_equals_the_loops(name):
    """Through the cache's table and back: every field of the Report, the cost, the JSON
    document (its keys' order too) and the per-tier table are the loops'."""
    trace = ALL[name]()
    g = build_graph(trace)
    c = store.from_table(store.to_table(columns_of(g), {}))
    r = vreport.report_of(c)
    assert build_report(g) == r.report
    assert cost.of_trace(trace) == r.spent
    loops = report_document(trace)
    assert list(loops) == list(r.document())
    assert loops == r.document()
    assert render_usage(g) == r.usage_text()


@pytest.mark.parametrize("name", list(ALL))
def test_the_json_text_is_what_orjson_writes(name, monkeypatch):
    """The steps and path written a column at a time are the bytes orjson writes of the
    rows, in the document as ``report --json`` prints it, in one chunk of rows or many."""
    trace = ALL[name]()
    r = vreport.report_of(columns_of(build_graph(trace)))
    want = orjson.dumps(report_document(trace), option=orjson.OPT_INDENT_2)
    assert want == b"".join(r.document_text(orjson.OPT_INDENT_2))
    monkeypatch.setattr(jsontext, "CHUNK", 3)
    assert want == b"".join(r.document_text(orjson.OPT_INDENT_2))


def test_the_report_command_says_the_same_from_the_columns(tmp_path: Path, capsys):
    """``report`` and ``report --json`` print the same bytes on the loops (no cache) and on
    the columns (a cache beside the trace): headline, unsplit note, per-tier table, cost."""
    from agentloop.cli import main

    b = fanout_run([2, 1], tiers=PRICED, sub_tier="b")
    paths = [b.write(tmp_path / "fan.jsonl"), late_and_unsplit().write(tmp_path / "late.jsonl")]
    for p in paths:
        out = []
        for cached in (False, True):
            if cached:
                store.load_columns(p)
            for args in (["--json"], []):
                assert main(["report", str(p), *args]) == 0
                out.append(capsys.readouterr().out)
        assert store.read_cache(p) is not None
        assert out[:2] == out[2:]
    assert "Per agent:" in out[1] or "could not be split" in out[1]


def test_sums_in_call_order_are_the_loops_floats_to_the_bit():
    """Grouped sums (short groups rank by rank, long ones by cumsum) and a call's four cost
    parts added are the floats a Python loop adds, on awkward random values."""
    rng = random.Random(5)
    vals = [rng.choice((1e-9, 0.1, 1e6, 3.3e-5)) * rng.random() for _ in range(3000)]
    groups = [rng.choice((0, 1, 2, 2, 3)) if k % 7 else rng.randrange(400) for k in range(3000)]
    loop: dict[int, float] = {}
    for v, g in zip(vals, groups, strict=True):
        loop[g] = loop.get(g, 0.0) + v
    got = cost.in_order_sums(np.array(vals), np.array(groups), 400)
    assert {g: got[g] for g in loop} == loop
    parts = [
        np.array([rng.random() * 10.0 ** rng.randint(-9, 3) for _ in range(500)]) for _ in "abcd"
    ]
    want = [sum(row) for row in zip(*(p.tolist() for p in parts), strict=True)]
    assert cost._call_sums(parts).tolist() == want, sys.version_info


def test_json_text_of_strings_and_numbers_is_orjsons():
    """Strings (quotes, backslashes, controls, any script, None) and numbers are written as
    orjson writes each one."""
    rng = random.Random(2)
    alphabet = 'ab"\\\n\t\x01\x1f\x7fé中\u2028 /'
    words = ["".join(rng.choices(alphabet, k=rng.randint(0, 6))) for _ in range(300)]
    texts: list[str | None] = [*words, None, "plain"]
    assert jsontext.strings(texts).to_pylist() == [orjson.dumps(t).decode() for t in texts]
    plain = jsontext.strings(["a b", "é"])
    assert isinstance(plain, jsontext.Quoted)
    ns = np.array([0, 1, 7, 10**15, 123_456_789, 2**53 - 1, 5 * 10**8], np.int64)
    for arr in (ns, ns / 1e9, np.array([0.1, 1e-7, 1e22, 2.0, 1e16]), ns[:0]):
        assert jsontext.numbers(arr).to_pylist() == [orjson.dumps(x).decode() for x in arr.tolist()]


def test_a_cache_with_a_call_code_out_of_range_is_refused(tmp_path: Path):
    """A call row naming a tier the cache's names do not have, or more usage marks than
    usage rows, makes the cache's table refused (stale: rebuilt)."""
    c = columns_of(build_graph(fanout_run([2], tiers=PRICED, sub_tier="b").trace()))
    assert store.from_table(store.to_table(c, {})).calls.tolist() == c.calls.tolist()
    for col, value in ((0, len(c.call_names["tier"])), (4, 2)):
        bad = c.calls.copy()
        bad[0, col] = value
        with pytest.raises(ValueError, match="calls"):
            store.from_table(store.to_table(dataclasses.replace(c, calls=bad), {}))


def test_raw_text_goes_where_orjson_would_write_it_even_if_a_value_mimics_the_marker():
    """A document's Raw values come out in their places, as the same document with the text
    parsed would print; a value that holds a marker's text falls back to one joined copy."""
    fields = [("n", jsontext.numbers(np.array([1, 2]))), ("s", jsontext.strings(["x", "y"]))]
    rows = [{"n": 1, "s": "x"}, {"n": 2, "s": "y"}]
    opt = orjson.OPT_INDENT_2
    for odd in ("plain", "\ue000jsontext 0\ue000"):
        doc = {"a": odd, "rows": jsontext.listing(fields, 2, 2, chunk=1), "z": [odd]}
        want = orjson.dumps({"a": odd, "rows": rows, "z": [odd]}, option=opt)
        parts = list(jsontext.dump(doc, opt))
        assert want == b"".join(parts)
        assert len(parts) == (1 if odd != "plain" else 6)  # the fallback: one joined copy


@pytest.mark.parametrize("name", list(ALL))
def test_the_headline_retiming_is_the_whatifs(name):
    """The headline's lean re-timing gives the full what-if's predicted time, ceiling and
    ratios for every scenario (the ceiling from the lockstep pair or from its own pass)."""
    from agentloop.analysis import vector, vwhatif
    from tests.test_columnar import SCENARIOS

    vg = vector.build(columns_of(build_graph(ALL[name]())))
    for sc in SCENARIOS:
        full, lean = vwhatif.whatif(vg, sc, curve=()), vwhatif.headline(vg, sc)
        assert (full.predicted_ns, full.ceiling_ns, full.speedup, full.ceiling) == (
            lean.predicted_ns,
            lean.ceiling_ns,
            lean.speedup,
            lean.ceiling,
        )


def long_run() -> Trace:
    """More steps than the text's step table shows (40) and more path segments than it lists
    (60), so the views' slices and the path's count are what the text prints."""
    from agentloop.analysis.synthetic import agent_lines
    from agentloop.trace.reader import parse_lines

    return parse_lines(list(agent_lines(90, tools_per_step=2)))


@pytest.mark.parametrize("name", [*ALL, "long run"])
def test_the_text_report_from_views_is_the_rows_text(name):
    """``report`` (text) on columns renders views that make only the rows it prints: the
    same text as from every row made."""
    from agentloop.analysis.report_text import render_report

    trace = long_run() if name == "long run" else ALL[name]()
    r = vreport.report_of(columns_of(build_graph(trace)))
    assert render_report(r.report) == render_report(r.text_report)
    if name == "long run":
        assert len(r.report.steps) > 40 and len(r.report.path) > 60


def test_the_step_and_path_views_index_as_tuples_do():
    """Ints (negative too), slices (empty, stepped, out of range) and the end: as the tuples."""
    r = vreport.report_of(columns_of(build_graph(long_run())))
    for full, view in ((r.report.steps, r.text_report.steps), (r.report.path, r.text_report.path)):
        assert len(full) == len(view)
        for i in (0, 1, -1, -2, len(full) - 1):
            assert full[i] == view[i]
        for s in (slice(0, 3), slice(-3, None), slice(5, 2), slice(0, None, 7), slice(-999, 2)):
            assert tuple(full[s]) == tuple(view[s])
        with pytest.raises(IndexError):
            view[len(full)]
