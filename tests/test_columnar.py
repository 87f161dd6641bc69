"""The columnar path (cache, arrays, vectorised passes) gives today's results, field by field."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from agentloop.analysis import cands, runend, store, vector, vwhatif
from agentloop.analysis.breakdown import path_tally
from agentloop.analysis.columnar import Columns, columns_of
from agentloop.analysis.flat import Graph, interleave
from agentloop.analysis.graph import build_graph
from agentloop.analysis.lateness import of_trace
from agentloop.analysis.report import unsplit_calls, unsplit_fields, unsplit_json
from agentloop.analysis.synthetic import TraceBuilder, agent_lines, model_attrs, tier_record
from agentloop.analysis.synthetic_runs import StepSpec, fanout_run, sequential_run
from agentloop.analysis.whatif import Scenario, whatif
from agentloop.config.tiers import SpeedProfile
from agentloop.trace.reader import Trace, load_trace, parse_lines

S = 1_000_000_000
MS = 1_000_000
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = sorted((ROOT / "traces" / "reference").glob("*.jsonl"))


def side_by_side(after_order: tuple[str, ...], tool_s: int = 2) -> Trace:
    """A model call and a tool side by side, then a tool after both (in ``after_order``)."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    st = b.start("step", "step 1", 0, run, step=1)
    m = b.start("model", "chat demo", 0, st)
    tl = b.start("tool", "execute_tool t", 0, st)
    b.end(tl, tool_s * S, **{"gen_ai.tool.name": "t"})
    b.end(m, 3 * S, **model_attrs(0, 1 * S, 0, 121, 60.0))
    ids = {"m": m, "t": tl}
    x = b.start("tool", "execute_tool x", 3 * S, st, [ids[k] for k in after_order])
    b.end(x, 4 * S, **{"gen_ai.tool.name": "x"})
    b.end(st, 4 * S)
    b.end(run, 4 * S)
    b.finish(4 * S)
    return b.trace()


def killed() -> Trace:
    """Step 1 finished; step 2's model call was in flight when the run was killed."""
    b = sequential_run([StepSpec(300 * MS, visible=61, tools=(("read", 500 * MS),))], finish=False)
    run = b.records[1]["id"]
    st = b.start("step", "step 2", 1807 * MS, run, ["s2"], step=2)
    b.start("model", "chat demo", 1808 * MS, st, ["s4"], step=2)
    return b.trace()


def failed_for_good() -> Trace:
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    st = b.start("step", "step 1", 0, run, step=1)
    m = b.start("model", "chat demo", 0, st, step=1)
    b.end(m, 2 * S, status="error", error="ModelRetryError: retries outlasted")
    b.end(st, 2 * S, status="error")
    b.end(run, 2 * S, status="error")
    b.finish(2 * S, status="error")
    return b.trace()


