"""A cold command writes the cache while it analyses: the same answer, a whole cache after it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from agentloop.analysis import store
from agentloop.analysis.cachewrite import _quietly, written_meanwhile
from agentloop.analysis.synthetic_runs import fanout_run
from agentloop.cli import main
from tests.test_analysis_columnar_report import PRICED
from tests.test_columnar import late_and_unsplit
from tests.test_fastcols import checked, differences, with_setup, write

SHAPES: dict[str, Callable[[Path], Path]] = {
    "sub-agents on two tiers (the fast builder)": lambda d: fanout_run(
        [2, 1], tiers=PRICED, sub_tier="b"
    ).write(d / "run.jsonl"),
    "set-up and check spans (the fast builder)": lambda d: write(d, with_setup(), "run.jsonl"),
    "an unsplit call (handed to the checked path)": lambda d: late_and_unsplit().write(
        d / "run.jsonl"
    ),
}
COMMANDS = {
    "whatif --json": ["whatif", "--speedup", "4", "--json"],
    "whatif": ["whatif", "--speedup", "4"],
    "report --json": ["report", "--json"],
    "report": ["report"],
}


def run(p: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main([command[0], str(p), *command[1:]]) == 0
    return capsys.readouterr().out


def stale_cache(p: Path) -> Path:
    """A damaged cache beside ``p``: a command takes the columnar path, and builds it cold."""
    cache = store.cache_path(p)
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(b"not a cache")
    return cache


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_cold_command_answers_as_the_loops_and_leaves_a_whole_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str, command: str
):
    """Columns built cold, analysed read-only while the cache is written: the loops' answer,
    and when the command returns the cache is whole (its CRC, its key) and holds the checked
    path's columns, with no temporary file left."""
    p = SHAPES[shape](tmp_path)
    loops = run(p, COMMANDS[command], capsys)  # a small trace, no cache: the loops
    cache = stale_cache(p)
    assert loops == run(p, COMMANDS[command], capsys)
    again = store.read_cache(p)
    assert again is not None
    assert [] == differences(again, checked(p))
    assert [cache] == list(cache.parent.iterdir())


def test_the_columns_are_read_only_while_the_cache_is_written(tmp_path: Path):
    """Every numpy array of the columns handed back is read-only (an analysis writing into
    one raises rather than race the writer); the cache is whole once the block is left."""
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    with written_meanwhile() as write:
        c = store.load_columns(p, write)
        fields = [getattr(c, f.name) for f in dataclasses.fields(c)]
        arrays = [v for v in fields if isinstance(v, np.ndarray)]
        assert len(arrays) >= 10
        assert [] == [a for a in arrays if a.flags.writeable]
        with pytest.raises(ValueError, match="read-only"):
            c.t0[0] = 0
    assert store.read_cache(p) is not None


def test_a_cache_that_cannot_be_written_is_not_the_commands_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """The write's temporary path taken (a folder there): the command answers as it would,
    the cache stays as it was (stale, so rebuilt next time)."""
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    loops = run(p, COMMANDS["whatif --json"], capsys)
    cache = stale_cache(p)
    cache.with_name(f".{cache.name}.{os.getpid()}.tmp").mkdir()
    assert loops == run(p, COMMANDS["whatif --json"], capsys)
    assert store.read_cache(p) is None


def test_a_writer_that_raises_is_logged_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """A failure past the folder's (a bug in the writer) is a warning on stderr."""
    _quietly(tmp_path / "run.jsonl", None)
    assert "cache_write_failed" in capsys.readouterr().err


def test_a_write_stopped_by_any_error_leaves_no_temporary_file(tmp_path: Path):
    """Not only an OSError: whatever stops the write (here a table that is not one, after the
    temporary file was made), the temporary file goes and the error is the caller's."""
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    with pytest.raises(AttributeError):
        store.write_table(p, None)
    assert [] == list(store.cache_path(p).parent.iterdir())


def test_a_killed_writers_temporary_file_goes_with_the_next_write(tmp_path: Path):
    """A writer killed mid-write (SIGKILL cleans nothing) leaves its ``.tmp``: the next write of
    that cache removes it; a live writer's stays."""
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    cache = store.cache_path(p)
    cache.parent.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = cache.with_name(f".{cache.name}.{gone.pid}.tmp")
    dead.write_bytes(b"half a cache")
    live = cache.with_name(f".{cache.name}.1.tmp")  # pid 1 is alive
    live.write_bytes(b"another writer's")
    assert store.write_table(p, store.to_table(checked(p), store.source_key(p))) == cache
    assert sorted([cache.name, live.name]) == sorted(f.name for f in cache.parent.iterdir())
