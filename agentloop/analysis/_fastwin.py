"""A window's typed records into arrays, for the cold builder: the records dropped window by window.

:mod:`agentloop.analysis._fastread` decodes a trace a window at a time into the Structs of
:mod:`agentloop.analysis._fastshape`; :class:`Starts` and :class:`Ends` take from each window's
Structs the values the columns are made of (:mod:`agentloop.analysis.fastcols`,
``_fastmodels``, ``_fastreport``), as arrays, and the Structs are dropped before the next
window is decoded: a million spans' Structs were ~0.75 GB held at once (the cold peak), and
each window's now take the pages the last one's left. A value the Struct may leave out or
null is kept with a sentinel the Structs' bounds cannot make (counts and instants are
``>= 0``: -1), or a code (:data:`UNSET`, :data:`NONE`), never judged here: the builder's checks
are made on the arrays of the rows they concern, as they were on the Structs.

An end record's model or tool values are taken when its span's start was a model or tool
span's: known from the window's ids while they are the writer's (``s1``, ``s2``, ... in start
order, :class:`~agentloop.analysis._fastids.Refs`); both kinds' values when the span is not
known where the record is read (ids not in that order, a span not started, or started before
the part of the file read: :mod:`agentloop.analysis._fastsplit`).
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np
import pyarrow as pa
from msgspec import UNSET

from agentloop.analysis import _fastshape as F
from agentloop.analysis.cands import index_type
from agentloop.analysis.columnar import release_heap

I64 = np.int64
NONE, UNSET_CODE = -1, -2  # a string code's None and missing key
BOTH = -2  # an end record's span kind not known here: both kinds' values are taken
_CODE = np.int8  # a span's kind or status: an index into F.KINDS, F.STATUSES
_KIND = {k: i for i, k in enumerate(F.KINDS)}
_STATUS = {k: i for i, k in enumerate(F.STATUSES)}
_MODEL, _TOOL, _STEP = _KIND["model"], _KIND["tool"], _KIND["step"]
_t, _kind, _status, _attrs = (operator.attrgetter(k) for k in ("t", "kind", "status", "attrs"))
_COUNTS = ("inp", "out", "rea", "cac", "wait_ns")  # a model call's, -1: missing
_INSTANTS = ("t_send", "t_first", "t_first_visible", "t_last", "t_end")  # -1: None
_TRIMMED = 1 << 20  # bytes of a column's parts from which the C heap is trimmed once joined


class Codes:
    """Strings (agents, tiers, tool names: a few distinct) as codes in order of first
    appearance; :data:`NONE` for None, :data:`UNSET_CODE` for a missing key."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {None: NONE, UNSET: UNSET_CODE}
        self.values: list[str] = []

    def of(self, got: list[Any]) -> np.ndarray:
        idx = self.index
        for v in dict.fromkeys(got):  # the distinct values, in order
            if v not in idx:
                idx[v] = len(self.values)
                self.values.append(v)
        return np.fromiter(map(idx.__getitem__, got), np.int32, len(got))


def text(values: list[str], code: int) -> str | None:
    """The string of a :class:`Codes` code (``values``: its ``values``; :data:`NONE`: None)."""
    return values[code] if code >= 0 else None


class _Parts:
    """Named arrays taken a window at a time, joined when asked."""

    def __init__(self) -> None:
        self.parts: dict[str, list[Any]] = {}

    def add(self, **cols: Any) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def joined(self) -> dict[str, Any]:
        """Each name's arrays joined, the parts dropped as they are (one column's copy at a
        time, not the whole table's)."""
        out = {}
        while self.parts:
            k, v = self.parts.popitem()
            out[k] = pa.concat_arrays(v) if isinstance(v[0], pa.Array) else np.concatenate(v)
            big = sum(a.nbytes for a in v) >= _TRIMMED
            del v
            if big:  # the parts' pages, freed on the C heap, back before the next copy
                release_heap()  # (a walk of the heap: not for a small trace's)
        return out


