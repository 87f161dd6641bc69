"""A big trace's later half read by a second process while this one reads the first: the cold builder's two cores.

For :mod:`agentloop.analysis.fastcols`. The file is cut at a record boundary past its middle
(the writer's ``}\\n{"type":"``, :data:`HEAD_START` past it); a worker (``python -c``, this
package's own interpreter and path, a helper's environment, nothing read from its command line
but the path, the offset, the window and its parent's pid, with which it dies:
:mod:`agentloop.helper_procs`) reads from there to the end as
:func:`agentloop.analysis._fastread.read_lines` reads a file, a part with no header line, and
hands its values back through a pipe (arrays, no Structs, sent a batch at a time and dropped
as sent: :func:`_send`);
this process reads up to the cut meanwhile and appends the worker's values to its own, their
string codes (agents, tiers, tool names) renumbered as its own. What crosses the cut is checked
as it is between two windows: the first part ends ``}\\n``, the second starts ``{"type":"``;
the end records of the later part whose spans it does not know (started in the first part)
take both kinds' values (:data:`agentloop.analysis._fastwin.BOTH`); the ids are joined as the
writer's numbers, or as strings where a part kept them so. A worker that fails or is not
there: the file is read whole in this process, as before (the same values, one core): the split
is a speed-up, never a second reader. A screen's refusal in either part (NotClean) is the
file's.

Measured: a second process pays with a core free (``tests/benchmarks/bench_split_decode.py``:
0.57x of one process's decode), not on a busy machine (0.61-1.08x at load 2.5-5.7); a cold
``whatif`` of a million spans 8.9-9.8 -> 6.5-6.8 s (docs/performance.md).
"""

from __future__ import annotations

import gc
import os
import pickle
import re
import subprocess
import sys
from io import BytesIO, FileIO
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from agentloop.analysis import _fastread
from agentloop.analysis._fastread import _BOUNDARY, Records, _Lines
from agentloop.analysis._fastshape import NotClean
from agentloop.analysis._fastwin import Codes, narrow
from agentloop.analysis.columnar import arrow_on_heap, release_heap
from agentloop.errors import TraceFileError
from agentloop.helper_procs import die_with, helper_env

SPLIT_BYTES = 128 << 20  # a trace from this size is read in two processes
# the bytes this process reads while the worker starts (its interpreter and imports, ~0.3 s)
# and hands its arrays back (the pickle, ~0.3 s): the cut is that much past the middle. A
# million spans (394 MB) cut in the middle: this process waited 0.84-0.89 s for the worker
HEAD_START = 48 << 20
_LOOK = 1 << 20  # bytes searched for a record boundary past the point chosen
_WORKER = "from agentloop.analysis._fastsplit import serve; serve()"
_BATCH = 4 << 20  # bytes of arrays the worker sends at a time, then drops


def read_records(f: FileIO, path: Path, window: int, split_bytes: int = SPLIT_BYTES) -> Records:
    """:func:`agentloop.analysis._fastread.read_records` of the trace open in ``f`` (at its
    start), its later half read by a worker when it is ``split_bytes`` or more."""
    size = os.fstat(f.fileno()).st_size
    cut = _cut(f, size) if size >= split_bytes and _python() else None
    if cut is None:
        return _fastread.read_records(f, path, window)
    worker = _start(path, cut, window)
    try:
        f.seek(0)
        first = _fastread.read_lines(f, _Lines(path), window, cut)
        later = _result(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()
        assert worker.stdout is not None
        worker.stdout.close()
    if later is None:  # the worker failed: the file read here
        f.seek(0)
        return _fastread.read_records(f, path, window)
    _joined(first, later)
    return _fastread.records_of(first)


def _python() -> str | None:
    """This interpreter's program when it is a Python's (``python3.11``, ``pypy3``): embedded
    in another program (a server's), ``sys.executable`` is that program, not one to run."""
    exe = sys.executable
    return exe if re.fullmatch(r"(python|pypy)[\d.]*", Path(exe).name) else None


def _cut(f: FileIO, size: int) -> int | None:
    """Where the record after a writer's record boundary :data:`HEAD_START` past the middle
    starts (the middle, for a file less than twice that), if one is found within
    :data:`_LOOK` bytes of it."""
    mid = (size + HEAD_START) // 2 if size >= 2 * HEAD_START else size // 2
    f.seek(mid)
    near = f.read(_LOOK)
    at = near.find(_BOUNDARY)
    f.seek(0)
    return None if at < 0 else mid + at + 2


def _start(path: Path, cut: int, window: int) -> subprocess.Popen[bytes]:
    """The worker reading ``path`` from ``cut``: this interpreter, this agentloop, a helper's
    environment (:func:`agentloop.helper_procs.helper_env`: no secret in it; a tool's would
    cost this process 0.25 s of imports before it reads)."""
    argv = [os.fsdecode(path), str(cut), str(window), str(os.getpid())]
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, *argv],  # _python
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=helper_env(),
    )


def _result(worker: subprocess.Popen[bytes]) -> _Lines | None:
    """What the worker read, or None when it failed; NotClean when its part is not clean."""
    assert worker.stdout is not None
    try:
        verdict, later = _receive(worker.stdout)
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError):
        return None
    if worker.wait() != 0:
        return None
    if verdict == "not clean":
        raise NotClean("the later part of a split trace")
    return later if isinstance(later, _Lines) else None


