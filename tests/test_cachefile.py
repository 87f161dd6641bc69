"""The cache file's sections and directory: a file that does not fit is stale, never read."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from agentloop.analysis import cachefile, store
from agentloop.analysis.synthetic_runs import fanout_run

_TRAILER = struct.Struct("<QI4s")


def _cached(tmp_path: Path) -> Path:
    p = fanout_run([2, 1]).write(tmp_path / "run.jsonl")
    store.load_columns(p)
    assert store.read_cache(p) is not None
    return p


def _rewritten(p: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """The cache of ``p`` with its directory edited by ``edit`` and a CRC that matches: only
    the directory's checks can refuse it."""
    cache = store.cache_path(p)
    data = cache.read_bytes()
    at, _, magic = _TRAILER.unpack(data[-_TRAILER.size :])
    directory = orjson.loads(data[at : -_TRAILER.size])
    edit(directory)
    body = data[:at] + orjson.dumps(directory)
    cache.write_bytes(body + _TRAILER.pack(at, zlib.crc32(body), magic))


def _dupe(d: dict[str, Any]) -> None:
    d["columns"].append(d["columns"][0])


def _past_the_end(d: dict[str, Any]) -> None:
    d["columns"][0][1] += 1 << 30


def _negative(d: dict[str, Any]) -> None:
    d["meta"][0][1] = -8


def _not_a_list(d: dict[str, Any]) -> None:
    d["columns"] = {"a": 1}


def _a_column_lost(d: dict[str, Any]) -> None:
    d["columns"].pop()


def _a_float(d: dict[str, Any]) -> None:
    d["columns"][0][0] = 0.5


@pytest.mark.parametrize(
    "edit", [_dupe, _past_the_end, _negative, _not_a_list, _a_column_lost, _a_float]
)
def test_a_directory_that_does_not_fit_makes_the_cache_stale(
    tmp_path: Path, edit: Callable[[dict[str, Any]], object]
):
    """A column named twice, a section past the directory or before the file, a directory of
    the wrong shape, a column missing: the cache is refused (the CRC matches: the directory's
    own checks do it), and the next analysis rebuilds it whole."""
    p = _cached(tmp_path)
    _rewritten(p, edit)
    assert store.read_cache(p) is None
    store.load_columns(p)
    assert store.read_cache(p) is not None


def test_a_trailer_pointing_past_the_file_is_refused(tmp_path: Path):
    """A directory offset past the body: no read, and the freshness test says stale."""
    p = _cached(tmp_path)
    cache = store.cache_path(p)
    data = cache.read_bytes()
    _, _, magic = _TRAILER.unpack(data[-_TRAILER.size :])
    body = data[: -_TRAILER.size]
    cache.write_bytes(body + _TRAILER.pack(len(body) + 1, zlib.crc32(body), magic))
    assert store.read_cache(p) is None
    assert not store.is_fresh(p)


def test_the_sections_are_aligned_views_of_the_file(tmp_path: Path):
    """Each column section starts at a 64-byte boundary, and the numbers read back are views
    of the mapped file, not copies."""
    p = _cached(tmp_path)
    opened = cachefile.read(store.cache_path(p))
    assert opened is not None
    table, pages = opened
    data = store.cache_path(p).read_bytes()
    at, _, _ = _TRAILER.unpack(data[-_TRAILER.size :])
    directory = orjson.loads(data[at : -_TRAILER.size])
    assert all(start % 64 == 0 for start, _ in directory["columns"])
    base = memoryview(pages)
    t0 = table.column("t0").chunk(0).buffers()[1]
    assert 0 <= t0.address - _address(base) < len(pages)


def _address(view: memoryview) -> int:
    return int(np.frombuffer(view, np.uint8).ctypes.data)


def test_a_writer_behind_holds_the_next_group_until_the_one_before_is_written(tmp_path: Path):
    """``behind=1``: a group is queued while one section is still being written; the next
    waits until that one is written (what a group holds is held until then)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    go = threading.Event()

    def first() -> dict[str, pa.Array]:
        assert go.wait(60)  # a bound against a hang, never reached in a passing run
        return {"a": pa.array([1, 2])}

    with ThreadPoolExecutor(1) as pool:
        w = cachefile.Writer.open(tmp_path / "c.arrow", pool)
        assert w is not None
        w.add(["a"], first, 1)
        w.add(["b"], lambda: {"b": pa.array([3, 4])}, 1)  # one queued: no wait
        third = threading.Thread(target=w.add, args=(["c"], lambda: {"c": pa.array([5, 6])}, 1))
        third.start()
        third.join(0.3)
        assert third.is_alive()  # waiting for the first section
        go.set()
        third.join(60)
        assert not third.is_alive()
        got = w.finish({b"k": b"v"}, mapped=True)
        assert got is not None
        assert got[0].column_names == ["a", "b", "c"]
