"""The fast cold builder's report rows: each model call's tier, agent and step; time outside the agent.

For :mod:`agentloop.analysis.fastcols`: the same values as :func:`agentloop.analysis.columnar.
columns_of` gives ``calls``, ``call_names`` and ``outside``, from the values the builder took
of the records (:mod:`agentloop.analysis._fastwin`). The call rows are made by their one owner,
:func:`agentloop.analysis.columnar.calls_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from agentloop.analysis import _fastshape as F
from agentloop.analysis._fasttext import around, decimal, encoded
from agentloop.analysis._fastwin import NONE, Taken, optional, text
from agentloop.analysis.cands import index_type
from agentloop.analysis.columnar import calls_of
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace

I64 = np.int64


def calls(
    trace: Trace,
    st: dict[str, Any],
    agents: list[str],
    model: Taken,
    r: dict[str, Any],
    keep: np.ndarray,
    is_model: np.ndarray,
) -> dict[str, Any]:
    """Each kept model span's call row (:func:`agentloop.analysis.columnar.calls_of`, the one
    owner), from the start values the builder took (``st``, :class:`~agentloop.analysis.
    _fastwin.Starts`: the agent, invocation and step it started with) and the tier it ended on
    (``model``); a finished call has a usage row.

    calls_of is asked once per distinct (agent, invocation, tier, finished, numbered), in order
    of first appearance, with a mark for the step number in the label, filled in per call (a
    call of calls_of per call: 0.74 s for 200,000 calls, load ~2.5); the labels' codes are
    then given in order of first appearance, as calls_of gives them."""
    rows = np.flatnonzero(is_model)
    if not keep.all():
        rows = np.flatnonzero(keep)[rows]
    end_of = np.full(len(keep), -1, index_type(len(keep)))  # (int64: 16 MB more at the peak)
    end_of[r["eid"]] = np.arange(len(r["eid"]), dtype=end_of.dtype)
    ended = end_of[rows]
    used = ended >= 0
    mrow = np.full(len(rows), -1, I64)
    mrow[used] = model.row[ended[used]]
    tier = np.full(len(rows), NONE, np.int32)
    tier[mrow >= 0] = model.cols["tier"][mrow[mrow >= 0]]
    tiers = model.codes
    if any(F.MARK in a for a in agents):
        has = st["has"][rows].tolist()
        who = [text(agents, c) for c in st["agent"][rows].tolist()]
        inv = optional(st["inv"][rows], st["inv_none"][rows])
        step = optional(st["step"][rows], st["step_none"][rows])
        return _each(trace, has, who, inv, step, tier, tiers, used)
    per_call = {k: st[k][rows] for k in ("has", "agent", "inv", "inv_none", "step", "step_none")}
    return _by_form(trace, {**per_call, "tier": tier, "used": used}, agents, tiers)


def _by_form(
    trace: Trace, c: dict[str, np.ndarray], agents: list[str], tiers: list[str]
) -> dict[str, Any]:
    """The call rows of :func:`calls`, asked of calls_of once per distinct form; ``c``: each
    call's has-attributes, agent code (of ``agents``), invocation, step (each with its none
    flag), tier code (of ``tiers``) and finished. A form: the agent (none without attributes),
    the invocation, whether the step is numbered, the tier, finished; the forms in order of
    their first call, the labels' numbers then joined in by Arrow."""
    has = c["has"]
    parts = [
        has,
        np.where(has, c["agent"], NONE),
        c["inv_none"],
        np.where(c["inv_none"], 0, c["inv"]),
        np.where(has, c["step_none"], 2),
        c["tier"],
        c["used"],
    ]
    first, combo = groups(parts)
    starts_of: list[Mapping[str, Any]] = [
        {}
        if not h
        else {
            A.STEP: None if nostep else F.MARK,
            A.GEN_AI_AGENT_NAME: text(agents, a),
            A.AGENT_INVOCATION: None if z else i,
        }
        for h, a, z, i, nostep in zip(*(p[first].tolist() for p in parts[:5]), strict=True)
    ]
    ended_on: list[Mapping[str, Any]] = [
        {A.TIER: text(tiers, t)} for t in c["tier"][first].tolist()
    ]
    got = calls_of(trace, starts_of, ended_on, c["used"][first].tolist())
    per = got["calls"][combo]
    sides = [f.partition(F.MARK) for f in got["call_names"]["label"]]
    marked = np.array([bool(m) for _, m, _ in sides], np.bool_)
    # a label without the mark (no step number) takes no number
    shown = None if marked.all() else marked[per[:, 3]]
    text_of = joined_around([(b, e) for b, _, e in sides], per[:, 3], decimal(c["step"]), shown)
    codes, labels = encoded(text_of)  # codes in order of first appearance
    per[:, 3] = codes
    return {
        "calls": per,
        # the labels as Arrow strings: a long run's 200,000 as Python strings were 15 MB held
        # through the rest of the build (fastcols.fast_columns makes the list)
        "call_names": {**got["call_names"], "label": labels},
    }


