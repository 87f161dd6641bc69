"""The cold builder's checks of the records' order, a chunk of items at a time.

For :func:`agentloop.analysis.fastcols._records` (and ``_graph``'s ``after`` owners): each
check over a million spans' arrays made whole took temporaries of 8-11 MB apiece (30 MB of the
cold build's peak); a chunk of :data:`_CHUNK` items at a time, a few hundred KB.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

I64 = np.int64

_CHUNK = 1 << 18  # items a check takes at a time (any_in_chunks)


def any_in_chunks(n: int, test: Callable[[int, int], np.ndarray]) -> bool:
    """Whether ``test(a, b)`` (a mask of items ``a`` to ``b``) holds anywhere in ``0..n``,
    asked a chunk at a time."""
    return any(bool(test(a, min(a + _CHUNK, n)).any()) for a in range(0, n, _CHUNK))


def ended_after_start(is_start: np.ndarray, eid: np.ndarray) -> bool:
    """Whether each end record (``eid``: their spans, in the file's order) comes after its
    span's start record (``is_start``: each record's kind, in the file's order): fewer spans
    started before it than its span's index."""
    started, done = 0, 0
    for a in range(0, len(is_start), _CHUNK):
        part = is_start[a : a + _CHUNK]
        seen = started + np.cumsum(part, dtype=I64)  # the spans started up to each record
        before = seen[~part]
        if (eid[done : done + len(before)] >= before).any():
            return False
        started, done = int(seen[-1]), done + len(before)
    return True


def unknown_after(after_off: np.ndarray, after_idx: np.ndarray, a: int, b: int) -> np.ndarray:
    """Whether each ``after`` entry of spans ``a`` to ``b`` names no span started before its
    own."""
    lo, hi = int(after_off[a]), int(after_off[b])
    own = np.repeat(np.arange(a, b), np.diff(after_off[a : b + 1]))
    idx = after_idx[lo:hi]
    got: np.ndarray = (idx < 0) | (idx >= own)
    return got


def owners(after_off: np.ndarray) -> np.ndarray:
    """The span each ``after`` entry belongs to (made when needed, not kept: 11 MB of a
    million spans')."""
    got: np.ndarray = np.repeat(np.arange(len(after_off) - 1), np.diff(after_off))
    return got
