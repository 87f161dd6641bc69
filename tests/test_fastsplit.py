"""A big trace's later half read by a second process: the same columns, or the file read whole."""

from __future__ import annotations

import pickle
import weakref
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from agentloop.analysis import _fastread, _fastsplit
from agentloop.analysis.fastcols import fast_columns
from agentloop.analysis.synthetic import agent_lines
from tests.test_fastcols import FAST, checked, differences, with_setup, write
from tests.test_fastread import renamed_from_the_30th

SPLIT = 0  # split_bytes: every trace is read in two processes


@pytest.fixture
def split_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is not read whole in this process: the split must have been taken."""

    def whole(*args: Any) -> Any:
        raise AssertionError("read whole, not split")

    monkeypatch.setattr(_fastsplit._fastread, "read_records", whole)


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("agent", _fastread.WINDOW),
        ("agent, 5 tools", 333),
        ("set-up and check spans", 64),
        ("measured under load", _fastread.WINDOW),
        ("killed", 200),
    ],
)
def test_a_trace_read_in_two_processes_gives_the_checked_columns(
    tmp_path: Path, split_only: None, name: str, window: int
):
    """Cut near its middle, the later half read by the worker (windows of ``window`` bytes in
    both): every field the checked path's."""
    p = write(tmp_path, FAST[name]())
    fast = fast_columns(p, window=window, split_bytes=SPLIT)
    assert fast is not None
    assert [] == differences(fast, checked(p))


def test_the_cut_at_each_record_of_a_short_trace_gives_the_checked_columns(tmp_path: Path):
    """Traces of 3 to 7 steps: the cut falls on a different record each time (a start, an
    end, the one before the end record)."""
    for steps in range(3, 8):
        p = write(tmp_path, list(agent_lines(steps, tools_per_step=2)), f"{steps}.jsonl")
        fast = fast_columns(p, window=128, split_bytes=SPLIT)
        assert fast is not None, steps
        assert [] == differences(fast, checked(p)), steps


@pytest.mark.parametrize("renamed", [b'"x', b'"s9'])
def test_ids_not_the_writers_in_order_across_the_cut_are_joined(
    tmp_path: Path, split_only: None, renamed: bytes
):
    """The later spans named otherwise (the ids then kept as strings), or numbered out of
    order: the later part's end records of spans it does not know take both kinds' values,
    and the two parts' ids are joined: the checked path's columns."""
    p = write(tmp_path, renamed_from_the_30th(renamed))
    fast = fast_columns(p, window=256, split_bytes=SPLIT)
    assert fast is not None
    assert [] == differences(fast, checked(p))


def test_a_sub_agents_trace_is_read_in_two_processes(tmp_path: Path, split_only: None):
    """A sub-agent's spans are numbered apart from the run's (ids out of start order): the
    two parts joined, the checked path's columns."""
    for name in ("sub-agents", "sub-agents, tiers", "an agent name holding the mark"):
        p = write(tmp_path, FAST[name](), f"{len(name)}.jsonl")
        fast = fast_columns(p, window=512, split_bytes=SPLIT)
        assert fast is not None, name
        assert [] == differences(fast, checked(p)), name


def test_a_worker_that_fails_leaves_the_file_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A worker that exits with an error before it answers: the file is read in this process."""
    monkeypatch.setattr(_fastsplit, "_WORKER", "import sys; sys.exit(3)")
    p = write(tmp_path, with_setup())
    fast = fast_columns(p, split_bytes=SPLIT)
    assert fast is not None
    assert [] == differences(fast, checked(p))


def test_what_is_not_clean_in_either_half_is_handed_over(tmp_path: Path):
    """A ``\\r`` as a record's whitespace in the last record (the worker's half), the end record
    written before the cut too (this process's): handed over, as the whole file would be."""
    lines = list(agent_lines(6))
    lines[-2] = lines[-2].replace(b'"id":', b'\r"id":', 1)
    assert fast_columns(write(tmp_path, lines, "late.jsonl"), split_bytes=SPLIT) is None
    lines = list(agent_lines(6))
    lines.insert(3, lines[-1])
    assert fast_columns(write(tmp_path, lines, "early.jsonl"), split_bytes=SPLIT) is None


def test_no_worker_is_started_where_this_is_not_a_python_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Embedded in another program, ``sys.executable`` names that program: it is not run as a
    worker (here a script that would leave a mark); the file is read whole."""
    marked = tmp_path / "ran"
    program = tmp_path / "server"
    program.write_text(f"#!/bin/sh\ntouch {marked}\n")
    program.chmod(0o755)
    monkeypatch.setattr(_fastsplit.sys, "executable", str(program))
    p = write(tmp_path, with_setup())
    fast = fast_columns(p, split_bytes=SPLIT)
    assert fast is not None
    assert [] == differences(fast, checked(p))
    assert not marked.exists()


def test_the_worker_sends_its_arrays_a_batch_at_a_time_and_drops_each(
    monkeypatch: pytest.MonkeyPatch,
):
    """Arrays (numpy and Arrow) sent apart from what holds them, in batches of about
    ``_BATCH`` bytes, each batch's dropped once written (its pickler's memo held them all):
    the same values come back, an array held twice still one array."""
    monkeypatch.setattr(_fastsplit, "_BATCH", 64)
    parts = [np.full(5, i, np.int32) for i in range(9)]  # 20 bytes each: batched in fours
    shared = np.arange(20, dtype=np.int64)  # 160 bytes, after the ninth part
    names = pa.array(["a", None, "b"], pa.string())
    value = ("ok", {"parts": parts, "twice": [shared, shared], "names": names, "n": 7})
    alive = [weakref.ref(a) for a in (*parts, shared)]
    box = [value]
    del value, parts, shared

    held: list[int] = []  # the sender's arrays still alive at each write

    class Watched(BytesIO):
        def write(self, b: Any) -> int:
            held.append(sum(r() is not None for r in alive))
            return super().write(b)

    stream = Watched()
    _fastsplit._send(stream, box)
    assert box == []
    assert held[0] == 10 and held[-1] == 0  # the rest written after the last
    assert sorted(set(held), reverse=True) == [10, 6, 2, 0]  # four at a time, then 2
    stream.seek(0)
    assert pickle.load(stream) == 4  # batches: 4 parts, 4 parts, the ninth and shared, Arrow's
    stream.seek(0)
    verdict, got = _fastsplit._receive(stream)
    assert verdict == "ok" and got["n"] == 7 and got["names"].to_pylist() == ["a", None, "b"]
    assert [p.tolist() for p in got["parts"]] == [[i] * 5 for i in range(9)]
    assert got["twice"][0] is got["twice"][1] and got["twice"][0].tolist() == list(range(20))


def test_a_send_cut_short_is_a_failed_worker(tmp_path: Path):
    """The worker's stream ending inside a batch or before the rest: no result (the file is
    then read whole), not a part read wrong."""
    stream = BytesIO()
    _fastsplit._send(stream, [("ok", [np.arange(100_000)])])
    data = stream.getvalue()
    for end in (len(data) // 2, len(data) - 3):
        with pytest.raises((EOFError, pickle.UnpicklingError, ValueError)):
            _fastsplit._receive(BytesIO(data[:end]))