def _ints(values: list[Any], sentinel: int = -1) -> np.ndarray:
    """``values`` as int64, None and missing as ``sentinel``."""
    try:
        return np.fromiter(values, I64, len(values))
    except TypeError:  # a None or UNSET among them
        return np.fromiter(
            [sentinel if v is None or v is UNSET else v for v in values], I64, len(values)
        )


def narrow(values: np.ndarray) -> np.ndarray:
    """``values`` (int64) as int32 when every one fits (windows of both kinds join as int64):
    a million spans' steps, invocations and row numbers are 19 MB less while the builder
    holds them."""
    if values.size and (values.min() < -(2**31) or values.max() >= 2**31):
        return values
    return values.astype(np.int32)


def optional(values: np.ndarray, none: np.ndarray) -> list[Any]:
    """``values`` as a list, None where ``none``."""
    return [None if z else v for v, z in zip(values.tolist(), none.tolist(), strict=True)]


def _states(values: list[Any]) -> np.ndarray:
    """0: a value, 1: None, 2: missing, for each of ``values``."""
    got: np.ndarray = _is(values, None).astype(_CODE) + 2 * _is(values, UNSET).astype(_CODE)
    return got


def _get(field: str, items: list[Any]) -> list[Any]:
    """Each item's ``field``."""
    return list(map(operator.attrgetter(field), items))


def _is(items: list[Any], value: Any) -> np.ndarray:
    """Whether each item is ``value`` (None, UNSET)."""
    return np.fromiter(map(operator.is_, items, itertools.repeat(value)), np.bool_, len(items))


def _is_type(items: list[Any], cls: type) -> np.ndarray:
    """Whether each item's type is ``cls``."""
    return np.fromiter(
        map(operator.is_, map(type, items), itertools.repeat(cls)), np.bool_, len(items)
    )


def _floats(values: list[Any], none: np.ndarray) -> np.ndarray:
    """``values`` as float64, 0.0 where None (``none``)."""
    if none.any():
        values = [0.0 if z else v for v, z in zip(values, none.tolist(), strict=True)]
    return np.fromiter(values, np.float64, len(values))


class Starts:
    """The span_start records' columns: kind, name, instant; a step's or model call's start
    attributes (``has``: any; ``step`` and ``inv`` with their None, ``agent`` a code)."""

    def __init__(self) -> None:
        self.got = _Parts()
        self.agents = Codes()
        # tool spans' names, coded as read: whether each names one tool is asked of them
        # (fastcols._tools), and a million spans' names coded whole took 20-30 MB
        self.tool_names = Codes()
        # every start's kind so far, with room to grow (doubled when full): a window's end
        # records look their spans' kinds up in it, a thousand windows of a million spans
        # (joined again per window, the copies were 2% of the read)
        self._kinds = np.zeros(0, _CODE)
        self._known = 0

    def take(self, starts: list[F.SpanStart]) -> None:
        """Take a window's start records."""
        n = len(starts)
        kind = np.fromiter(map(_KIND.__getitem__, map(_kind, starts)), _CODE, n)
        rows = np.flatnonzero((kind == _STEP) | (kind == _MODEL)).tolist()
        attrs = list(map(_attrs, map(starts.__getitem__, rows)))
        has = np.zeros(n, np.bool_)
        has[rows] = ~_is(attrs, None)
        got = list(filter(None, attrs))  # a Struct is true
        at = np.asarray(rows, I64)[has[rows]] if rows else np.zeros(0, I64)
        step, inv = np.zeros(n, I64), np.zeros(n, I64)
        step_none, inv_none = np.ones(n, np.bool_), np.ones(n, np.bool_)
        agent = np.full(n, NONE, np.int32)
        steps, invs = _get("step", got), _get("inv", got)
        step[at], step_none[at] = _ints(steps, 0), _is(steps, None)
        inv[at], inv_none[at] = _ints(invs, 0), _is(invs, None)
        agent[at] = self.agents.of(_get("agent", got))
        names = _get("name", starts)
        tools = np.flatnonzero(kind == _TOOL)
        tool_name = np.full(n, NONE, np.int32)
        tool_name[tools] = self.tool_names.of(list(map(names.__getitem__, tools.tolist())))
        self.add_kinds(kind)
        self.got.add(
            t=np.fromiter(map(_t, starts), I64, n),
            name=pa.array(names, pa.string()),
            has=has,
            step=narrow(step),
            step_none=step_none,
            inv=narrow(inv),
            inv_none=inv_none,
            agent=agent,
            tool_name=tool_name,
        )

    def add_kinds(self, kind: np.ndarray) -> None:
        """``kind`` after the kinds taken so far."""
        need = self._known + len(kind)
        if need > len(self._kinds):
            grown = np.empty(max(need, 2 * len(self._kinds)), _CODE)
            grown[: self._known] = self._kinds[: self._known]
            self._kinds = grown
        self._kinds[self._known : need] = kind
        self._known = need

    def kinds_so_far(self) -> np.ndarray:
        """The kinds of the start records taken so far."""
        return self._kinds[: self._known]

    def columns(self) -> dict[str, Any]:
        """Every start record's values: ``kind``, ``t``, ``name`` (Arrow strings), ``has``
        (start attributes, taken for steps and model calls), ``step``, ``step_none``, ``inv``,
        ``inv_none``, ``agent`` (a code of ``agents``), ``tool_name`` (a tool span's name: a
        code of ``tool_names``)."""
        kind = self._kinds[: self._known].copy()  # not the room to grow
        self._kinds, self._known = np.zeros(0, _CODE), 0
        return {"kind": kind, **self.got.joined()}


