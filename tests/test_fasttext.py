"""The cold builder's Arrow strings made with numpy: each function the same as Arrow's compute kernel."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.analysis import _fasttext as T

TEXTS = st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=40)
INTS = st.lists(st.integers(-(2**63) + 1, 2**63 - 1), max_size=40)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 3 items: every function's chunk seams crossed."""
    monkeypatch.setattr(T, "_CHUNK", 3)


@settings(max_examples=150, deadline=None)
@given(INTS, st.sampled_from([b"", b"s", b"step \xc3\xa9 "]))
def test_decimal_is_arrows_cast_to_string(values: list[int], prefix: bytes):
    v = np.array(values, np.int64)
    want = pc.binary_join_element_wise(prefix.decode(), pc.cast(pa.array(v), pa.string()), "")
    assert T.decimal(v, prefix).equals(want)
    assert T.decimal(v.astype(np.int32) if v.size == 0 else v).equals(
        pc.cast(pa.array(v), pa.string())
    )


def test_decimal_of_narrow_integers_and_the_edges():
    v = np.array([0, 9, 10, 99, 100, -1, -10, 2**31 - 1, -(2**31)], np.int32)
    assert T.decimal(v).to_pylist() == [str(x) for x in v.tolist()]
    with pytest.raises(ValueError, match="no magnitude"):
        T.decimal(np.array([np.iinfo(np.int64).min]))


@settings(max_examples=150, deadline=None)
@given(TEXTS, st.data())
def test_take_is_arrows_take(texts: list[str | None], data: st.DataObject):
    whole = pa.array(["x", *texts, "yz"], pa.string())
    a = whole.slice(1, len(texts))  # a slice: its offsets start past 0
    where = np.array(data.draw(st.lists(st.integers(-1, max(len(a) - 1, -1)), max_size=30)))
    where = where.astype(np.int64)
    want = a.take(pa.array(where, pa.int64(), mask=where < 0))
    assert T.take(a, where).equals(want)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), min_size=1, max_size=4),
    st.data(),
)
def test_around_is_arrows_join_of_the_sides(sides: list[tuple[str, str]], data: st.DataObject):
    n = data.draw(st.integers(0, 20))
    form = np.array(data.draw(st.lists(st.integers(0, len(sides) - 1), min_size=n, max_size=n)))
    form = form.astype(np.int64)
    numbers = pa.array(
        data.draw(st.lists(st.one_of(st.none(), st.text(max_size=3)), min_size=n, max_size=n)),
        pa.string(),
    )
    shown = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.bool_)
    at = pa.array(form)
    before = pa.array([b for b, _ in sides], pa.string()).take(at)
    after = pa.array([e for _, e in sides], pa.string()).take(at)
    for mask in (None, shown):
        middle = numbers if mask is None else pc.if_else(pa.array(mask), numbers, "")
        want = pc.binary_join_element_wise(before, middle, after, "")
        assert T.around(sides, form, numbers, mask).equals(want)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="ab\x00é", max_size=4), max_size=40))
def test_encoded_is_arrows_dictionary_encoding(texts: list[str]):
    """Codes in order of first appearance; strings told apart by every byte and their length
    ("a" and "a\\x00", "" among them)."""
    a = pa.array(texts, pa.string())
    want = a.dictionary_encode()
    codes, distinct = T.encoded(a)
    assert codes.dtype == np.int32
    assert codes.tolist() == want.indices.to_pylist()
    assert distinct.equals(want.dictionary)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 10**18 - 1), max_size=40))
def test_parsed_reads_the_numbers_written(values: list[int]):
    text = [str(v) for v in values]
    digits = np.frombuffer("".join(text).encode(), np.uint8)
    off = np.zeros(len(text) + 1, np.int32)
    np.cumsum([len(t) for t in text], out=off[1:])
    assert T.parsed(digits, off).tolist() == values


def test_strings_past_two_gib_are_handed_over():
    """More bytes than an Arrow string array's int32 offsets reach: a ValueError, which the
    cold builder hands over (``fastcols.fast_fields``), so the checked path builds the trace,
    not a wrapped offset."""
    with pytest.raises(ValueError, match="2 GiB"):
        T.made(np.array([2**30, 2**30], np.int64), np.zeros(0, np.uint8))


def test_a_list_of_non_strings_is_refused():
    with pytest.raises(TypeError):
        T.pieces(pa.array([1, 2]))
    with pytest.raises(TypeError):
        T.decimal(np.array([1.5]))
