"""A big trace's later half read by a second process: the same columns, or the file read whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