class Ends:
    """The span_end records' columns: instant and status; a model call's values (``model``,
    one row per end record taken as a model span's, ``at`` its record) and a tool call's
    (``tool``, likewise); strings as codes (``tiers``, ``tools``)."""

    def __init__(self) -> None:
        self.got = _Parts()
        self.model = _Parts()
        self.flat = _Parts()  # the model rows' attempts
        self.tool = _Parts()
        self.tiers, self.tools = Codes(), Codes()
        self.taken = 0  # end records before the window at hand

    def take(self, ends: list[F.SpanEnd], kinds: np.ndarray | None) -> None:
        """Take a window's end records; ``kinds``: each one's span kind (:data:`BOTH`: not
        known here), None when none is known (both kinds' values are taken for every record)."""
        m = len(ends)
        self.got.add(
            t=np.fromiter(map(_t, ends), I64, m),
            status=np.fromiter(map(_STATUS.__getitem__, map(_status, ends)), _CODE, m),
        )
        every = np.arange(m)
        model = every if kinds is None else np.flatnonzero((kinds == _MODEL) | (kinds == BOTH))
        tool = every if kinds is None else np.flatnonzero((kinds == _TOOL) | (kinds == BOTH))
        self._models(ends, model)
        self._tools(ends, tool)
        self.taken += m

    def _models(self, ends: list[F.SpanEnd], rows: np.ndarray) -> None:
        attrs = list(map(_attrs, map(ends.__getitem__, rows.tolist())))
        got = list(filter(None, attrs))  # a Struct is true
        none = _is(attrs, None)
        k, at = len(got), ~none

        def col(values: Any, fill: Any, dtype: Any) -> np.ndarray:
            out = np.full(len(attrs), fill, dtype)
            out[at] = values
            return out

        cols = {f: col(_ints(_get(f, got)), -1, I64) for f in _COUNTS}
        steps = _get("step", got)
        timings = _get("timing", got)
        timed = _is_type(timings, F.Timing)
        tm = list(itertools.compress(timings, timed))
        for f in _INSTANTS:
            inst = np.full(k, -1, I64)
            inst[timed] = _ints(_get(f, tm))
            cols[f] = col(inst, -1, I64)
        bounds = _get("bound", got)
        bound_none = _is(bounds, None)
        self.model.add(
            at=narrow(rows + self.taken),
            none=none,
            step=col(_ints(steps, 0), 0, I64),
            step_state=col(_states(steps), 2, _CODE),
            timing_state=col(_states(timings), 2, _CODE),
            timed=col(timed, False, np.bool_),
            tier=col(self.tiers.of(_get("tier", got)), NONE, np.int32),
            output=col(_output_codes(_get("output", got)), 2, _CODE),
            unknown_unset=col(_is(_get("unknown", got), UNSET), True, np.bool_),
            trimmed_unset=col(_is(_get("trimmed", got), UNSET), True, np.bool_),
            bound=col(_floats(bounds, bound_none), 0.0, np.float64),
            bound_none=col(bound_none, True, np.bool_),
            late=col(np.fromiter(_get("late", got), np.bool_, k), False, np.bool_),
            **cols,
        )
        self._attempts(_get("attempts", got), at)

    def _attempts(self, attempts: list[Any], at: np.ndarray) -> None:
        """The model rows' attempts: each row's count (-1: the key missing, or no attributes)
        and the attempts flattened, in order."""
        count = np.full(len(at), -1, I64)
        unset = _is(attempts, UNSET)
        lists = list(itertools.compress(attempts, ~unset))
        count[np.flatnonzero(at)[~unset]] = np.fromiter(map(len, lists), I64, len(lists))
        flat = list(itertools.chain.from_iterable(lists))
        f = len(flat)
        self.model.add(attempts=count)
        self.flat.add(
            t_start=np.fromiter(_get("t_start", flat), I64, f),
            t_end=np.fromiter(_get("t_end", flat), I64, f),
            failed=~_is(_get("error", flat), None),
            wait=np.fromiter(_get("wait_ns", flat), I64, f),
        )

    def _tools(self, ends: list[F.SpanEnd], rows: np.ndarray) -> None:
        attrs = list(map(_attrs, map(ends.__getitem__, rows.tolist())))
        none = _is(attrs, None)
        got = list(filter(None, attrs))  # a Struct is true
        tool = np.full(len(attrs), UNSET_CODE, np.int32)
        tool[~none] = self.tools.of(_get("tool", got))
        output = np.full(len(attrs), 2, _CODE)
        output[~none] = _output_codes(_get("output", got))
        queued = np.zeros(len(attrs), I64)
        queued[~none] = np.fromiter(_get("queued_ns", got), I64, len(got))
        self.tool.add(
            at=narrow(rows + self.taken), none=none, tool=tool, output=output, queued=queued
        )

    def columns(self) -> tuple[dict[str, Any], Taken, Taken]:
        """The end records' columns (``t``, ``status``), the model rows' (the counts,
        instants and codes; their attempts flattened in row order) and the tool rows'
        (``tool``, ``output``, ``queued``)."""
        m = self.taken
        model = Taken(self.model.joined(), self.flat.joined(), self.tiers.values, m)
        tool = Taken(self.tool.joined(), {}, self.tools.values, m)
        return self.got.joined(), model, tool


