"""Arrow strings made, gathered and encoded with numpy for the cold builder: Arrow's compute kernels never loaded.

:mod:`agentloop.analysis.fastcols` makes a big trace's span ids ("s1", "s2", ...), its step
labels and its model calls' labels as Arrow strings. Arrow's compute functions (``cast``,
``binary_join_element_wise``, ``take``, ``dictionary_encode``) made them in C, but their first
use loads Arrow's function registry and its compute library's code: 14 MiB that stayed
resident through the analysis after the build, which never calls them (a warm ``whatif`` of a
million spans peaked at 258 MiB, 272 with them loaded). Here the same strings are made from
their offsets and bytes, a chunk of :data:`_CHUNK` items at a time, so no temporary is a whole
column's. ``tests/test_fasttext.py`` compares each function with Arrow's own. Nothing here
imports the builder's screen (msgspec): the what-if gathers its step rows with :func:`take`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from agentloop.analysis.strcols import validity

I64 = np.int64
_POW = 10 ** np.arange(19, dtype=I64)  # int64 reaches 10**18
_ZERO, _MINUS = ord("0"), ord("-")
_CHUNK = 1 << 14  # items at a time
_NO_BYTES = np.zeros(0, np.uint8)


def pieces(a: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string array's offsets (from 0) and bytes: views of its buffers (the offsets copied
    when the array is a slice of another; a null is empty)."""
    if a.type != pa.string():
        raise TypeError(f"a string array, not {a.type}")
    bufs = a.buffers()
    off = np.frombuffer(bufs[1], np.int32, len(a) + 1, a.offset * 4)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else _NO_BYTES
    if off[0]:
        data, off = data[off[0] :], off - off[0]
    return off, data[: off[-1]]