def joined_around(
    sides: list[tuple[str, str]],
    form: np.ndarray,
    numbers: pa.Array,
    shown: np.ndarray | None = None,
) -> pa.Array:
    """Each of ``numbers`` between the two sides (before, after) of its ``form`` (the labels of
    the step and call numbers of :mod:`agentloop.analysis.fastcols` and :func:`calls`), a
    number not ``shown`` left out; the numbers as they are when every side is empty and every
    number shown (the main agent's only)."""
    if shown is None and all(b == e == "" for b, e in sides):
        return numbers
    return around(sides, form.reshape(-1), numbers, shown)  # numpy 2.0's inverse kept the shape


def groups(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by their values in every one of ``parts``: each group's first row, in
    order of first appearance, and each row's group (numbered so). One key for all the
    columns, each a digit of its own span (a column spread wider than it has rows, and a key
    that would pass 2**62, renumbered by their distinct values first: one np.unique per column
    took 0.2 ms for a short trace's calls)."""
    key, room = np.zeros(len(parts[0]), I64), 1
    for p in parts:
        lo, span = _span(p)
        if span > len(p):  # values far apart (a hostile trace's invocation): their codes
            _, p = np.unique(p, return_inverse=True)
            lo, span = _span(p.reshape(-1))
        if room > _KEY_ROOM // span:  # renumbered: below the number of rows
            _, key = np.unique(key, return_inverse=True)
            key, room = key.reshape(-1).astype(I64), len(key)
        key = key * span + (p.reshape(-1).astype(I64) - lo)
        room *= span
    _, first, key = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first)
    renumber = np.empty(len(order), I64)
    renumber[order] = np.arange(len(order))
    return first[order], renumber[key.reshape(-1)]


_KEY_ROOM = 1 << 62


def _span(p: np.ndarray) -> tuple[int, int]:
    """The least of ``p`` and how many values from it to its greatest."""
    lo = int(p.min(initial=0))
    return lo, int(p.max(initial=0)) - lo + 1


def _each(
    trace: Trace,
    has: list[bool],
    agent: list[str | None],
    inv: list[int | None],
    step: list[int | None],
    tier: np.ndarray,
    tiers: list[str],
    used: np.ndarray,
) -> dict[str, Any]:
    """calls_of on every call's own attributes (an agent name holding the mark)."""
    return calls_of(
        trace,
        [
            {A.STEP: s, A.GEN_AI_AGENT_NAME: a, A.AGENT_INVOCATION: i} if h else {}
            for h, a, i, s in zip(has, agent, inv, step, strict=True)
        ],
        [
            {A.TIER: text(tiers, t)} if u else {}
            for t, u in zip(tier.tolist(), used.tolist(), strict=True)
        ],
        used.tolist(),
    )


def outside(r: dict[str, Any], keep: np.ndarray, s: dict[str, Any]) -> dict[str, Any]:
    """The wall time's parts outside the agent's (:func:`agentloop.analysis.report.
    outside_times`) from the set-up and check root spans, around the kept spans' time (the
    first root's start to the run's end)."""
    from agentloop.analysis.report import outside_times

    roots = np.flatnonzero(~keep & (r["parent"] < 0)).tolist()
    kind = [F.KINDS[k] for k in r["kind"][roots].tolist()]
    t0, t1 = r["t0"][roots].tolist(), r["t1"][roots].tolist()  # t1 -1: still open
    mine = s["t0"][s["parent"] < 0]
    start = int(mine.min()) if mine.size else s["end_ns"]
    ends = [None if b < 0 else b for b in t1]
    return outside_times(list(zip(kind, t0, ends, strict=True)), start, s["end_ns"])
