"""A trace's lines into arrays through one reused buffer, for the cold builder
(:mod:`agentloop.analysis.fastcols`), with the screen's checks of the lines.

The file is read in windows of :data:`WINDOW` bytes into one ``bytearray`` (``readinto``), each
window cut after its last newline, its lines decoded by msgspec from a ``memoryview`` of the
buffer (the strings are copied out, so the buffer is filled again for the next window); the
part line after the cut is moved to the buffer's front. Reading the whole file (``read_bytes``)
held its 394 MB (a million spans) beside the records and cost ~96,000 page faults on first
touch. No ``mmap``: a file truncated under a mapping is a SIGBUS, a crash. Each window's
records are taken as arrays before the next window is decoded, their ids as numbers by
:class:`~agentloop.analysis._fastids.Refs`, their values by :mod:`agentloop.analysis._fastwin`:
no window's Structs outlive it (a million spans' were ~0.75 GB held at once).

The checks are the whole file's, made window by window (a newline never sits inside a UTF-8
sequence, so a window cut after one splits none): UTF-8
throughout, no ``\\r``, every newline but a final one the writer's record boundary
``}\\n{"type":"`` (one inside a window is counted there; a window's last one is checked at the
seam, against the next window's first bytes: a blank line anywhere fails this), the header on
the first line, the end record only as the last line's.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from io import FileIO
from typing import Any

import numpy as np
import orjson

from agentloop.analysis import _fastshape as F
from agentloop.analysis._fastids import Refs
from agentloop.analysis._fastshape import NotClean
from agentloop.analysis._fastwin import BOTH, Ends, Starts
from agentloop.trace.fields import Where
from agentloop.trace.schema import EndRecord, RunHeader, parse_header, parse_record

# bytes read at a time (a line longer than this grows the buffer). Small, so that a window's
# Structs (~1.5 MB for 1 MiB of lines) are gathered while the CPU's cache still holds them
# and Python's allocator hands the next window the pages the last one freed: a worker's 172 MB
# part read in 2.6 s with 16 MiB windows (160,000 page faults), in 1.5-1.7 s with 1 MiB
# (43,000); 512 KiB and 2 MiB were no better
WINDOW = 1 << 20
_HEAD = b'{"type":"'  # how a record starts as the writer writes it
_BOUNDARY = b"}\n" + _HEAD  # between two records as the writer writes them
_NL = 0x0A


@dataclasses.dataclass
class Records:
    """A trace's records as :func:`read_records` hands them over: their values as arrays."""

    run: RunHeader
    end: EndRecord | None
    starts: Starts  # their ids and references in ``refs``
    ends: Ends
    is_start: np.ndarray  # each span record, in file order: a start or an end
    refs: Refs


