"""Span ids to Arrow strings and references to span indices, for the cold builder
(:mod:`agentloop.analysis.fastcols`).

The writer names spans "s1", "s2", ... in start order. Such ids are read as numbers from one
joined string of each list (numpy over its bytes: no Arrow string array built from a million
Python strings, which cost 1.0 s of a million-span trace's 1.4 s here), and the ids column is
made from the numbers (:mod:`agentloop.analysis._fasttext`); any other ids go through a dict,
as before.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from agentloop.analysis._fastshape import NotClean
from agentloop.analysis._fasttext import decimal, parsed
from agentloop.analysis._fastwin import narrow

I64 = np.int64
_WIDEST = 18  # digits: 10**18 - 1 fits int64
_S, _ZERO, _NINE = ord("s"), ord("0"), ord("9")
_ID, _PARENT, _AFTER = (operator.attrgetter(k) for k in ("id", "parent", "after"))


def resolve(ids: list[str], *refs: list[str | None]) -> tuple[pa.Array, list[np.ndarray]]:
    """The ids as an Arrow array, and each list of references as span indices (-1: None, -2:
    an id that never started); NotClean when an id starts twice."""
    n = len(ids)
    own = writer_numbers(ids)
    if own is not None and np.array_equal(own, np.arange(1, n + 1)):
        out = [writer_numbers(r) for r in refs]
        if all(k is not None for k in out):
            return writer_ids(n), _numbered(n, out)  # type: ignore[arg-type]
    idx: dict[str | None, int] = dict(zip(ids, range(n), strict=True))
    if len(idx) != n:
        raise NotClean("a span started twice")
    idx[None] = -1  # a root's parent (an id is a string)
    got = [np.fromiter(map(idx.get, r, itertools.repeat(-2)), I64, len(r)) for r in refs]
    return pa.array(ids, pa.string()), got


def as_ids(ids: pa.Array | int) -> pa.Array:
    """The span ids :meth:`Refs.resolved` gave, as an Arrow array (an int n: the writer's)."""
    return writer_ids(ids) if isinstance(ids, int) else ids


def writer_ids(n: int) -> pa.Array:
    """The writer's ids of ``n`` spans, "s1" to "s<n>", as an Arrow array."""
    return decimal(np.arange(1, n + 1, dtype=np.int32 if n < 2**31 else I64), b"s")


def _numbered(n: int, refs: list[np.ndarray]) -> list[np.ndarray]:
    """The references to the writer's ids of ``n`` spans (1 to n, in order), from their numbers,
    as span indices; ``refs`` are the caller's to give up: each becomes its span indices in
    place (a million spans' copies were 27 MB at the cold build's peak)."""
    for k in refs:  # k - 1, an unknown id (k > n) -2; 0 (None) becomes -1
        np.subtract(k, 1, out=k)
        k[k >= n] = -2
    return refs


class Refs:
    """The span records' ids and references (``id``, ``parent``, ``after`` of the records'
    Structs), taken a window at a time (for :mod:`agentloop.analysis._fastread`): as the
    writer's numbers while every window's are the writer's, the strings dropped with the
    window's Structs (a million spans' ids, parents and ``after`` lists are 310 MB); else as
    strings from there on, the earlier windows' numbers written back as the strings they were
    read from (``writer_numbers`` takes only ``s<k>`` as the writer writes it: the round trip
    is exact)."""

    def __init__(self, part: bool = False) -> None:
        # a window's ids (a range while they are the writer's in order), end ids, parents and
        # afters (int32 while they fit: a million spans' are 26 MB less)
        self.numbers: list[list[Any]] = []
        self.strings: list[list[str | None]] | None = None  # the same, as strings
        self.lengths: list[np.ndarray] = []  # each span's number of afters
        # the ids taken so far are s<base + 1> .. s<ordered> in order (-1: not; None: a later
        # part of the file, _fastsplit's, its base its first id less one)
        self.ordered: int | None = None if part else 0
        self.base = 0

    def take(self, starts: list[Any], ends: list[Any]) -> np.ndarray | None:
        """Take the ids and references of a window's start and end records; the end records'
        span numbers less one (their spans' indices, while every id is the writer's and they
        started in order), else None."""
        afters = list(map(_AFTER, starts))
        self.lengths.append(np.fromiter(map(len, afters), np.int32, len(afters)))
        flat = list(itertools.chain.from_iterable(afters))
        if self.strings is None:
            # only a parent may be None (the records' Structs type the rest as strings)
            nums = [
                _numbers(map(_ID, starts), len(starts)),
                _numbers(map(_ID, ends), len(ends)),
                writer_numbers(list(map(_PARENT, starts))),
                _numbers(flat, len(flat)),
            ]
            known = [k for k in nums if k is not None]
            if len(known) == len(nums):
                spans = self._in_order(*known[:2])
                self.numbers.append([self._own(known[0], spans), *map(narrow, known[1:])])
                return spans
            self.strings = self.as_written()
        got = [list(map(_ID, starts)), list(map(_ID, ends)), list(map(_PARENT, starts)), flat]
        for have, new in zip(self.strings, got, strict=True):
            have.extend(new)
        return None

    def _in_order(self, own: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
        """``ends`` less one and the base (their spans' indices in this part) while every span
        so far started in order (``own``: a window's)."""
        if self.ordered is None:
            if not len(own):
                return None
            self.ordered = self.base = int(own[0]) - 1
        if self.ordered < 0 or not np.array_equal(
            own, np.arange(self.ordered + 1, self.ordered + 1 + len(own))
        ):
            self.ordered = -1
            return None
        self.ordered += len(own)
        spans: np.ndarray = ends - 1 - self.base
        return spans

    def _own(self, own: np.ndarray, spans: np.ndarray | None) -> Any:
        """A window's ids as kept: the range they are while every span so far started in
        order (``spans`` not None: :meth:`_in_order`), else as read."""
        if spans is None or self.ordered is None or not len(own):
            return own
        return range(self.ordered - len(own) + 1, self.ordered + 1)

    def as_written(self) -> list[list[str | None]]:
        """The numbers taken so far as the strings they were (0: a root's parent, None)."""
        cols = [[f"s{k}" if k else None for k in self._column(i).tolist()] for i in range(4)]
        self.numbers = []
        return cols

    def _column(self, i: int) -> np.ndarray:
        parts = [np.arange(k.start, k.stop) if isinstance(k, range) else k for k in self._parts(i)]
        return np.concatenate(parts) if parts else np.zeros(0, I64)

    def _parts(self, i: int) -> list[Any]:
        return [w[i] for w in self.numbers]

    def _taken(self, i: int) -> np.ndarray:
        """:meth:`_column` ``i``, the windows' parts of it dropped as it is joined (one
        column's parts beside its copy at a time, not all four)."""
        got = self._column(i)
        for w in self.numbers:
            w[i] = got[:0]
        return got

    def resolved(self) -> tuple[pa.Array | int, list[np.ndarray], np.ndarray]:
        """:func:`resolve` of everything taken (the span ids, or n when they are the writer's
        "s1" to "s<n>": made when needed, :func:`as_ids`; the end records', the parents' and
        the afters' span indices), and each span's number of afters."""
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int32)
        if self.strings is None:
            n = _one_run(self._parts(0))
            if n is None:
                own = self._column(0)
                n = len(own) if np.array_equal(own, np.arange(1, len(own) + 1)) else None
            if n is not None:
                nums = [self._taken(i) for i in (1, 2, 3)]
                self.numbers = []  # taken once: the windows' arrays dropped
                return n, _numbered(n, nums), lengths
            self.strings = self.as_written()
        ids, *refs = self.strings
        return (*resolve(ids, *refs), lengths)  # type: ignore[arg-type]


def _one_run(owns: list[Any]) -> int | None:
    """n when the windows' ids ``owns`` are ranges making 1 to n, in order; else None."""
    at = 1
    for k in owns:
        if isinstance(k, range) and k.start == at:
            at = k.stop
        elif len(k):
            return None
    return at - 1


def writer_numbers(refs: list[str] | list[str | None]) -> np.ndarray | None:
    """k for each "s<k>" of ``refs`` (k >= 1, written as the writer writes it: no sign, no
    leading zero), 0 for a None; None when another string is there."""
    nones = _nones(refs)
    if nones:
        refs = list(refs)
        for i in nones:
            refs[i] = "s1"  # a stand-in, read as 0 below
    k = _numbers(refs, len(refs))  # type: ignore[arg-type]
    if k is not None and nones:
        k[nones] = 0
    return k


def _nones(refs: list[str] | list[str | None]) -> list[int]:
    """Where ``refs`` holds None: a scan in C per root (a trace has a few)."""
    if None not in refs:
        return []
    is_none = np.fromiter(map(operator.is_, refs, itertools.repeat(None)), np.bool_, len(refs))
    found: list[int] = np.flatnonzero(is_none).tolist()
    return found


def _numbers(refs: Iterable[str], m: int) -> np.ndarray | None:
    """k for each "s<k>" of the ``m`` strings ``refs``, read from their bytes joined: one "s"
    per item, at its start (an item holding another, or none, is not the writer's), then 1 to
    18 ASCII digits not starting with 0; the digits, the "s"s taken out, read as numbers."""
    b = np.frombuffer("".join(refs).encode(), np.uint8)
    is_s = b == _S
    at = np.flatnonzero(is_s)
    if len(at) != m or not m or at[0] != 0:
        return np.zeros(0, I64) if not m and not len(b) else None
    digits = b[~is_s]
    off = np.empty(m + 1, np.int32)
    off[:-1] = at - np.arange(m)  # where each item's digits start, the "s"s taken out
    off[-1] = len(digits)
    width = np.diff(off)
    if width.min() < 1 or width.max() > _WIDEST or (digits[off[:-1]] == _ZERO).any():
        return None
    if ((digits < _ZERO) | (digits > _NINE)).any():
        return None
    return parsed(digits, off)
