"""A report's two long parts, its step rows and its critical path, as rows and as columns.

:class:`StepRow` is one step of :class:`agentloop.analysis.report.Report`; :class:`StepColumns`
the same rows a column each, as the loops' rows give them (:meth:`StepColumns.of_rows`) or a
trace's arrays do (:func:`agentloop.analysis.vreport.step_columns`). :func:`steps_json` and
:func:`path_json` write both as the report's JSON rows (a long run has 200,000 steps and a
million path segments: a whole column goes through one array operation where it can).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step: its model time split, its tools, tokens, and the run time up to its end."""

    step: str
    start_ns: int
    duration_ns: int
    model: dict[str, int]  # base, reasoning, decode, other (tail+wait+retry+overhead)
    tools: tuple[tuple[str, int], ...]
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cumulative_ns: int  # run time at the step's end (from the run span's start)
    in_flight: bool
    cached_tokens: int = 0  # of input_tokens, served from the server's prompt cache


class StepColumns(NamedTuple):
    """The step rows as columns, a value per step (ints and bools as a list or a numpy
    array), each step's tools flat (``tool_off``: step k's are ``tool_off[k]:tool_off[k + 1]``):
    what :func:`steps_json` writes, made from the loops' rows or from a trace's arrays."""

    step: Any  # a list of str, or an Arrow string array
    start_ns: Any
    duration_ns: Any
    base: Any
    reasoning: Any
    decode: Any
    other: Any
    tool_names: Any  # a list of str, or an Arrow string array
    tool_ns: Any
    tool_off: Any
    input_tokens: Any
    output_tokens: Any
    reasoning_tokens: Any
    cumulative_ns: Any
    in_flight: Any
    cached_tokens: Any

    @classmethod
    def of_rows(cls, rows: Sequence[StepRow]) -> StepColumns:
        tools = [t for s in rows for t in s.tools]
        return cls(
            [s.step for s in rows],
            [s.start_ns for s in rows],
            [s.duration_ns for s in rows],
            [s.model["base"] for s in rows],
            [s.model["reasoning"] for s in rows],
            [s.model["decode"] for s in rows],
            [s.model["other"] for s in rows],
            [n for n, _ in tools],
            [v for _, v in tools],
            [0, *itertools.accumulate(len(s.tools) for s in rows)],
            [s.input_tokens for s in rows],
            [s.output_tokens for s in rows],
            [s.reasoning_tokens for s in rows],
            [s.cumulative_ns for s in rows],
            [s.in_flight for s in rows],
            [s.cached_tokens for s in rows],
        )

    def rows(self, a: int = 0, b: int | None = None) -> tuple[StepRow, ...]:
        """The :class:`StepRow` of each step, or of steps ``a`` to ``b`` (a slice's bounds)."""
        from agentloop.analysis.columnar import frozen_rows

        a, b, _ = slice(a, b).indices(len(self.step))
        b = max(a, b)
        off = _ints(self.tool_off[a : b + 1])
        t0, t1 = (off[0], off[-1]) if len(off) else (0, 0)
        names, ns = _texts(self.tool_names[t0:t1]), _ints(self.tool_ns[t0:t1])
        base, reasoning, decode, other = (
            _ints(c[a:b]) for c in (self.base, self.reasoning, self.decode, self.other)
        )
        return frozen_rows(
            StepRow,
            step=_texts(self.step[a:b]),
            start_ns=_ints(self.start_ns[a:b]),
            duration_ns=_ints(self.duration_ns[a:b]),
            model=[
                {"base": w, "reasoning": x, "decode": y, "other": z}
                for w, x, y, z in zip(base, reasoning, decode, other, strict=True)
            ],
            tools=[
                tuple(zip(names[i - t0 : j - t0], ns[i - t0 : j - t0], strict=True))
                for i, j in itertools.pairwise(off)
            ],
            input_tokens=_ints(self.input_tokens[a:b]),
            output_tokens=_ints(self.output_tokens[a:b]),
            reasoning_tokens=_ints(self.reasoning_tokens[a:b]),
            cumulative_ns=_ints(self.cumulative_ns[a:b]),
            in_flight=_ints(self.in_flight[a:b]),
            cached_tokens=_ints(self.cached_tokens[a:b]),
        )


