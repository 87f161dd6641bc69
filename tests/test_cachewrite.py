"""A cold command writes the cache as it builds the columns: the same answer, a whole cache after it."""

from __future__ import annotations

import mmap
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agentloop.analysis import cachefile, store
from agentloop.analysis.cachewrite import written_meanwhile
from agentloop.analysis.fastcols import fast_fields
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


@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_cold_command_answers_as_the_loops_and_leaves_a_whole_cache(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    shape: str,
    command: str,
    streamed: bool,
):
    """Columns built cold, analysed while the cache is written (``streamed``: written as they
    are made, the analysis on the file's views): the loops' answer, and when the command
    returns the cache is whole (its CRC, its key) and holds the checked path's columns, with
    no temporary file left."""
    if streamed:
        monkeypatch.setattr(store, "STREAMED_BYTES", 0)
    p = SHAPES[shape](tmp_path)
    loops = run(p, COMMANDS[command], capsys)  # a small trace, no cache: the loops
    cache = stale_cache(p)
    assert loops == run(p, COMMANDS[command], capsys)
    again = store.read_cache(p)
    assert again is not None
    assert [] == differences(again, checked(p))
    assert [cache] == list(cache.parent.iterdir())


def test_a_big_traces_columns_are_views_of_the_cache_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """From STREAMED_BYTES the cache is written as the columns are made and the columns handed
    back are read-only views of the file written (pages the kernel can take back), the checked
    path's values; the cache is whole once the block is left."""
    monkeypatch.setattr(store, "STREAMED_BYTES", 0)
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    with written_meanwhile() as pool:
        c = store.load_columns(p, pool)
        assert isinstance(c.t0.base, memoryview) and isinstance(c.t0.base.obj, mmap.mmap)
        with pytest.raises(ValueError, match="read-only"):
            c.t0[0] = 0
    assert [] == differences(c, checked(p))
    again = store.read_cache(p)
    assert again is not None and [] == differences(again, c)


def test_what_the_screen_handed_over_before_it_gave_up_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The fast builder hands the span columns over before it meets an unsplit call (handed to
    the checked path): the cache written holds the checked path's columns, one copy each."""
    p = SHAPES["an unsplit call (handed to the checked path)"](tmp_path)
    got: list[dict[str, object]] = []
    assert not fast_fields(p, lambda f, n: got.append(f))
    assert got and "t0" in got[0]  # the span columns, handed first
    monkeypatch.setattr(store, "STREAMED_BYTES", 0)
    with written_meanwhile() as pool:
        c = store.load_columns(p, pool)
    assert [] == differences(c, checked(p))
    again = store.read_cache(p)
    assert again is not None and [] == differences(again, c)


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


def _broken(monkeypatch: pytest.MonkeyPatch, where: str, error: Exception | None = None) -> None:
    """The cache writer's ``where`` step raises ``error`` (by default what a bug would)."""

    def bug(*args: object) -> None:
        raise error or RuntimeError("a bug in the writer")

    monkeypatch.setattr(cachefile.Writer, where, bug)


@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("where", ["_write_columns", "_seal"])
def test_a_writer_that_raises_meanwhile_is_logged_not_raised(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
    streamed: bool,
):
    """A failure past the folder's (a bug in the writer) while the command analyses is a
    warning on stderr; the columns are the command's all the same, no file left behind."""
    if streamed:
        monkeypatch.setattr(store, "STREAMED_BYTES", 0)
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    _broken(monkeypatch, where)
    with written_meanwhile() as pool:
        c = store.load_columns(p, pool)
    assert [] == differences(c, checked(p))
    assert "cache_write_failed" in capsys.readouterr().err
    assert [] == list(store.cache_path(p).parent.iterdir())


@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("where", ["_write_columns", "_seal"])
def test_a_write_stopped_by_any_error_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, streamed: bool
):
    """Not only an OSError: whatever stops a write made at once, the temporary file goes and
    the error is the caller's."""
    if streamed:
        monkeypatch.setattr(store, "STREAMED_BYTES", 0)
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    _broken(monkeypatch, where)
    with pytest.raises(RuntimeError, match="a bug"):
        store.load_columns(p)
    assert [] == list(store.cache_path(p).parent.iterdir())


@pytest.mark.parametrize("meanwhile", [True, False])
@pytest.mark.parametrize("where", ["_write_columns", "_write_meta", "_seal"])
def test_a_full_disk_costs_the_cache_not_the_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, meanwhile: bool
):
    """A write of a streamed cache that fails on the disk (an OSError) leaves no file and no
    message: the columns are built again in memory, the checked path's values."""
    monkeypatch.setattr(store, "STREAMED_BYTES", 0)
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    _broken(monkeypatch, where, OSError(28, "No space left on device"))
    with written_meanwhile() as pool:
        c = store.load_columns(p, pool if meanwhile else None)
    assert [] == differences(c, checked(p))
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
    assert store.write_cache(p, checked(p), store.source_key(p)) == cache
    assert sorted([cache.name, live.name]) == sorted(f.name for f in cache.parent.iterdir())