def made(lengths: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """The string array of ``data`` cut at ``lengths`` (one per string); null where ``valid``
    is False. ValueError past Arrow's 2 GiB of string bytes (the cold builder then hands the
    trace to the checked path, as for any ValueError)."""
    off = np.zeros(len(lengths) + 1, np.int32)
    off[1:] = lengths
    return _made(off, data, valid)


def _made(off: np.ndarray, data: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """:func:`made` of the lengths in ``off[1:]`` (int32, turned into offsets in place)."""
    n = len(off) - 1
    if int(off.sum(dtype=I64)) >= 2**31:
        raise ValueError("strings past an Arrow string array's 2 GiB")
    np.cumsum(off, out=off)
    bitmap, nulls = None, 0
    if valid is not None and not valid.all():
        bitmap, nulls = pa.py_buffer(np.packbits(valid, bitorder="little")), int(n - valid.sum())
    return pa.StringArray.from_buffers(n, pa.py_buffer(off), pa.py_buffer(data), bitmap, nulls)


def decimal(values: np.ndarray, prefix: bytes = b"") -> pa.Array:
    """Each integer's decimal text after ``prefix`` ("-" before a negative one's digits), as
    Arrow's cast to string writes it."""
    v = np.asarray(values)
    if v.dtype.kind not in "iu":
        raise TypeError(f"integers, not {v.dtype}")
    if v.size and v.dtype == I64 and v.min() == np.iinfo(I64).min:
        raise ValueError("an integer with no magnitude in int64")
    parts, lengths = [], []
    for lo in range(0, len(v), _CHUNK):
        got, ln = _texts(v[lo : lo + _CHUNK].astype(I64), prefix)
        parts.append(got)
        lengths.append(ln)
    if not parts:
        return made(np.zeros(0, I64), _NO_BYTES)
    return made(np.concatenate(lengths), np.concatenate(parts))


def _texts(v: np.ndarray, prefix: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of ``v``'s texts after ``prefix``, one after another, and their lengths: a
    row each of prefix, sign and digits, the cells shown taken in row order."""
    mag = np.abs(v)
    width = np.searchsorted(_POW[1:], mag, side="right") + 1  # digits
    top, p = int(width.max()), len(prefix)
    rows = np.empty((len(v), p + 1 + top), np.uint8)
    rows[:, :p] = np.frombuffer(prefix, np.uint8)
    rows[:, p] = _MINUS
    rows[:, p + 1 :] = mag[:, None] // _POW[top - 1 :: -1] % 10 + _ZERO
    shown = np.ones(rows.shape, np.bool_)
    shown[:, p] = v < 0
    shown[:, p + 1 :] = np.arange(top) >= (top - width)[:, None]  # a row's last ``width``
    return rows[shown], p + (v < 0) + width


def copy_runs(
    dest: np.ndarray, at: np.ndarray, src: np.ndarray, start: np.ndarray, length: np.ndarray
) -> None:
    """``dest[at[i]:at[i] + length[i]] = src[start[i]:start[i] + length[i]]`` for each i, a
    chunk of runs at a time."""
    for lo in range(0, len(length), _CHUNK):
        ln = length[lo : lo + _CHUNK]
        total = int(ln.sum())
        if not total:
            continue
        ramp = np.arange(total, dtype=I64) - np.repeat(np.cumsum(ln) - ln, ln)
        dest[np.repeat(at[lo : lo + _CHUNK], ln) + ramp] = src[
            np.repeat(start[lo : lo + _CHUNK], ln) + ramp
        ]


def take(a: pa.Array, where: np.ndarray) -> pa.Array:
    """``a``'s strings at ``where`` (Arrow's ``take``); null where ``where`` < 0 or ``a``'s
    value is. A chunk of ``where`` at a time: a million rows' whole-length temporaries were
    50 MB at the cold build's peak."""
    off, data = pieces(a)
    have = validity(a)
    length = np.zeros(len(where) + 1, np.int32)  # the lengths, then the offsets in place
    valid = where >= 0
    parts = []
    for lo in range(0, len(where), _CHUNK):
        ok = valid[lo : lo + _CHUNK]
        at = where[lo : lo + _CHUNK][ok]
        ln = off[at + 1] - off[at]
        length[lo + 1 : lo + 1 + len(ok)][ok] = ln
        if have is not None:
            ok[ok] = have[at]  # a view: ``valid``'s
        part = np.empty(int(ln.sum()), np.uint8)
        copy_runs(part, _starts(ln), data, off[at], ln)
        parts.append(part)
    out = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else _NO_BYTES
    return _made(length, out, valid)


def around(
    sides: list[tuple[str, str]], form: np.ndarray, numbers: pa.Array, shown: np.ndarray | None
) -> pa.Array:
    """Each of ``numbers`` between the two sides (before, after) of its ``form`` (Arrow's
    ``binary_join_element_wise`` of the three, a null number a null); a number not ``shown``
    (False) left out, its sides joined (Arrow's ``if_else`` of the numbers and "" first)."""
    noff, ndata = pieces(numbers)
    nlen = np.diff(noff)
    if shown is not None:
        nlen = np.where(shown, nlen, 0)
    before, blen, boff = _blob([b for b, _ in sides], form)
    after, elen, eoff = _blob([e for _, e in sides], form)
    length = blen + nlen + elen
    out = np.empty(int(length.sum()), np.uint8)
    at = _starts(length)
    copy_runs(out, at, before, boff, blen)
    copy_runs(out, at + blen, ndata, noff[:-1], nlen)
    copy_runs(out, at + blen + nlen, after, eoff, elen)
    valid = validity(numbers)
    if valid is not None and shown is not None:
        valid |= ~shown  # a number left out is no null
    return made(length, out, valid)


def _blob(texts: list[str], form: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``texts`` encoded one after another, and each of ``form``'s text's length and start."""
    raw = [t.encode() for t in texts]
    length = np.array([len(r) for r in raw], I64)
    return np.frombuffer(b"".join(raw), np.uint8), length[form], _starts(length)[form]


def _starts(length: np.ndarray) -> np.ndarray:
    """Where each of runs of ``length`` starts, one after another from 0."""
    start: np.ndarray = np.cumsum(length) - length
    return start


def encoded(a: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """``a``'s codes (int32) and distinct strings in order of first appearance (Arrow's
    ``dictionary_encode``), ``a`` with no null. The strings of each length are compared as
    rows of that many bytes (numpy's ``unique`` of the rows as one value each): exact, and no
    wider than the bytes themselves."""
    off, data = pieces(a)
    length = np.diff(off)
    by_length = np.argsort(length, kind="stable")
    cuts = np.flatnonzero(np.diff(length[by_length])) + 1
    inverse = np.empty(len(a), I64)
    firsts, seen = [], 0
    for rows in np.split(by_length, cuts) if len(a) else []:
        first, inv = _distinct(data, off[rows], int(length[rows[0]]))
        inverse[rows] = inv + seen
        firsts.append(rows[first])
        seen += len(first)
    first = np.concatenate(firsts) if firsts else np.zeros(0, I64)
    order = np.argsort(first, kind="stable")  # the distinct ones by first appearance
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return rank[inverse], take(a, first[order])


def _distinct(data: np.ndarray, start: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Of the strings of ``width`` bytes at ``start``: where each distinct one is first (an
    index into ``start``) and each one's distinct one."""
    if width == 0:
        return np.zeros(1, I64), np.zeros(len(start), I64)
    rows = np.empty((len(start), width), np.uint8)
    copy_runs(
        rows.reshape(-1),
        np.arange(len(start), dtype=I64) * width,
        data,
        start,
        np.full(len(start), width, I64),
    )
    _, first, inv = np.unique(
        rows.view(f"V{width}").reshape(-1), return_index=True, return_inverse=True
    )
    return first, inv.reshape(-1)


def parsed(digits: np.ndarray, off: np.ndarray) -> np.ndarray:
    """The numbers (int64) written in ``digits`` (ASCII '0'-'9', 1 to 18 of them a number),
    cut at ``off`` (each number's first digit, then their end)."""
    width = np.diff(off)
    out = np.empty(len(width), I64)
    for lo in range(0, len(width), _CHUNK):
        a, b = int(off[lo]), int(off[min(lo + _CHUNK, len(width))])
        w = width[lo : lo + _CHUNK]
        ends = np.repeat(off[lo + 1 : lo + 1 + len(w)].astype(I64), w)
        power = _POW[ends - np.arange(a, b, dtype=I64) - 1]
        out[lo : lo + len(w)] = np.add.reduceat(
            (digits[a:b] - _ZERO).astype(I64) * power, _starts(w.astype(I64))
        )
    return out
