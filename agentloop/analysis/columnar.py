"""A checked trace's spans as columns (numpy arrays): what the analysis reads, made once.

:func:`columns_of` takes a trace the checked reader loaded and its flat :class:`Graph`, and keeps
per span (index = recorded start order, as in the Graph) what every analysis needs: parent and
``after`` indices (already cleaned of unknown and forward ids, the notes kept in ``problems``),
kind, name, instants, status, the step label, the tool category and queue time, and each model
span's attribution (:mod:`agentloop.analysis.attribution`) and token counts. The arrays are the
in-memory form; :mod:`agentloop.analysis.store` keeps them as a Parquet file beside the trace,
and :mod:`agentloop.analysis.vector` analyses them without a Python object per span.

Nothing here re-checks a trace: the values come from the checked reader and the Graph builder,
so what the cache holds was checked once, and the same formulas made it.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import importlib
import mmap
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from agentloop.analysis.agents import step_text
from agentloop.analysis.flat import Graph
from agentloop.analysis.lateness import Lateness, of_trace
from agentloop.trace.reader import Trace

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
T = TypeVar("T")

# model span columns, in ModelParts order (tps and timed are kept apart: float and bool)
PART_COLUMNS = (
    "base_ns",
    "reasoning_ns",
    "decode_ns",
    "tail_ns",
    "wait_ns",
    "retry_ns",
    "overhead_ns",
    "input_tokens",
    "reasoning_tokens",
    "visible_tokens",
)

# every finished model call's usage, as :func:`agentloop.analysis.cost.breakdown` reads it
USAGE_COLUMNS = ("input_tokens", "cached_input_tokens", "reasoning_tokens", "output_tokens", "step")

# every model span's call (issue 23), in index order: codes into ``Columns.call_names`` (tier,
# agent, the cost's step label), the agent's invocation, and 1 when it has a ``usage`` row
CALL_COLUMNS = ("tier", "agent", "invocation", "label", "usage")
CALL_NAMES = ("tier", "agent", "label")


@dataclass(frozen=True, slots=True)
class Columns:
    """One trace's spans as parallel arrays (index = recorded start order) plus its header.

    ``header`` / ``end`` are the run header and end record as written; ``problems`` the
    reader's notes and the Graph builder's (unknown or forward ids); ``is_model`` marks the
    finished childless model spans the analysis re-times (the Graph's ``models``); ``parts``,
    ``output_tps``, ``timed`` and ``cached_tokens`` have a row for each of them, in index order
    (``parts`` their attribution and token counts in :data:`PART_COLUMNS` order).
    """

    header: dict[str, Any]
    end: dict[str, Any] | None
    problems: tuple[str, ...]
    ids: pa.Array  # strings; the string columns stay Arrow arrays (read a few when needed)
    kinds: pa.Array
    names: pa.Array
    statuses: pa.Array
    step_label: pa.Array  # a step span's label (its step attribute, else its name), else null
    tool_category: pa.Array  # a finished tool span's category (tool:<name>), else null
    parent: I64  # -1 for a root
    # span i's after indices are after_idx[after_off[i]:after_off[i + 1]]; int32 while they fit
    # (:func:`agentloop.analysis.cands.index_type`), as the cache holds them
    after_off: npt.NDArray[np.signedinteger[Any]]
    after_idx: I64
    t0: I64
    t1: I64  # spans in flight end at the trace's end instant
    in_flight: B
    queued_ns: I64  # tool spans: the recorded wait for max_parallel_tools
    is_model: B
    parts: I64  # shape (model spans, len(PART_COLUMNS))
    output_tps: F64
    timed: B
    cached_tokens: I64
    end_ns: int
    tools_by_name: bool  # every tool span name books one category (see vector.tally)
    usage: I64  # a row per model span with end attributes, in trace order: USAGE_COLUMNS
    lateness: Lateness  # the client's own lateness over the model calls (issue 28)
    unsplit: tuple[dict[str, Any], ...]  # imported calls not split (report.unsplit_calls)
    # what ``report`` reads besides (issue 27): a row per model span (CALL_COLUMNS) and the
    # names its codes index; the context trims (report.recorded_trims); the wall time's parts
    # outside the agent's (report._two_times)
    calls: I64
    call_names: Mapping[str, list[str]]  # a cache's: each list read when first asked for
    trims: tuple[dict[str, Any], ...]
    outside: dict[str, Any]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def complete(self) -> bool:
        return self.end is not None

    def drop_pages(self) -> None:
        """Let the kernel take back the pages of the cache file read so far. A mapped page
        counts in resident memory once read, until it is unmapped: a million spans' graph build
        reads 100 MB of the file, most of which the passes never read again. A page touched
        again is mapped again from the page cache (a minor fault, no read); nothing changes for
        columns built in memory. The cache's instants are views of the mapping itself
        (:func:`agentloop.analysis.store.from_table`): their base names it."""
        view = self.t0.base
        dontneed = getattr(mmap, "MADV_DONTNEED", None)  # none on Windows
        if (
            dontneed is not None
            and isinstance(view, memoryview)
            and isinstance(view.obj, mmap.mmap)
        ):
            view.obj.madvise(dontneed)


def map_big_blocks() -> None:
    """Have the C heap give every block from 8 MiB its own mapping, returned to the system as
    soon as it is freed (glibc's ``mallopt(M_MMAP_THRESHOLD)``; nothing where there is none).
    By default glibc raises that threshold as big blocks are freed (up to 32 MiB): past the
    first, a big trace's arrays come from a heap that keeps their pages once they are freed,
    and the next phase takes new ones. A mapping's pages are new each time, so each is a page
    fault: a warm ``whatif`` of a million spans peaked at 332 MB with the default, 303-305 MB
    from 8 MiB at the default's time, 298 MB from 1 MiB at 0.5-2 s more of system time
    (270,000 faults against 80,000). A process-wide choice: the analysis commands make it,
    not the library."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, 8 << 20)


def small_pages() -> None:
    """Have numpy stop advising transparent huge pages for its big arrays (its default from
    4 MiB: ``madvise(MADV_HUGEPAGE)``; nothing where numpy has no such switch). Where the kernel
    defragments on that advice, a 2 MiB page may stall on compaction as it is faulted in: a
    cold ``whatif`` of a million spans spent ~1 s more system time with it (9.41-9.67 s against
    8.33-8.63 s, three runs each taking turns), a warm one 2.40-3.15 s against 2.46-2.62 s
    (five each). A process-wide choice: the analysis commands make it, not the library."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, numpy 1.26
        try:
            switch = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if switch is not None:
            switch(False)
            return


def arrow_on_heap() -> None:
    """Have Arrow allocate from the C heap (its system pool) instead of the mimalloc it
    bundles, which kept a cold build's freed pages resident (53 MB of a million spans' after
    :func:`release_heap`); the C heap's big blocks are mappings of their own
    (:func:`map_big_blocks`) and its free pages go back when trimmed. A cold ``whatif`` of a
    million spans: 343-352 -> 320-332 MiB at the same time, three runs each taking turns; a
    warm one 266 -> 263 MiB (docs/performance.md). A process-wide choice: the analysis
    commands make it, not the library."""
    pa.set_memory_pool(pa.system_memory_pool())


def release_heap(arrow: bool = False) -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    where there is none): what numpy freed below :func:`map_big_blocks`' size stays on the
    heap for the next arrays, and after the last of them the rows and the JSON are Python
    objects, which live in arenas of their own (a warm ``whatif --json``: 338 -> 300 MB).
    ``arrow``: Arrow's memory pool's free memory too, which its allocator keeps for reuse
    (after a cold build, the windows' strings: 20-40 MB of a cold ``whatif``'s peak)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    if arrow:
        pa.default_memory_pool().release_unused()


def in_own_arena(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread of its own, waited for: glibc gives a new thread a heap (an
    arena) of its own, so what ``fn`` allocates and frees below :func:`map_big_blocks`' size
    leaves its holes there, not in the heap the caller's next arrays come from. A cold
    ``whatif`` of a million spans: the analysis after the build peaked at 343-347 MiB on the
    build's heap, 306-316 MiB with the build in a thread (docs/performance.md). Its exception,
    raised here."""
    got: list[Any] = []

    def run() -> None:
        try:
            got.append((True, fn(*args)))
        except BaseException as exc:  # the caller's to see
            got.append((False, exc))

    t = threading.Thread(target=run, name="agentloop-build", daemon=True)
    t.start()
    t.join()
    ok, value = got[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def frozen_rows(cls: type[T], **columns: list[Any]) -> tuple[T, ...]:
    """``tuple(map(cls, *columns))`` for a frozen slots dataclass without ``__post_init__``,
    at about 60% of the cost: its ``__init__`` sets each field through ``object.__setattr__``
    (0.3 s for a long run's 200,000 rows); here each field's slot is filled by its descriptor, a
    column at a time. ``columns``: every field, by name, a value per row."""
    slots: Mapping[str, Any] = vars(cls)
    n = len(next(iter(columns.values()), []))
    out = [object.__new__(cls) for _ in range(n)]
    for field, values in columns.items():
        collections.deque(map(slots[field].__set__, out, values), maxlen=0)
    return tuple(out)


def columns_of(g: Graph) -> Columns:
    """The columns of a Graph built from a checked trace (:func:`agentloop.analysis.graph.
    build_graph`); in-flight spans keep the Graph's end instant."""
    from agentloop.analysis.cands import index_type
    from agentloop.analysis.report import _two_times, unsplit_calls
    from agentloop.loop.context_window import recorded_trims

    trace, spans, n = g.trace, g.spans, len(g)
    after_len = np.fromiter(map(len, g.after), np.int64, n)
    after_off = np.zeros(n + 1, index_type(int(after_len.sum())))
    np.cumsum(after_len, out=after_off[1:])
    cats, by_name = _tool_categories(g)
    kinds = g.kinds
    return Columns(
        header=trace.header,
        end=trace.end,
        problems=(*trace.problems, *g.problems),
        ids=pa.array(g.ids, pa.string()),
        kinds=pa.array(kinds, pa.string()).dictionary_encode(),
        names=pa.array(g.names, pa.string()),
        statuses=pa.array([s.status for s in spans], pa.string()).dictionary_encode(),
        step_label=pa.array(
            [
                None if k != "step" else step_text(s.start_attrs, s.name)
                for s, k in zip(spans, kinds, strict=True)
            ],
            pa.string(),
        ),
        tool_category=pa.array(cats, pa.string()).dictionary_encode(),
        parent=np.array(g.parent, np.int64),
        after_off=after_off,
        after_idx=np.array([j for a in g.after for j in a], np.int64),
        t0=np.array(g.t0, np.int64),
        t1=np.array(g.t1, np.int64),
        in_flight=np.array(g.in_flight, np.bool_),
        queued_ns=np.array([0 if s.tool is None else s.tool.queued_ns for s in spans], np.int64),
        end_ns=g.end_ns,
        tools_by_name=by_name,
        usage=_usage(trace),
        lateness=of_trace(trace),
        unsplit=tuple(unsplit_calls(trace)),
        trims=tuple(recorded_trims(trace)),
        outside=_two_times(g),
        **_calls(g),
        **_model_columns(g),
    )


def _calls(g: Graph) -> dict[str, Any]:
    """``calls`` and ``call_names`` of a Graph's model spans (:func:`calls_of`)."""
    models = [s for s, k in zip(g.spans, g.kinds, strict=True) if k == "model"]
    return calls_of(
        g.trace,
        [s.start_attrs for s in models],
        [s.attrs for s in models],
        [s.model is not None for s in models],
    )


def calls_of(
    trace: Trace,
    starts: list[Mapping[str, Any]],
    ends: list[Mapping[str, Any]],
    usage: list[bool],
) -> dict[str, Any]:
    """``calls`` and ``call_names`` from every model span's start and end attributes and
    whether it has a ``usage`` row, in index order: its tier (:func:`agents.call_tier`), agent
    and invocation (:func:`agents.who`), cost step label (:func:`cost.step_label`), as
    :func:`cost.of_trace` and :func:`agents.usage` see it. The one owner of these rows for
    both builders (this module's and :mod:`agentloop.analysis.fastcols`)."""
    from agentloop.analysis.agents import call_tier, recorded_tiers, who
    from agentloop.analysis.cost import step_label

    tiers = recorded_tiers(trace)
    codes: dict[str, dict[str, int]] = {k: {} for k in CALL_NAMES}
    tc, ac, lc = (codes[k].setdefault for k in CALL_NAMES)
    rows = []
    for start, end, used in zip(starts, ends, usage, strict=True):
        w = who(start)
        tier, label = call_tier(trace, end, tiers), step_label(start)
        rows.append(
            (
                tc(tier, len(codes["tier"])),
                ac(w.agent, len(codes["agent"])),
                w.invocation,
                lc(label, len(codes["label"])),
                used,
            )
        )
    return {
        "calls": np.array(rows, np.int64).reshape(-1, len(CALL_COLUMNS)),
        "call_names": {k: list(v) for k, v in codes.items()},
    }


def _model_columns(g: Graph) -> dict[str, Any]:
    """The re-timed model spans' columns: ``is_model`` per span, and a row each (index order)
    of ``parts``, ``output_tps``, ``timed`` and ``cached_tokens``."""
    is_model = np.zeros(len(g), np.bool_)
    ms = list(g.models.values())  # in index order: the Graph adds them so
    is_model[np.fromiter(g.models, np.int64, len(ms))] = True
    return {
        "is_model": is_model,
        "parts": np.array([m[:10] for m in ms], np.int64).reshape(len(ms), len(PART_COLUMNS)),
        "output_tps": np.array([m.output_tps for m in ms], np.float64),
        "timed": np.array([m.timed for m in ms], np.bool_),
        "cached_tokens": np.array([m.cached_tokens for m in ms], np.int64),
    }


def _tool_categories(g: Graph) -> tuple[list[str | None], bool]:
    """Each finished tool span's category (None for other spans), and whether every tool span
    name books one category (see vector.tally)."""
    from agentloop.analysis.attribution import tool_category

    cats = [
        tool_category(s.name, s.tool) if k == "tool" and s.t1 is not None else None
        for s, k in zip(g.spans, g.kinds, strict=True)
    ]
    by_name: dict[str, str] = {}
    for nm, cat in zip(g.names, cats, strict=True):
        if cat is not None and by_name.setdefault(nm, cat) != cat:
            return cats, False
    return cats, True


def _usage(trace: Trace) -> I64:
    """A row per model span with end attributes, in trace order: :data:`USAGE_COLUMNS`."""
    return np.array(
        [
            (
                m.input_tokens,
                m.cached_input_tokens,
                m.reasoning_tokens,
                m.output_tokens,
                m.step or 0,
            )
            for m in (s.model for s in trace.of_kind("model"))
            if m is not None
        ],
        np.int64,
    ).reshape(-1, len(USAGE_COLUMNS))
