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

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeAlias

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


class Quoted(NamedTuple):
    """Strings whose JSON is themselves in quotes (nothing to escape): the quotes are added
    by the join that places them, not by a join of their own."""

    text: Column


def strings(values: Sequence[str | None] | pa.Array) -> Column | Quoted:
    """The JSON of each string (None: null), each distinct one through orjson once."""
    col = values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    if isinstance(col, pa.DictionaryArray):
        col = col.cast(pa.string())
    if not col.null_count and not pc.any(pc.match_substring_regex(col, _ESCAPED)).as_py():
        return Quoted(col)  # nothing to escape: the usual case
    d = col.dictionary_encode()
    text = pa.array([orjson.dumps(v).decode() for v in d.dictionary.to_pylist()], pa.string())
    return text.take(d.indices).fill_null("null")


def bools(values: np.ndarray) -> Column:
    return pc.if_else(pa.array(values, pa.bool_()), "true", "false")


Field = tuple[str, Column | Quoted]


def records(fields: Sequence[Field], indent: int, before: str = "", after: Any = "") -> Column:
    """Each row as a JSON object of ``fields`` (name, values), closed at ``indent`` spaces
    with its keys at ``indent + 2`` (as orjson indents an object at that depth), between
    ``before`` and ``after`` (a text, or a column of them)."""
    inner = "\n" + " " * (indent + 2)
    parts: list[Any] = [before + "{"]
    for k, (name, col) in enumerate(fields):
        key = ("," if k else "") + inner + orjson.dumps(name).decode() + ": "
        parts += [key + '"', col.text, '"'] if isinstance(col, Quoted) else [key, col]
    parts += ["\n" + " " * indent + "}", after]
    merged: list[Any] = []
    for x in parts:  # neighbouring texts as one
        if isinstance(x, str) and merged and isinstance(merged[-1], str):
            merged[-1] += x
        elif not isinstance(x, str) or x:
            merged.append(x)
    return pc.binary_join_element_wise(*merged, "")


def _data(col: Column) -> tuple[np.ndarray, pa.Buffer]:
    """A string column's offsets (int64) and its bytes."""
    bufs = col.buffers()
    off = np.frombuffer(bufs[1], np.int32, len(col) + 1, col.offset * 4).astype(np.int64)
    return off, bufs[2]


class Raw(NamedTuple):
    """JSON text to write into a document as it is, in pieces (bytes, or views of Arrow's
    buffers) made as they are asked for: a long run's steps are 130 MB of text, made and
    written a chunk of rows at a time."""

    parts: Iterable[Any]


CHUNK = 1 << 12  # rows of a list made into text at once


class Chunked(NamedTuple):
    """A column :func:`listing` makes a chunk of rows at a time, as it writes them:
    ``make(at, n)`` gives rows ``at .. at + n``. For texts that are themselves joins of many
    rows (a step's tools, its model parts): made whole, a long run's are 150 MB at once."""

    make: Callable[[int, int], Column | Quoted]


def cut(col: Column | Quoted | Chunked, at: int, n: int) -> Column | Quoted:
    """Rows ``at .. at + n`` of a column."""
    if isinstance(col, Chunked):
        return col.make(at, n)
    return Quoted(col.text.slice(at, n)) if isinstance(col, Quoted) else col.slice(at, n)


def listing(
    fields: Sequence[tuple[str, Column | Quoted | Chunked]],
    n: int,
    indent: int,
    chunk: int | None = None,
) -> Raw:
    """``n`` rows of ``fields`` as one JSON list closed at ``indent`` spaces (``[]`` when
    empty), an object a line at ``indent + 2``: ``chunk`` rows (default :data:`CHUNK`) at a
    time, each one join, its bytes not copied."""
    if not n:
        return Raw((b"[]",))
    step = chunk or CHUNK

    def parts() -> Iterator[Any]:
        ind = "\n" + " " * (indent + 2)
        yield b"["
        for at in range(0, n, step):
            k = min(step, n - at)
            rows = records([(name, cut(col, at, k)) for name, col in fields], indent + 2, ind, ",")
            off, data = _data(rows)
            end = int(off[-1]) - (at + k == n)  # the last row's comma left out
            yield memoryview(data)[int(off[0]) : end]
        yield b"\n" + b" " * indent + b"]"

    return Raw(parts())


def listings(fields: Sequence[Field], starts: np.ndarray, indent: int) -> Column:
    """Rows of lists: row k's list holds rows ``starts[k]:starts[k + 1]`` of ``fields``,
    closed at ``indent`` spaces (``[]`` when empty)."""
    n = len(starts) - 1
    count = np.diff(starts)
    if not int(starts[-1]):
        return pa.array(["[]"] * n, pa.string())
    last = np.zeros(int(starts[-1]), np.bool_)
    last[starts[1:][count > 0] - 1] = True
    after = pc.if_else(pa.array(last, pa.bool_()), "", ",")
    off, data = _data(records(fields, indent + 2, "\n" + " " * (indent + 2), after))
    at = off[starts].astype(np.int32)
    glued = pa.StringArray.from_buffers(n, pa.py_buffer(at.tobytes()), data)
    full = pc.binary_join_element_wise("[", glued, "\n" + " " * indent + "]", "")
    return pc.if_else(pa.array(count > 0, pa.bool_()), full, "[]")


def dump(doc: dict[str, Any], option: int) -> Iterator[Any]:
    """``orjson.dumps(doc, option=option)`` as pieces to write one after another, each
    :class:`Raw` value of ``doc`` (top level) written as its parts where orjson writes a
    marker in its place (the parts are made as the pieces are taken)."""
    raws = [k for k, v in doc.items() if isinstance(v, Raw)]
    names = {k: f"\ue000jsontext {n}\ue000" for n, k in enumerate(raws)}
    marks = {k: orjson.dumps(m) for k, m in names.items()}  # as it shows in the text
    text = orjson.dumps({k: names.get(k, v) for k, v in doc.items()}, option=option)
    if any(text.count(m) != 1 for m in marks.values()):  # a value holds a marker's text too
        joined = {
            k: orjson.Fragment(b"".join(v.parts)) if k in marks else v for k, v in doc.items()
        }
        return iter([orjson.dumps(joined, option=option)])
    return _around(text, [(marks[k], doc[k]) for k in raws])


def _around(text: bytes, raws: list[tuple[bytes, Raw]]) -> Iterator[Any]:
    for mark, raw in raws:
        head, _, text = text.partition(mark)
        yield head
        yield from raw.parts
    yield text
