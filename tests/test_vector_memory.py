"""The vectorised analysis's memory-saving forms give the same results as the plain ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from agentloop.analysis import cands, store, vector, vwhatif
from agentloop.analysis.columnar import columns_of
from agentloop.analysis.graph import build_graph
from agentloop.analysis.synthetic import agent_lines
from agentloop.analysis.whatif import Scenario, whatif
from agentloop.config.tiers import SpeedProfile
from agentloop.trace.reader import parse_lines

SCENARIOS = [
    Scenario.multipliers(4.0, 2.0),
    Scenario.tier("fast", SpeedProfile(output_tps=400.0, prefill_tps=9000.0, base_latency_s=0.05)),
]


ROOT = Path(__file__).resolve().parents[1]
RUN = {
    "capture_output": True,
    "text": True,
    "check": True,
    "timeout": 60,
    "env": {**os.environ, "PYTHONPATH": str(ROOT)},
}


def long_columns():  # past cands.DIRECT_BELOW positions: the hops, peels and runs, not doubling
    return columns_of(build_graph(parse_lines(list(agent_lines(6_000, tools_per_step=3)))))


def test_positions_are_int32_while_they_fit_and_int64_past_2_to_the_31():
    """The index type is int32 up to 2^31 - 1 positions or slots, int64 from 2^31."""
    assert (cands.index_type(2**31 - 1), cands.index_type(2**31)) == (np.int32, np.int64)


def test_a_graph_of_int64_positions_gives_the_same_whatif_as_int32():
    """The graph a trace past 2^31 positions gets (int64 positions, slots and indices) re-times
    a run to the same WhatIf as the int32 graph every smaller trace gets."""
    c = long_columns()
    small, wide = vector.build(c), vector.build(c, np.int64)
    assert 2 * len(small) >= cands.DIRECT_BELOW
    assert (small.back_link.dtype, small.cd.first.dtype) == (np.int32, np.int32)
    assert (wide.back_link.dtype, wide.cd.first.dtype) == (np.int64, np.int64)
    for sc in SCENARIOS:
        assert vwhatif.whatif(small, sc) == vwhatif.whatif(wide, sc), sc.label


def test_after_offsets_are_the_cache_files_int32_and_the_builders_agree(tmp_path: Path):
    """The ``after`` offsets read from a cache are its int32 column itself (no int64 copy: 8 MB
    of a million spans' warm peak), and both builders make them int32 too."""
    trace = tmp_path / "run.jsonl"
    trace.write_bytes(b"".join(line + b"\n" for line in agent_lines(300)))
    built = store.load_columns(trace)  # the fast builder's; writes the cache
    c = store.read_cache(trace)
    assert c is not None
    checked = columns_of(build_graph(parse_lines(trace.read_bytes().splitlines())))
    assert [x.after_off.dtype for x in (built, c, checked)] == [np.int32] * 3
    assert c.after_off[-1] == len(c.after_idx) > 0
    assert not c.after_off.flags.owndata  # a view of the mapped file, not a copy


def test_sums_made_in_spent_weights_equal_sums_of_a_copy():
    """Summing in the caller's weights (``spend``) gives the sums a copy gives, for one column
    and several."""
    vg = vector.build(long_columns())
    sent = 2 * len(vg)
    links = vg.back_link.copy()
    links[sent] = sent
    rec = np.empty(sent + 1, np.int64)
    rec[0:-1:2], rec[1::2], rec[sent] = vg.c.t0, vg.c.t1, 0
    rng = np.random.default_rng(3)
    for shape in ((sent + 1,), (sent + 1, 3)):
        w = rng.integers(0, 10**9, shape)
        kept = cands.sum_links(vg.cd, links, w, rec)
        assert kept.tolist() == cands.sum_links(vg.cd, links, w.copy(), rec, spend=True).tolist()


def test_tally_arrays_are_the_tallys_dict():
    """The step tallies as arrays (ids ascending, the run's level first) are the dict's items."""
    vg = vector.build(long_columns())
    V = vector.solve(vg, [vg.recorded_dur * 2])[0]
    links = vector.path_links(vg, V)
    end = vector.run_end(vg, V)
    cats, steps = vector.tally(vg, V, links, vg.recorded_dur * 2, end, None)
    cats2, ids, ns = vector.tally_arrays(vg, V, links, vg.recorded_dur * 2, end, None)
    assert (cats, sorted(steps.items())) == (
        cats2,
        list(zip(ids.tolist(), ns.tolist(), strict=True)),
    )
    assert ids[0] == -1 and (np.diff(ids) > 0).all()


def _mapped_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    kb, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            inside = line.endswith(" " + str(path))
        elif inside and head[0] == "Rss:":
            kb += int(head[1])
    return kb


def test_dropped_pages_leave_the_process_and_the_columns_as_they_were(tmp_path: Path):
    """After ``drop_pages`` the cache's mapping holds no resident page, and the columns read
    back (from the page cache) the same values: the what-if on them is the loops'."""
    trace = tmp_path / "run.jsonl"
    trace.write_bytes(b"".join(line + b"\n" for line in agent_lines(6_000, tools_per_step=3)))
    store.load_columns(trace)  # writes the cache
    c = store.read_cache(trace)
    assert c is not None
    before = (c.t0.tolist(), c.parts.tolist(), c.after_idx.tolist(), c.after_off.tolist())
    mapped = store.cache_path(trace).resolve()
    assert _mapped_kb(mapped) > 400  # t0, parts and the after lists read: 0.8 MB of the file
    c.drop_pages()
    assert _mapped_kb(mapped) == 0
    assert (c.t0.tolist(), c.parts.tolist(), c.after_idx.tolist(), c.after_off.tolist()) == before
    g = build_graph(parse_lines(trace.read_bytes().splitlines()))
    for sc in SCENARIOS:
        assert vwhatif.whatif_columns(c, sc) == whatif(g, sc), sc.label


ANON = """
import sys
import numpy as np
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
"""  # the start of the scripts below: the process's anonymous memory, kB

FREED = (
    ANON
    + """
from agentloop.analysis.columnar import map_big_blocks
if sys.argv[1] == "mapped":
    map_big_blocks()
a = np.ones(4_000_000)  # 32 MB, freed: glibc's default raises its threshold to that
del a
b = np.ones(2_000_000)  # 16 MB
keep = np.ones(1_000)  # something after it
before = anon()
del b
print(before - anon())
"""
)


def test_a_freed_big_array_leaves_the_process_once_big_blocks_are_mapped():
    """After ``map_big_blocks`` a freed 16 MB array's pages leave the process at once, even
    after a bigger block was freed (glibc's default then keeps them on its heap)."""
    freed = {
        how: int(subprocess.run([sys.executable, "-c", FREED, how], **RUN).stdout)
        for how in ("default", "mapped")
    }
    assert freed["mapped"] > 15_000  # kB
    assert freed["default"] < 1_000  # kB: what the call is for


ARROW_FREED = (
    ANON
    + """
import pyarrow as pa
import pyarrow.compute as pc
from agentloop.analysis.columnar import arrow_on_heap, map_big_blocks
map_big_blocks()
if sys.argv[1] == "heap":
    arrow_on_heap()
a = pc.add(pa.array(np.arange(2_000_000)), 1)  # 16 MB, made by Arrow
before = anon()
del a
print(before - anon(), pa.default_memory_pool().backend_name)
"""
)


def test_a_freed_arrow_array_leaves_the_process_once_arrow_allocates_on_the_heap():
    """After ``arrow_on_heap`` (and ``map_big_blocks``) a freed 16 MB Arrow array's pages
    leave the process at once; Arrow's bundled mimalloc keeps them until asked."""
    got = {
        how: subprocess.run([sys.executable, "-c", ARROW_FREED, how], **RUN).stdout.split()
        for how in ("default", "heap")
    }
    assert got["heap"][1] == "system" and int(got["heap"][0]) > 15_000  # kB
    if got["default"][1] == "mimalloc":  # the pool pyarrow's wheels choose
        assert int(got["default"][0]) < 1_000  # kB: what the call is for


SMALL = """
from agentloop.analysis.columnar import small_pages
from numpy._core.multiarray import _set_madvise_hugepage
print(_set_madvise_hugepage(True), end=" ")
small_pages()
print(_set_madvise_hugepage(True))
"""


def test_numpy_asks_for_no_huge_pages_once_the_analysis_chose_small_ones():
    """``small_pages`` turns numpy's huge-page advice off (its switch returns what it was):
    on by default, off after the call, so the call reaches the numpy installed."""
    out = subprocess.run([sys.executable, "-c", SMALL], **RUN).stdout.split()
    assert out == ["True", "False"]
