"""The cold builder reads a trace in windows of one buffer: a window's edge changes nothing."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop.analysis.fastcols import fast_columns
from agentloop.analysis.synthetic import agent_lines
from tests.test_fastcols import FUZZ, base_lines, checked, differences, mutate, with_setup, write


def line_ends(raw: bytes) -> list[int]:
    """Where each line of ``raw`` ends: the offset just past its newline."""
    return [k + 1 for k, byte in enumerate(raw) if byte == 0x0A]


def test_every_line_end_as_a_window_edge_gives_the_checked_columns(tmp_path: Path):
    """Windows cut after each line in turn (the header alone, the end record alone, every
    seam in between, the windows after them cut wherever the size falls): the same columns."""
    p = write(tmp_path, with_setup())
    ref = checked(p)
    for edge in line_ends(p.read_bytes()):
        fast = fast_columns(p, window=edge)
        assert fast is not None, edge
        assert [] == differences(fast, ref), edge


@pytest.mark.parametrize("window", [7, 64, 333, 4096, 1 << 20])
def test_any_window_size_gives_the_checked_columns(tmp_path: Path, window: int):
    """Windows shorter than a line (the buffer grows), a few lines, the whole file."""
    p = write(tmp_path, list(agent_lines(20)))
    fast = fast_columns(p, window=window)
    assert fast is not None
    assert [] == differences(fast, checked(p))


# what is written at a seam: (bytes before the window's last newline, bytes after it)
SEAMS: dict[str, tuple[bytes, bytes]] = {
    "a blank line opening the next window": (b"", b"\n"),
    "a blank line closing the window": (b"\n", b""),
    "a \\r closing the window": (b"\r", b""),
    "a \\r opening the next window": (b"", b"\r"),
    "a space before the boundary's newline": (b" ", b""),
    "a space after the boundary's newline": (b"", b" "),
    "not UTF-8 closing the window": (b"\xff", b""),
    "not UTF-8 opening the next window": (b"", b"\xff"),
}


@pytest.mark.parametrize("name", list(SEAMS))
def test_a_break_of_the_writers_shape_at_a_window_edge_is_handed_over(tmp_path: Path, name: str):
    """A blank line, a ``\\r``, a record boundary not the writer's or a byte that is not UTF-8
    exactly at a window's edge is seen there, as it is inside one window: handed over."""
    before, after = SEAMS[name]
    raw = write(tmp_path, list(agent_lines(3))).read_bytes()
    nl = line_ends(raw)[5] - 1  # the newline closing the 6th line
    p = tmp_path / "seam.jsonl"
    p.write_bytes(raw[:nl] + before + b"\n" + after + raw[nl + 1 :])
    assert fast_columns(p) is None
    assert fast_columns(p, window=nl + len(before) + 1) is None


# what is written into a record beside a seam, where msgspec takes it: (line, old, new)
INSIDE: dict[str, tuple[int, bytes, bytes]] = {
    "not UTF-8 in a key no Struct reads, closing the window": (5, b'"id":', b'"zz":"\xff","id":'),
    "not UTF-8 in a key no Struct reads, opening the next": (6, b'"id":', b'"zz":"\xff","id":'),
    "a \\r as a record's whitespace, closing the window": (5, b'"id":', b'\r"id":'),
    "a \\r as a record's whitespace, opening the next": (6, b'"id":', b'\r"id":'),
}


@pytest.mark.parametrize("name", list(INSIDE))
def test_what_only_the_line_checks_see_is_seen_beside_a_window_edge(tmp_path: Path, name: str):
    """A byte that is not UTF-8 in a key the Structs skip, a ``\\r`` where JSON allows
    whitespace (msgspec takes both; the checked reader refuses the first and splits a line at
    the second), in the lines either side of a window's edge: handed over."""
    at, old, new = INSIDE[name]
    lines = list(agent_lines(3))
    lines[at] = lines[at].replace(old, new, 1)
    p = write(tmp_path, lines)
    assert fast_columns(p) is None
    assert fast_columns(p, window=line_ends(p.read_bytes())[5]) is None


