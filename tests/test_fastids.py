"""The cold builder's id resolution: the writer's ids read as numbers from their joined bytes
give what the dict gives, and anything else the writer would not write is handed to the dict."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from agentloop.analysis._fastids import resolve, writer_numbers
from agentloop.analysis._fastshape import NotClean

NOT_THE_WRITERS = [
    "",
    "s",
    "s0",
    "s01",
    "s1s2",
    "s+1",
    "s-1",
    "s 1",
    "1s",
    "x1",
    "S1",
    "s1,",
    "s\u0661",  # an Arabic-Indic digit: a digit to str.isdigit, not to the writer
    "s\u00e9",
    "s" + "9" * 19,  # past int64
]


@pytest.mark.parametrize("odd", NOT_THE_WRITERS)
def test_an_id_the_writer_would_not_write_is_not_read_as_a_number(odd: str) -> None:
    assert writer_numbers(["s1", odd, "s2"]) is None
    assert writer_numbers([None, odd]) is None


def test_the_writers_ids_and_none_read_as_numbers() -> None:
    got = writer_numbers(["s1", "s22", None, "s3", "s" + "9" * 18, None])
    assert got is not None
    assert got.tolist() == [1, 22, 0, 3, 10**18 - 1, 0]
    assert writer_numbers([]) is not None and len(writer_numbers([])) == 0  # type: ignore[arg-type]


def _by_dict(ids: list[str], *refs: list[str | None]) -> list[list[int]]:
    idx: dict[str | None, int] = {k: i for i, k in enumerate(ids)}
    return [[idx.get(r, -1 if r is None else -2) for r in rs] for rs in refs]


@pytest.mark.parametrize(
    "ids",
    [
        [f"s{k}" for k in range(1, 13)],  # the writer's: numbers
        [f"s{k}" for k in range(2, 14)],  # not from s1: the dict
        ["s1", "s2", "s3", "s5", "s4", "s6", "s7", "s8", "s9", "s10", "s11", "s12"],
        ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "s12"],
    ],
)
def test_resolve_gives_the_dicts_indices_and_the_ids_as_written(ids: list[str]) -> None:
    parents = [None, ids[0], ids[1], "s13", "s0", ids[2], None, "", "s11", ids[11], "x", ids[4]]
    after = [ids[3], "s99", ids[0], "s01"]
    arr, got = resolve(ids, ids[::-1], parents, after)
    assert arr.equals(pa.array(ids, pa.string()))
    assert [g.tolist() for g in got] == _by_dict(ids, ids[::-1], parents, after)
    assert all(g.dtype == np.int64 for g in got)


def test_an_id_started_twice_is_not_clean() -> None:
    with pytest.raises(NotClean):
        resolve(["s1", "s2", "s2"], [])