class _Lines:
    """What the windows read so far add up to: the header, the span records' values (and their
    ids, taken out), the end record, the lines counted, and what the last window's final
    newline still needs of the next."""

    def __init__(self, path: Any, part: bool = False) -> None:
        self.path = path
        self.part = part  # a later part of the file (_fastsplit's): no header line
        self.run: RunHeader | None = None
        self.end: EndRecord | None = None
        self.starts = Starts()
        self.ends = Ends()
        self.flags: list[np.ndarray] = []
        self.refs = Refs(part)
        self.lines = 0  # newlines before the window at hand
        # whether the last window ended "}\n" (None: no window; a part starts after one)
        self.seam: bool | None = True if part else None

    def take(self, buf: bytearray, cut: int) -> None:
        """Check and decode ``buf[:cut]``, whole lines (the last window: the file's rest)."""
        if cut == 0:
            return  # the file ended with the last window: its final newline was the file's
        if self.seam is not None and not (self.seam and buf.startswith(_HEAD, 0, cut)):
            raise NotClean("a line boundary not the writer's")
        if np.frombuffer(buf, np.uint8, cut).max() >= 0x80:
            with memoryview(buf) as mv:
                str(mv[:cut], "utf-8")  # UnicodeDecodeError (a ValueError) if not UTF-8
        stop = cut - (buf[cut - 1] == _NL)
        nl = buf.count(b"\n", 0, stop)
        if buf.find(b"\r", 0, cut) >= 0 or buf.count(_BOUNDARY, 0, stop) != nl:
            raise NotClean("not one record a line in the writer's shape")
        self._split(self._decode(buf, cut, stop, nl))
        self.seam = buf.endswith(b"}\n", 0, cut)
        self.lines += nl + (stop < cut)

    def _decode(self, buf: bytearray, cut: int, stop: int, nl: int) -> list[Any]:
        """The header (on the first window) and the span records of ``buf[:stop]`` (``stop``:
        ``cut`` less a final newline; ``nl``: the newlines before it), the end record kept
        when it is their last."""
        start = 0
        with memoryview(buf) as mv:
            if self.run is None and not self.part:
                start = buf.find(b"\n", 0, cut) + 1  # the window may end with it
                if start == 0:
                    raise NotClean("no line after the header")
                try:
                    self.run = parse_header(orjson.loads(mv[: start - 1]), self.path)
                except (TypeError, KeyError) as exc:  # the reader's to report (or crash on)
                    raise NotClean("header") from exc
            got = F.decoder().decode_lines(mv[start:stop]) if start < stop else []
            if got and self.end is not None:
                raise NotClean("a record after the end record")
            if got and type(got[-1]) is F.RunEnd:  # the end record, if this is the last line
                text = mv[buf.rfind(b"\n", 0, stop) + 1 : stop]
                rec = parse_record(orjson.loads(text), Where(self.path, self.lines + nl + 1))
                if type(rec) is not EndRecord:
                    raise NotClean("end")
                self.end = rec
                got.pop()
        return got

    def _split(self, got: list[Any]) -> None:
        """A window's span records into the starts and the ends, their ids and their values
        taken as arrays (:mod:`agentloop.analysis._fastids`, :mod:`agentloop.analysis.
        _fastwin`); the Structs then dropped."""
        flags = list(map(F.SpanStart.__instancecheck__, got))
        starts = list(itertools.compress(got, flags))
        ends = list(itertools.compress(got, map(operator.not_, flags)))
        if not set(map(type, ends)) <= {F.SpanEnd}:
            raise NotClean("an end record before the last line")
        spans = self.refs.take(starts, ends)
        self.flags.append(np.array(flags, np.bool_))
        self.starts.take(starts)
        kinds = None
        if spans is not None:  # the end records' span kinds, where known
            known = self.starts.kinds_so_far()
            kinds = np.full(len(spans), BOTH, np.int8)  # not started here (yet, or before the
            ok = (spans >= 0) & (spans < len(known))  # part: _fastsplit's), or not in order
            kinds[ok] = known[spans[ok]]
        self.ends.take(ends, kinds)


def read_records(f: FileIO, path: Any, window: int = WINDOW) -> Records:
    """The header (checked), the end record (checked) and the span records (typed) of the
    trace open in ``f`` (read from where it stands), ``window`` bytes at a time; NotClean (or
    msgspec's, orjson's, the header's error) when its lines are not the writer's."""
    return records_of(read_lines(f, _Lines(path), window))


def read_lines(f: FileIO, out: _Lines, window: int, size: int | None = None) -> _Lines:
    """``size`` bytes of ``f`` (None: to its end) from where it stands, read into ``out``
    ``window`` bytes at a time."""
    buf, filled, left = bytearray(window), 0, size
    eof = False
    while not eof:
        filled, left = _fill(f, buf, filled, left)
        eof = filled < len(buf)
        cut = filled if eof else buf.rfind(b"\n", 0, filled) + 1
        if not cut and not eof:  # a line longer than the buffer
            buf = buf + bytearray(len(buf))
            continue
        out.take(buf, cut)
        buf[: filled - cut] = buf[cut:filled]  # the part line, to the front
        filled -= cut
    return out


def records_of(out: _Lines) -> Records:
    """What ``out`` read of a whole trace, handed over."""
    if out.run is None:
        raise NotClean("no header line")
    flags = np.concatenate(out.flags) if out.flags else np.zeros(0, np.bool_)
    return Records(out.run, out.end, out.starts, out.ends, flags, out.refs)


def _fill(f: FileIO, buf: bytearray, filled: int, left: int | None) -> tuple[int, int | None]:
    """``buf`` filled from ``f`` after its first ``filled`` bytes, ``left`` bytes at most (None:
    to the file's end): how far, and how many bytes are left to read. Short of the buffer's
    length: the file or the bytes to read ended."""
    with memoryview(buf) as mv:
        while filled < len(buf) and left != 0:
            want = len(buf) - filled if left is None else min(len(buf) - filled, left)
            got = f.readinto(mv[filled : filled + want])
            if not got:
                break
            filled += got
            left = None if left is None else left - got
    return filled, left