def odd_edges() -> Trace:
    """An ``after`` naming an unknown span and one naming a later span, a childless step."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    st = b.start("step", "step 1", 1 * MS, run, step=1)
    m = b.start("model", "chat demo", 2 * MS, st, ["nope"], step=1)
    t1 = b.start("tool", "execute_tool a", 3 * MS, st, [m, "s9"], step=1)
    b.end(m, 900 * MS, **model_attrs(5 * MS, 100 * MS, 40, 50, 60.0))
    b.end(t1, 950 * MS, **{"gen_ai.tool.name": "a"})
    b.end(st, 960 * MS)
    empty = b.start("step", "warm-up", 970 * MS, run, [st])
    b.end(empty, 980 * MS)
    b.end(run, 990 * MS)
    b.finish(995 * MS)
    return b.trace()


def late_and_unsplit() -> TraceBuilder:
    """Two model calls measured under load (issue 28's lateness attributes), one not, and an
    imported call whose phases nothing split (issue 25)."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    prev: list[str] = []
    for k, (err, late) in enumerate(((0.031, True), (0.002, False), (0.25, True), (None, False))):
        st = b.start("step", f"step {k + 1}", k * S, run, prev, step=k + 1)
        m = b.start("model", "chat demo", k * S + MS, st, step=k + 1)
        attrs = model_attrs(k * S + MS, 100 * MS, 0, 30, 60.0, step=k + 1)
        if err is not None:
            attrs |= {"timing_error_s": err, "timing_under_load": late, "loop_lag_max_s": err / 2}
        else:
            attrs["unknown"] = ["timing.t_first_visible"]
        b.end(m, k * S + 800 * MS, **attrs)
        b.end(st, k * S + 900 * MS)
        prev = [st]
    b.end(run, 4 * S)
    b.finish(4 * S)
    return b


def tangled(seed: int, steps: int = 0) -> Trace:
    """A random run on a coarse clock (ties everywhere): steps after none, one or several
    earlier spans, model calls and tools side by side, each after any of the last 30 spans
    that ended by its start, in this step or another (``steps``: how many; 0: 2 to 8)."""
    rng = random.Random(seed)
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    ended: list[tuple[str, int]] = []
    t = 0

    def some(before: int) -> list[str]:
        done = [i for i, e in ended[-30:] if e <= before]
        return rng.sample(done, min(len(done), rng.choice((0, 1, 1, 2, 3))))

    for k in range(1, (steps or rng.randint(2, 8)) + 1):
        st = b.start("step", f"step {k}", t, run, some(t), step=k)
        kids = []
        for _ in range(rng.randint(0, 4)):
            t0 = t + rng.randint(0, 3) * 100 * MS
            if rng.random() < 0.5:
                base, vis = rng.randint(1, 3) * 100 * MS, rng.randint(1, 4) * 60
                attrs = model_attrs(t0, base, rng.choice((0, 60)), vis, 60.0, step=k)
                t1 = attrs["timing"]["t_end"]
                sid = b.start("model", "chat demo", t0, st, some(t0), step=k)
            else:
                name = rng.choice("abc")
                t1, attrs = t0 + rng.randint(0, 4) * 100 * MS, {"gen_ai.tool.name": name}
                sid = b.start("tool", f"execute_tool {name}", t0, st, some(t0), step=k)
            kids.append((t1, sid, attrs))
        for t1, sid, attrs in sorted(kids):
            b.end(sid, t1, **attrs)
            ended.append((sid, t1))
        t = max([t, *(t1 for t1, _, _ in kids)]) + rng.randint(0, 2) * 100 * MS
        b.end(st, t)
        ended.append((st, t))
    b.end(run, t)
    b.finish(t + MS)
    return b.trace()


SHAPES: dict[str, Callable[[], Trace]] = {
    "agent": lambda: parse_lines(list(agent_lines(40))),
    "agent, 5 tools": lambda: parse_lines(list(agent_lines(25, tools_per_step=5))),
    "parallel": lambda: sequential_run(
        [
            StepSpec(300 * MS, visible=61, tools=(("a", 1 * S), ("b", 3 * S), ("c", 3 * S))),
            StepSpec(300 * MS, visible=2, reasoning=30, tools=(("a", 1 * S),)),
            StepSpec(200 * MS, visible=1, tools=(("b", 10 * MS),)),
        ]
    ).trace(),
    "retries": lambda: sequential_run(
        [StepSpec(300 * MS, visible=61, attempts=((500 * MS, 1 * S),), tail_ns=3 * MS)]
    ).trace(),
    "changes hands": lambda: side_by_side(("m", "t")),
    "tie": lambda: side_by_side(("t", "m"), tool_s=3),
    "sub-agents": lambda: fanout_run([4, 1, 2, 1, 1], rounds=2).trace(),
    "sub-agents, tiers": lambda: fanout_run(
        [3, 1],
        tiers=[tier_record("a", output_tps=50), tier_record("b", output_tps=500)],
        sub_tier="b",
    ).trace(),
    "killed": killed,
    "failed for good": failed_for_good,
    "odd edges": odd_edges,
    "empty": lambda: TraceBuilder().trace(),
    "late and unsplit": lambda: late_and_unsplit().trace(),
    **{f"tangled {k}": (lambda k=k: tangled(k)) for k in range(12)},
    **{f"reference {p.stem}": (lambda p=p: load_trace(p)) for p in REFERENCE},
}
SCENARIOS = [
    Scenario.tier("ultra", SpeedProfile(0.2, 100_000, 750)),
    Scenario.tier("slow", SpeedProfile(1.5, 2_000, 20)),
    Scenario.multipliers(4),
    Scenario.multipliers(3, 2),
    Scenario.multipliers(1),
    Scenario.multipliers(math.inf),
]


def test_the_reference_traces_are_in_the_parity_set():
    """The shapes include every reference trace (a glob that found none would test nothing)."""
    assert len(REFERENCE) >= 2


@pytest.mark.parametrize("name", list(SHAPES))
def test_vectorised_whatif_equals_the_loops(name):
    """Every field of every scenario's WhatIf is the same from the arrays as from the loops."""
    g = build_graph(SHAPES[name]())
    vg = vector.build(columns_of(g))
    for sc in SCENARIOS:
        assert whatif(g, sc) == vwhatif.whatif(vg, sc), sc.label


@pytest.mark.slow  # 36,000 spans through the loops' what-if three times: ~6 s
def test_a_long_tangled_run_on_the_arrays_equals_the_loops():
    """A run long enough for the forward pass's hops, peels and runs (not the plain doubling of
    small traces), whose winners change hands as the model calls shrink (the policy changes
    about eight times a pass): the same WhatIfs."""
    g = build_graph(tangled(7, steps=12_000))
    vg = vector.build(columns_of(g))
    assert 2 * len(vg) >= cands.DIRECT_BELOW
    for sc in (SCENARIOS[0], SCENARIOS[2], SCENARIOS[5]):
        assert whatif(g, sc) == vwhatif.whatif(vg, sc), sc.label


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_columns_carry_the_lateness_and_unsplit_calls_of_the_trace(name):
    """The widening line's lateness and the note's unsplit calls are the trace's, through the
    cache too: the two paths' documents agree to the last field."""
    trace = SHAPES[name]()
    c = columns_of(build_graph(trace))
    assert c.lateness == of_trace(trace)
    assert unsplit_fields(list(c.unsplit)) == unsplit_json(trace)
    back = store.from_table(store.to_table(c, {}))
    assert (back.lateness, back.unsplit) == (c.lateness, c.unsplit)


def test_the_lateness_shape_is_under_load_and_unsplit():
    """The shape above says what it is meant to (else the parity over it proves little)."""
    trace = late_and_unsplit().trace()
    late = of_trace(trace)
    assert (late.measured, late.under_load) == (3, 2) and late.sum_bound_s > 0.28
    assert [c["step"] for c in unsplit_calls(trace)] == [4]


def test_the_whatif_command_says_the_same_from_the_columns(tmp_path: Path, capsys):
    """``whatif --json`` and its text on the loops (no cache) and on the columns (a cache
    beside the trace) print the same, the lateness line and the unsplit note included."""
    from agentloop.cli import main

    p = late_and_unsplit().write(tmp_path / "run.jsonl")
    out = []
    for cached in (False, True):
        if cached:
            store.load_columns(p)
        for args in (["--speedup", "4", "--json"], ["--speedup", "4"]):
            assert main(["whatif", str(p), *args]) == 0
            out.append(capsys.readouterr().out)
    assert store.read_cache(p) is not None
    assert out[:2] == out[2:]
    assert "measured under load: 2 of 3" in out[1] and "could not be split" in out[1]


@pytest.mark.parametrize("name", list(SHAPES))
def test_vectorised_graph_equals_the_builder(name):
    """Gaps, recorded links, steps, queue times and the recorded path's tally are the Graph's."""
    g = build_graph(SHAPES[name]())
    vg = vector.build(columns_of(g))
    n = len(g)
    assert vg.start_gap.tolist() == g.start_gap
    assert vg.close_gap.tolist() == [g.close_gap.get(i, 0) for i in range(n)]
    assert vg.back_link[:-1].tolist() == g.back_link[:-1]
    assert vg.step_at.tolist() == g.step_at
    assert vg.queue.tolist() == g.queue
    assert (vg.start_ns, vg.end_ns, vg.run_end_gap) == (g.start_ns, g.end_ns, g.run_end_gap)
    assert vg.models.tolist() == sorted(g.models)
    V = interleave(g.t0, g.t1, g.start_ns)
    loops = path_tally(g, V, g.back_link, g.recorded_dur, g.end_ns, None)
    rec = vector.np.array(V, vector.np.int64)
    assert loops == vector.tally(vg, rec, vg.back_link, vg.recorded_dur, vg.end_ns, None)


@pytest.mark.parametrize("name", ["agent", "parallel", "changes hands", "killed"])
def test_vectorised_forward_pass_equals_retime(name):
    """Every instant of the array pass is the loop's, for a scenario that reorders branches."""
    from agentloop.analysis.passes import retime_flat
    from agentloop.analysis.whatif import durations, new_parts

    g = build_graph(SHAPES[name]())
    vg = vector.build(columns_of(g))
    for sc in SCENARIOS:
        dur = durations(g, new_parts(g, sc))
        V, end = retime_flat(g, dur)
        (VA,) = vector.solve(vg, [vector.np.array(dur, vector.np.int64)])
        assert (VA[:-1].tolist(), vector.run_end(vg, VA)) == (V[:-1], end)


@pytest.mark.parametrize("seed", range(8))
def test_sums_along_any_links_in_any_order_are_a_walks_sums(seed):
    """Weights summed along links (one-candidate hops, peeled layers, runs in the key's order)
    are what walking each chain down to the run's start adds up, whichever candidate each
    position links to and whatever order the key gives."""
    vg = vector.build(columns_of(build_graph(tangled(seed))))
    cd, sent = vg.cd, 2 * len(vg)
    rng = np.random.default_rng(seed)
    links = np.append(cd.first, sent)  # a random candidate of each position's
    pick = rng.random(len(cd.two)) < 0.5
    links[cd.two[pick]] = cd.two_b[pick]
    rank = rng.integers(0, np.diff(cd.wide_off)) if len(cd.wide) else 0
    links[cd.wide] = cd.wide_idx[cd.wide_off[:-1] + rank]
    w = rng.integers(-5, 50, (sent + 1, 2))
    walked = []
    for v in range(sent + 1):
        total = np.zeros(2, np.int64)
        while v != sent:
            total, v = total + w[v], links[v]
        walked.append(total.tolist())
    rec = np.append(np.stack([vg.c.t0, vg.c.t1], axis=1).reshape(-1), 0)
    for key in (rec, rng.permutation(sent + 1), np.zeros(sent + 1, np.int64)):
        assert cands.sum_links(cd, links, w, key, direct_below=0).tolist() == walked
    assert cands.sum_links(cd, links, w, rec).tolist() == walked  # small: doubling over all


def _same(a: Columns, b: Columns) -> None:
    for f in Columns.__dataclass_fields__:
        x, y = getattr(a, f), getattr(b, f)
        if hasattr(x, "tolist"):
            assert x.tolist() == y.tolist(), f
        else:
            assert x == y, f


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    p = tmp_path / "run.jsonl"
    p.write_bytes(b"".join(line + b"\n" for line in agent_lines(30)))
    return p


def test_cache_is_written_once_and_read_back_whole(trace_file: Path):
    """The first analysis writes the cache; the next one reads the same columns from it."""
    assert store.read_cache(trace_file) is None
    first = store.load_columns(trace_file)
    assert store.cache_path(trace_file).is_file()
    cached = store.read_cache(trace_file)
    assert cached is not None
    _same(first, cached)
    _same(columns_of(build_graph(load_trace(trace_file))), cached)


def test_a_trace_that_grew_makes_its_cache_stale(trace_file: Path):
    """Appending to the JSONL (a run still going) makes the cache stale; it is rebuilt."""
    store.load_columns(trace_file)
    lines = trace_file.read_bytes().splitlines()
    trace_file.write_bytes(b"\n".join(lines[:-1]) + b"\n")  # the end record not yet written
    assert store.read_cache(trace_file) is None
    c = store.load_columns(trace_file)
    assert not c.complete and store.read_cache(trace_file) is not None


def test_an_edit_that_keeps_size_and_mtime_is_still_caught(trace_file: Path):
    """Same size, same modification time, different bytes at the end: stale."""
    store.load_columns(trace_file)
    st = trace_file.stat()
    data = bytearray(trace_file.read_bytes())
    i = data.rindex(b'"ok"')
    data[i : i + 4] = b'"no"'
    trace_file.write_bytes(bytes(data))
    os.utime(trace_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.read_cache(trace_file) is None


@pytest.mark.parametrize("damage", ["truncated", "garbled", "emptied"])
def test_a_damaged_cache_is_rebuilt_not_trusted(trace_file: Path, damage: str):
    """A truncated, byte-flipped or empty cache file is refused, and the next load rebuilds it."""
    good = store.load_columns(trace_file)
    path = store.cache_path(trace_file)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbled":
        for i in range(len(data) // 4, len(data) // 2, 97):
            data[i] ^= 0x5A
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert store.read_cache(trace_file) is None
    _same(good, store.load_columns(trace_file))
    assert store.read_cache(trace_file) is not None


def test_a_cache_made_by_another_layout_is_stale(trace_file: Path):
    """A cache whose key names another layout version (or agentloop version) is not used."""
    c = store.load_columns(trace_file)
    key = store.source_key(trace_file)
    store.write_cache(trace_file, c, {**key, "layout": "0"})
    assert store.read_cache(trace_file) is None
    store.write_cache(trace_file, c, {**key, "agentloop": "0.0.0"})
    assert store.read_cache(trace_file) is None
    store.write_cache(trace_file, c, key)
    assert store.read_cache(trace_file) is not None


def test_a_cache_with_indices_out_of_range_is_refused(trace_file: Path):
    """A well-formed cache whose parent indices point forward is refused (indices checked)."""
    c = store.load_columns(trace_file)
    bad = Columns(
        **{**{f: getattr(c, f) for f in Columns.__dataclass_fields__}, "parent": c.parent.copy()}
    )
    bad.parent[1] = 5
    store.write_cache(trace_file, bad, store.source_key(trace_file))
    assert store.read_cache(trace_file) is None


def test_an_unwritable_folder_still_analyses(tmp_path: Path):
    """Where the cache cannot be written (its folder's name is taken by a file), the columns
    come from the JSONL each time."""
    p = tmp_path / "run.jsonl"
    p.write_bytes(b"".join(line + b"\n" for line in agent_lines(5)))
    (tmp_path / store.CACHE_DIR).write_text("not a folder")
    c = store.load_columns(p)
    assert len(c) == 1 + 5 * 5 and store.read_cache(p) is None


def test_the_cache_gives_the_same_whatif_as_the_jsonl(trace_file: Path):
    """A whatif from the cached columns equals the loops' from the JSONL."""
    store.load_columns(trace_file)
    cached = store.read_cache(trace_file)
    assert cached is not None
    g: Graph = build_graph(load_trace(trace_file))
    for sc in SCENARIOS:
        assert whatif(g, sc) == vwhatif.whatif(vector.build(cached), sc)


def test_the_run_end_hook_caches_big_traces_only(tmp_path: Path, trace_file: Path):
    """cache_trace writes the cache of a trace past COLUMNAR_BYTES, skips a small one, and
    says nothing for a file that is not a trace."""
    cache_trace = runend.cache_trace
    cache_trace(trace_file)
    assert store.read_cache(trace_file) is None  # 30 steps: analysed with the loops
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"".join(line + b"\n" for line in agent_lines(4000)))
    cache_trace(big)
    assert store.read_cache(big) is not None
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(b"not json\n" * (runend.COLUMNAR_BYTES // 9 + 1))
    cache_trace(junk)
    assert not store.cache_path(junk).exists()


def test_the_suite_whatif_on_columns_equals_the_loops(tmp_path: Path):
    """``whatif SUITE --tier`` from each run's columnar cache gives every figure the loops give
    (times, schedules, costs at both prices, skipped runs), and writes the caches it uses."""
    from agentloop.config.tiers import get_tier, load_tiers
    from agentloop.suite.records import RunRecord, Suite, write_suite
    from agentloop.suite.whatif import suite_whatif

    (tmp_path / "traces").mkdir()
    runs = []
    for k in range(6):
        name = f"traces/run-{k}.jsonl"
        lines = list(agent_lines(5 + 3 * k, task=f"task-{k % 2}"))
        if k == 5:
            lines = lines[:-1]  # no end record: left out, and said so
        (tmp_path / name).write_bytes(b"".join(ln + b"\n" for ln in lines))
        runs.append(
            RunRecord(
                f"task-{k % 2}",
                "t",
                1 + k // 2,
                "sim-standard",
                "ok",
                "",
                True,
                9.0,
                5,
                name,
                float(k),
                float(k) + 9.0,
            )
        )
    runs.append(RunRecord("task-0", "t", 9, "sim-standard", "error", "", None, 0, 0, None, 0, 1))
    write_suite(tmp_path, Suite("sim-standard", 2, 3, 20.0, runs))
    tier = get_tier(load_tiers(None), "sim-ultrafast", "--tier")
    loops = suite_whatif(tmp_path, tier, 2, columns=False)
    assert not list(tmp_path.glob("traces/.agentloop-cache/*"))
    assert suite_whatif(tmp_path, tier, 2) == loops
    assert len(list(tmp_path.glob("traces/.agentloop-cache/*"))) == 6
    assert suite_whatif(tmp_path, tier, 2) == loops  # from the caches
    assert loops.cost_b_usd and len(loops.notes) == 2 and loops.run_time_b_s < loops.run_time_a_s


@pytest.mark.parametrize(
    "prof",
    [
        SpeedProfile(0.2, 100_000, 750),
        SpeedProfile(0.35, 2_500.5, 61.3, cached_prefill_tps=40_000, tpot_ms_per_1k=8.2),
        SpeedProfile(0.108, 202, 103.6, tpot_ms_per_1k=8.2, prefill_ms_per_1k=1.81),
        SpeedProfile(0.0, 0, 20),
    ],
)
def test_the_speed_model_on_arrays_is_the_speed_model_to_the_bit(prof: SpeedProfile):
    """vwhatif.speed_parts gives SpeedProfile.parts' floats exactly, edge cases included
    (nothing cached, all cached, more cached than input, no reasoning, 0 or 1 visible)."""
    rng = np.random.default_rng(7)
    n = 5000
    inp = rng.integers(0, 200_000, n)
    cached = np.where(rng.random(n) < 0.3, 0, rng.integers(0, 250_000, n))
    reasoning = np.where(rng.random(n) < 0.5, 0, rng.integers(-3, 5000, n))
    visible = rng.integers(-1, 4000, n)
    got = vwhatif.speed_parts(prof, inp, reasoning, visible, cached)
    for k in range(n):
        want = prof.parts(int(inp[k]), int(reasoning[k]), int(visible[k]), int(cached[k]))
        assert tuple(float(x[k]) for x in got) == tuple(want), k


def test_the_cost_on_columns_is_the_breakdown_total_to_the_bit():
    """cost.total_of_columns of random calls (cached past input, reasoning past output) is
    breakdown(...).total_usd exactly."""
    from agentloop.analysis.cost import breakdown, total_of_columns
    from agentloop.model.prices import Prices
    from agentloop.trace.span_attrs import ModelAttrs

    rng = np.random.default_rng(3)
    usage = rng.integers(-5, 90_000, (3000, 5))
    blank = dict.fromkeys(ModelAttrs._fields)
    calls = [
        ModelAttrs(**(blank | dict(zip(store.USAGE_COLUMNS, row, strict=True))))
        for row in usage.tolist()
    ]
    for prices in (Prices(2.5, 0.25, 20.0), Prices(0.15, 0.075, 0.6, placeholder=True)):
        assert total_of_columns(usage, prices) == breakdown(calls, prices).total_usd


async def test_a_runs_end_makes_its_traces_cache_when_it_is_big(tmp_path: Path, monkeypatch):
    """``run_task`` returns with the columnar cache of its trace written when the trace is past
    the size analysed on columns (lowered to 0 here: a real run's trace is a few KB), and with
    none below it: the run-end hook the cache's docs promise, not only a first analysis."""
    from agentloop import run_task
    from agentloop.config.tasks import load_task
    from tests.conftest import instant_tier

    task = load_task(Path(__file__).parent / "data" / "steady.yaml")
    small = await run_task(task, tier=instant_tier(), trace_dir=tmp_path / "small")
    assert small.trace_path is not None and not store.cache_path(Path(small.trace_path)).exists()
    monkeypatch.setattr(runend, "COLUMNAR_BYTES", 0)
    big = await run_task(task, tier=instant_tier(), trace_dir=tmp_path / "big")
    assert big.trace_path is not None and store.is_fresh(Path(big.trace_path))
    c = store.read_cache(Path(big.trace_path))
    assert c is not None and c.complete and c.is_model.sum() == big.steps


def test_in_own_arena_runs_in_a_thread_of_its_own_and_hands_back_what_it_got():
    """The value, or the exception, of the function run in another thread, waited for."""
    import threading

    from agentloop.analysis.columnar import in_own_arena

    here = threading.get_ident()
    assert in_own_arena(lambda a, b: (a + b, threading.get_ident() != here), 2, 3) == (5, True)

    def bad() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError, match="x"):
        in_own_arena(bad)
