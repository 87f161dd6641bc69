"""Indented JSON text of a table's rows, made a column at a time (a long run's report has a
million rows).

``orjson.dumps(rows, option=OPT_INDENT_2)`` needs a dict per row: for a million rows, making
them costs more than the rest of the report. Here each column's values are written as JSON once
(numbers by orjson itself on the whole array, each distinct string once), and the rows are
glued together by Arrow's element-wise string joins, to the same bytes orjson writes (the
report's own tests compare the two). The result goes into the document as an
``orjson.Fragment``, written as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

_ESCAPED = r'["\\\x00-\x1f]'  # what JSON escapes in a string: quote, backslash, controls
Column: TypeAlias = pa.Array  # the JSON text of a value per row


def numbers(values: np.ndarray) -> Column:
    """The JSON of each number (int64 or float64) as orjson writes it: one ``dumps`` of the
    whole array, split at its commas."""
    text = orjson.dumps(np.ascontiguousarray(values), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
    if not text:
        return pa.array([], pa.string())
    raw = np.frombuffer(text, np.uint8)
    comma = raw == ord(",")
    cuts = np.flatnonzero(comma)
    k = len(cuts)
    off = np.concatenate([[0], cuts - np.arange(k), [len(raw) - k]]).astype(np.int32)
    chars = raw[~comma].tobytes()
    return pa.StringArray.from_buffers(k + 1, pa.py_buffer(off.tobytes()), pa.py_buffer(chars))


def strings(values: Sequence[str | None] | pa.Array) -> Column:
    """The JSON of each string (None: null), each distinct one through orjson once."""
    col = values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    if isinstance(col, pa.DictionaryArray):
        col = col.cast(pa.string())
    if not col.null_count and not pc.any(pc.match_substring_regex(col, _ESCAPED)).as_py():
        return _join(['"', col, '"'])  # nothing to escape (the usual case): quoted as it is
    d = col.dictionary_encode()
    text = pa.array([orjson.dumps(v).decode() for v in d.dictionary.to_pylist()], pa.string())
    return text.take(d.indices).fill_null("null")


def bools(values: np.ndarray) -> Column:
    return pc.if_else(pa.array(values, pa.bool_()), "true", "false")


def _join(parts: Sequence[Column | str]) -> Column:
    """Row by row, the parts (a column, or the same text on every row) one after another."""
    if not any(isinstance(p, pa.Array) for p in parts):
        raise ValueError("a join needs a column")
    return pc.binary_join_element_wise(*parts, "")


def records(fields: Sequence[tuple[str, Column]], indent: int) -> Column:
    """Each row as a JSON object of ``fields`` (name, values), closed at ``indent`` spaces:
    its keys at ``indent + 2``, as orjson indents an object at that depth."""
    inner = "\n" + " " * (indent + 2)
    parts: list[Column | str] = ["{"]
    for k, (name, col) in enumerate(fields):
        parts += [inner + orjson.dumps(name).decode() + ": ", col]
        if k < len(fields) - 1:
            parts.append(",")
    parts.append("\n" + " " * indent + "}")
    return _join(parts)


def _pieces(items: Column, first: np.ndarray, last: np.ndarray, indent: int) -> Column:
    """Each item of a list on its own line at ``indent + 2``, after the list's ``[`` when
    ``first``, followed by ``,``, or when ``last`` by the closing ``]`` at ``indent``."""
    ind = "\n" + " " * (indent + 2)
    before = pc.if_else(pa.array(first, pa.bool_()), "[" + ind, ind)
    after = pc.if_else(pa.array(last, pa.bool_()), "\n" + " " * indent + "]", ",")
    return _join([before, items, after])


def _data(col: Column) -> tuple[np.ndarray, pa.Buffer]:
    """A string column's offsets (int64) and its bytes."""
    if col.null_count:
        raise ValueError("a JSON text column has no nulls")
    bufs = col.buffers()
    off = np.frombuffer(bufs[1], np.int32, len(col) + 1, col.offset * 4).astype(np.int64)
    return off, bufs[2]


def listing(items: Column, indent: int) -> bytes:
    """The items as one JSON list closed at ``indent`` spaces (``[]`` when empty)."""
    if not len(items):
        return b"[]"
    ends = np.zeros(len(items), np.bool_)
    first, last = ends.copy(), ends
    first[0] = last[-1] = True
    off, data = _data(_pieces(items, first, last, indent))
    text: bytes = data.slice(int(off[0]), int(off[-1] - off[0])).to_pybytes()
    return text


def listings(items: Column, starts: np.ndarray, indent: int) -> Column:
    """Rows of lists: row k's list holds ``items[starts[k]:starts[k + 1]]``, closed at
    ``indent`` spaces (``[]`` when empty)."""
    n = len(starts) - 1
    count = np.diff(starts)
    if not len(items):
        return pa.array(["[]"] * n, pa.string())
    first = np.zeros(len(items), np.bool_)
    last = first.copy()
    first[starts[:-1][count > 0]] = True
    last[starts[1:][count > 0] - 1] = True
    off, data = _data(_pieces(items, first, last, indent))
    at = off[starts].astype(np.int32)
    glued = pa.StringArray.from_buffers(n, pa.py_buffer(at.tobytes()), data)
    return pc.if_else(pa.array(count > 0, pa.bool_()), glued, "[]")


def fragment(text: bytes) -> Any:
    """Text to put into a document as it is."""
    return orjson.Fragment(text)