def _receive(stream: IO[bytes]) -> Any:
    """What :func:`_send` sent: its arrays a batch at a time (read as they come: no copy of
    the bytes), then the rest, which names them by their places."""
    arrays: list[Any] = []
    for _ in range(pickle.load(stream)):
        arrays.extend(pickle.load(stream))
    rest = pickle.Unpickler(stream)
    rest.persistent_load = arrays.__getitem__  # type: ignore[method-assign]
    return rest.load()


def _send(stream: IO[bytes], box: list[Any]) -> None:
    """``box``'s one value pickled to ``stream`` with its arrays apart, a batch of
    :data:`_BATCH` bytes at a time, each batch's dropped and the C heap trimmed once it is
    written: the part's values move from this process to the parent as they are sent, not
    held in both (with the pickle's bytes beside them, the two processes together held 2.4x a
    million spans' cache at the hand-over). ``box`` is emptied: the arrays are this
    function's alone to drop."""
    arrays: list[Any] = []
    place: dict[int, int] = {}

    def apart(obj: Any) -> int | None:
        if not isinstance(obj, (np.ndarray, pa.Array)):
            return None
        if id(obj) not in place:
            place[id(obj)] = len(arrays)
            arrays.append(obj)
        return place[id(obj)]

    rest = BytesIO()
    pickler = pickle.Pickler(rest, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.persistent_id = apart  # type: ignore[method-assign]
    pickler.dump(box.pop())
    pickler.clear_memo()  # the memo held the containers, so the arrays
    place.clear()
    batches = _batches(arrays)
    pickle.dump(len(batches), stream)
    for lo, hi in batches:
        pickle.dump(arrays[lo:hi], stream, protocol=pickle.HIGHEST_PROTOCOL)
        arrays[lo:hi] = [None] * (hi - lo)
        release_heap()
    stream.write(rest.getbuffer())
    stream.flush()


def _batches(arrays: list[Any]) -> list[tuple[int, int]]:
    """``arrays`` cut into runs of about :data:`_BATCH` bytes: (first, past the last)."""
    out, lo, size = [], 0, 0
    for i, a in enumerate(arrays):
        size += a.nbytes
        if size >= _BATCH:
            out.append((lo, i + 1))
            lo, size = i + 1, 0
    if lo < len(arrays):
        out.append((lo, len(arrays)))
    return out


def serve() -> None:
    """The worker: read the part from ``sys.argv``' offset to the end, pickle it to stdout;
    killed with its parent (a SIGKILLed analysis would leave it reading on for no one). The
    cyclic collector off, as the parent's read runs (:func:`agentloop.analysis.graph.
    gc_paused`): a window's records make no cycles, and its collections were 15% of the
    worker's time (2.95 -> 2.5 s for 172 MB)."""
    die_with(int(sys.argv[4]))
    gc.disable()
    arrow_on_heap()  # the windows' strings on the C heap, given back as they are sent
    path, cut, window = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    import msgspec

    box: list[Any] = []
    try:
        with path.open("rb", buffering=0) as f:
            f.seek(cut)
            box.append(("ok", _fastread.read_lines(f, _Lines(path, part=True), window)))
    except (NotClean, msgspec.MsgspecError, TraceFileError, ValueError) as exc:  # as fast_columns
        box.append(("not clean", type(exc).__name__))
    _send(sys.stdout.buffer, box)


def _joined(first: _Lines, later: _Lines) -> None:
    """``later`` appended to ``first``; NotClean when what crosses the cut is not the writer's.
    Ids are joined as numbers while both parts kept them so, else as the strings they were."""
    if first.end is not None or not first.seam:
        raise NotClean("an end record, or no record boundary, before the cut")
    a, b = first.refs, later.refs
    if a.strings is None and b.strings is None:
        a.numbers += b.numbers
    else:
        mine = a.strings if a.strings is not None else a.as_written()
        theirs = b.strings if b.strings is not None else b.as_written()
        for have, new in zip(mine, theirs, strict=True):
            have.extend(new)
        a.strings = mine
    a.lengths += b.lengths
    first.flags += later.flags
    first.end = later.end
    first.starts.add_kinds(later.starts.kinds_so_far())
    _append(
        first.starts.got.parts,
        later.starts.got.parts,
        {
            "agent": (first.starts.agents, later.starts.agents),
            "tool_name": (first.starts.tool_names, later.starts.tool_names),
        },
    )
    e, f = first.ends, later.ends
    _append(e.got.parts, f.got.parts, {})
    _append(e.flat.parts, f.flat.parts, {})
    _append(e.model.parts, f.model.parts, {"tier": (e.tiers, f.tiers)}, e.taken)
    _append(e.tool.parts, f.tool.parts, {"tool": (e.tools, f.tools)}, e.taken)
    e.taken += f.taken


def _append(
    mine: dict[str, list[Any]],
    theirs: dict[str, list[Any]],
    codes: dict[str, tuple[Codes, Codes]],
    taken: int = 0,
) -> None:
    """``theirs`` parts after ``mine``: their codes renumbered as ``codes`` says (name: mine,
    theirs), their end records' positions (``at``) after ``taken``."""
    for name, parts in theirs.items():
        if name in codes:
            own, other = codes[name]
            table = own.of(other.values)
            parts = [_renumbered(p, table) for p in parts]
        elif name == "at":
            parts = [narrow(p.astype(np.int64) + taken) for p in parts]
        mine.setdefault(name, []).extend(parts)


def _renumbered(codes: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``codes`` through ``table`` (a code's new code), the sentinels (< 0) kept."""
    out = codes.copy()
    pos = codes >= 0
    out[pos] = table[codes[pos]]
    return out