class StepRowsView(Sequence[StepRow]):
    """The rows of a :class:`StepColumns`, each made when asked for: the text report prints
    about 40 of a long run's 200,000 steps (all of them as objects: 0.8 s and most of 1 GB)."""

    __slots__ = ("cols",)

    def __init__(self, cols: StepColumns) -> None:
        self.cols = cols

    def __len__(self) -> int:
        return len(self.cols.step)

    @overload
    def __getitem__(self, i: int) -> StepRow: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[StepRow, ...]: ...
    def __getitem__(self, i: int | slice) -> StepRow | tuple[StepRow, ...]:
        if isinstance(i, slice):
            if i.step not in (None, 1):
                return self.cols.rows()[i]
            return self.cols.rows(*i.indices(len(self))[:2])
        k = i + len(self) if i < 0 else i
        if not 0 <= k < len(self):
            raise IndexError(i)
        return self.cols.rows(k, k + 1)[0]

    def labels(self) -> list[str]:
        """Each step's label, without making its row."""
        return _texts(self.cols.step)


def step_labels(steps: Sequence[StepRow]) -> Iterable[str]:
    """Each step's label (a view's without making its rows)."""
    return steps.labels() if isinstance(steps, StepRowsView) else (s.step for s in steps)


@dataclass(frozen=True, slots=True)
class Picked:
    """A text column kept as where its values come from: row k is ``text`` where ``where[k]``,
    else ``col[at[k]]`` (a dictionary column's as a string; an empty column's null). Made for
    the rows asked for, or a slice at a time as they are written: a long run's path segments'
    three texts made whole were 40 MB of Arrow strings."""

    col: Any  # pa.Array
    at: Any  # an integer array, an index into col per row
    where: Any  # a bool array
    text: str

    def __len__(self) -> int:
        return len(self.at)

    def take(self, idx: Any) -> Any:
        """Rows ``idx`` (integers, or an Arrow array of them) as an Arrow string array."""
        import numpy as np

        i = np.asarray(idx, np.int64)
        return self._made(self.at[i], self.where[i])

    def slice(self, a: int, n: int) -> Any:
        """Rows ``a .. a + n`` as an Arrow string array."""
        return self._made(self.at[a : a + n], self.where[a : a + n])

    def whole(self) -> Any:
        return self._made(self.at, self.where)

    def _made(self, at: Any, where: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        col = self.col
        got = col.take(pa.array(at, pa.int64())) if len(col) else pa.nulls(len(at), pa.string())
        if isinstance(got, pa.DictionaryArray):
            got = got.cast(pa.string())
        return pc.if_else(pa.array(where, pa.bool_()), self.text, got)


class PathColumns(NamedTuple):
    """The report's ``path`` as columns (:func:`path_json`; made by
    :func:`agentloop.analysis.vreport.path_columns`):
    texts picked from the trace's columns as they are asked for (a million Python strings
    cost 150 MB) and the ns."""

    step: Picked
    kind: Picked
    name: Picked
    ns: Any  # int64, a value per segment

    def rows(self) -> tuple[tuple[str, str, str, int], ...]:
        """The report's ``path``: a tuple per segment."""
        cols = (self.step, self.kind, self.name)
        texts = [c.whole().to_numpy(zero_copy_only=False).tolist() for c in cols]
        return tuple(zip(*texts, self.ns.tolist(), strict=True))


class PathRowsView(Sequence[tuple[str, str, str, int]]):
    """The critical path's segments of :class:`PathColumns`, each
    made when asked for (a long run's million segments, of which the text lists 60)."""

    __slots__ = ("cols",)

    def __init__(self, cols: PathColumns) -> None:
        self.cols = cols

    def __len__(self) -> int:
        return len(self.cols.ns)

    @overload
    def __getitem__(self, i: int) -> tuple[str, str, str, int]: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[tuple[str, str, str, int], ...]: ...
    def __getitem__(
        self, i: int | slice
    ) -> tuple[str, str, str, int] | tuple[tuple[str, str, str, int], ...]:
        idx = range(len(self))[i]
        if isinstance(idx, int):
            return self._at([idx])[0]
        return self._at(list(idx))

    def _at(self, idx: Sequence[int]) -> tuple[tuple[str, str, str, int], ...]:
        import pyarrow as pa

        c, at = self.cols, pa.array(idx, pa.int64())
        texts = [col.take(at).to_pylist() for col in (c.step, c.kind, c.name)]
        return tuple(zip(*texts, c.ns[list(idx)].tolist(), strict=True))

    def listed(self, min_gap_ns: int, limit: int) -> tuple[int, list[tuple[str, str, str, int]]]:
        """How many segments are not gaps under ``min_gap_ns``, and the first ``limit``."""
        import numpy as np
        import pyarrow.compute as pc

        kind = self.cols.kind.whole()
        gap = np.asarray(pc.equal(kind, "gap").to_numpy(zero_copy_only=False), bool)
        keep = np.flatnonzero(~gap | (self.cols.ns >= min_gap_ns))
        return len(keep), list(self._at(keep[:limit].tolist()))


def listed_path(
    path: Sequence[tuple[str, str, str, int]], min_gap_ns: int, limit: int
) -> tuple[int, list[tuple[str, str, str, int]]]:
    """How many path segments are not gaps under ``min_gap_ns``, and the first ``limit``."""
    if isinstance(path, PathRowsView):
        return path.listed(min_gap_ns, limit)
    listed = [p for p in path if p[1] != "gap" or p[3] >= min_gap_ns]
    return len(listed), listed[:limit]


def _ints(col: Any) -> list[Any]:
    """A column of ints or bools (a list or a numpy array) as a list of Python values."""
    return col.tolist() if hasattr(col, "tolist") else list(col)


def _texts(col: Any) -> list[Any]:
    """A column of strings (a list or an Arrow array) as a list of Python values."""
    return col.to_pylist() if hasattr(col, "to_pylist") else list(col)


def _seconds(ns: Any) -> list[float]:
    """ns as seconds (``ns / 1e9`` each: numpy divides as Python does), in one array pass."""
    import numpy as np

    return (np.asarray(ns, np.int64) / 1e9).tolist()  # type: ignore[no-any-return]


def steps_json(sc: StepColumns) -> list[dict[str, Any]]:
    """The report's ``steps`` as JSON rows; times in seconds."""
    names, secs_ = _texts(sc.tool_names), _seconds(sc.tool_ns)
    tools = [
        [{"name": n, "seconds": v} for n, v in zip(names[a:b], secs_[a:b], strict=True)]
        for a, b in itertools.pairwise(_ints(sc.tool_off))
    ]
    model = [
        {"base": a, "reasoning": b, "decode": c, "other": d}
        for a, b, c, d in zip(
            *map(_seconds, (sc.base, sc.reasoning, sc.decode, sc.other)), strict=True
        )
    ]
    return [
        {
            "step": s,
            "start_s": t0,
            "duration_s": dur,
            "model_s": m,
            "tools": tl,
            "input_tokens": i,
            "output_tokens": o,
            "reasoning_tokens": rs,
            "cached_tokens": ca,
            "cumulative_s": cu,
            "in_flight": fl,
        }
        for s, t0, dur, m, tl, i, o, rs, ca, cu, fl in zip(
            _texts(sc.step),
            _seconds(sc.start_ns),
            _seconds(sc.duration_ns),
            model,
            tools,
            _ints(sc.input_tokens),
            _ints(sc.output_tokens),
            _ints(sc.reasoning_tokens),
            _ints(sc.cached_tokens),
            _seconds(sc.cumulative_ns),
            _ints(sc.in_flight),
            strict=True,
        )
    ]


def path_json(
    steps: Sequence[str], kinds: Sequence[str], names: Sequence[str], ns: Any
) -> list[dict[str, Any]]:
    """The report's ``critical_path`` as JSON rows, a column each (``ns`` in seconds)."""
    return [
        {"step": s, "kind": k, "name": n, "seconds": v}
        for s, k, n, v in zip(steps, kinds, names, _seconds(ns), strict=True)
    ]