class Taken:
    """The model or tool rows taken from the end records: ``cols`` (``at``: each row's end
    record, ``none``: it had no attributes), ``flat`` (a model row's attempts), ``codes`` (the
    strings of the tier or tool codes), ``row`` (each end record's row, -1: none taken)."""

    def __init__(self, cols: dict[str, Any], flat: dict[str, Any], codes: list[str], m: int):
        self.cols, self.flat, self.codes = cols, flat, codes
        self.row = np.full(m, -1, index_type(m))
        self.row[cols["at"]] = np.arange(len(cols["at"]))

    def rows(self, ends: np.ndarray, eid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the end records ``ends`` (a mask) in their spans' order, and their
        spans; NotClean when one was not taken (a guard: where an end record is read, its span's
        kind is known or both kinds' values are taken) or had no attributes (the reader types it
        as empty: attributes the writer always writes are missing)."""
        at = np.flatnonzero(ends)
        at = at[np.argsort(eid[at], kind="stable")]
        got = self.row[at]
        if (got < 0).any() or self.cols["none"][got].any():
            raise F.NotClean("a model or tool span without end attributes")
        return got, eid[at]


def _output_codes(outputs: list[Any]) -> np.ndarray:
    """0: a model's output object, 1: a tool's text, 2: missing (the Struct's only types)."""
    return np.fromiter(map(_OUTPUT.__getitem__, map(type, outputs)), _CODE, len(outputs))


_OUTPUT = {F.Output: 0, str: 1, type(UNSET): 2}