def test_an_end_record_closing_an_earlier_window_is_not_the_end(tmp_path: Path):
    """The end record written twice: the first one, the last line of a window, is a record
    out of place (handed over), not the run's end."""
    lines = list(agent_lines(3))
    lines.insert(6, lines[-1])
    p = write(tmp_path, lines)
    assert fast_columns(p) is None
    assert fast_columns(p, window=line_ends(p.read_bytes())[6]) is None


@FUZZ
@given(data=st.data())
def test_a_mutated_trace_in_small_windows_is_read_as_in_one(tmp_path: Path, data):
    """Whatever a mutation does, small windows take the same decision as one window holding
    the whole file, and build the same columns."""
    p = tmp_path / "m.jsonl"
    p.write_bytes(mutate(data, data.draw(st.sampled_from([base_lines, with_setup]))()))
    whole = fast_columns(p)
    windowed = fast_columns(p, window=data.draw(st.integers(1, 600)))
    assert (whole is None) == (windowed is None)
    if whole is not None and windowed is not None:
        assert [] == differences(whole, windowed)


def renamed(lines: list[bytes], name: Callable[[str], str]) -> list[bytes]:
    """``lines`` with every span id renamed by ``name``, wherever it is written."""
    out = [lines[0]]
    for line in lines[1:]:
        rec = orjson.loads(line)
        for key in ("id", "parent"):
            if rec.get(key) is not None:
                rec[key] = name(rec[key])
        if "after" in rec:
            rec["after"] = [name(a) for a in rec["after"]]
        out.append(orjson.dumps(rec))
    return out


# ids not the writer's "s1".."sn" in order, from some span on: read as numbers in the windows
# before it, as strings from there on (the numbers written back as their strings)
IDS: dict[str, Callable[[str], str]] = {
    "another writer's ids from the 40th span on": lambda i: i if int(i[1:]) < 40 else f"x-{i}",
    "a leading zero in the 120th span's id": lambda i: "s0120" if i == "s120" else i,
    "the writer's ids, two of them swapped": lambda i: {"s50": "s51", "s51": "s50"}.get(i, i),
}


@pytest.mark.parametrize("name", list(IDS))
@pytest.mark.parametrize("window", [300, 4096, 1 << 20])
def test_ids_not_the_writers_from_a_window_on_give_the_checked_columns(
    tmp_path: Path, name: str, window: int
):
    """Span ids the writer would not write, in a later window than the first: the columns
    are the checked path's, in small windows as in one."""
    lines = renamed(list(agent_lines(25)), IDS[name])
    assert lines != list(agent_lines(25))
    p = write(tmp_path, lines)
    fast = fast_columns(p, window=window)
    assert fast is not None
    assert [] == differences(fast, checked(p))


@pytest.mark.parametrize("window", [256, 4096])
def test_ids_the_writers_then_not_give_the_checked_columns(tmp_path: Path, window: int):
    """The windows take an end record's model or tool values by its span's kind, known from
    the ids while they are the writer's in order (``s1``, ``s2``, ...): a trace whose later
    spans are named otherwise, or numbered out of order, is read as the checked path reads it,
    its later end records' values taken whichever their kind."""
    for renamed in (b'"x', b'"s9'):
        p = write(tmp_path, renamed_from_the_30th(renamed), "r.jsonl")
        fast = fast_columns(p, window=window)
        assert fast is not None, renamed
        assert [] == differences(fast, checked(p)), renamed


def renamed_from_the_30th(renamed: bytes) -> list[bytes]:
    """A 12-step trace whose spans from the 30th on are named ``renamed`` + their number
    (``"x30"``, or ``"s930"``: out of order), every reference to them too."""

    def later(m: re.Match[bytes]) -> bytes:
        return m[0] if int(m[1]) < 30 else renamed + m[1] + b'"'

    return [re.sub(rb'"s(\d+)"', later, k) for k in agent_lines(12, tools_per_step=2)]
