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
from agentloop.analysis._fastwin import NONE, Taken, optional, text
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
    rows = np.flatnonzero(keep)[np.flatnonzero(is_model)]
    end_of = np.full(len(keep), -1, I64)
    end_of[r["eid"]] = np.arange(len(r["eid"]))
    ended = end_of[rows]
    used = ended >= 0
    mrow = np.full(len(rows), -1, I64)
    mrow[used] = model.row[ended[used]]
    tier = np.full(len(rows), NONE, np.int32)
    tier[mrow >= 0] = model.cols["tier"][mrow[mrow >= 0]]
    has = st["has"][rows].tolist()
    agent = st["agent"][rows].tolist()
    inv = optional(st["inv"][rows], st["inv_none"][rows])
    step = optional(st["step"][rows], st["step_none"][rows])
    tiers = model.codes
    if any(F.MARK in a for a in agents):
        who = [text(agents, c) for c in agent]
        return _each(trace, has, who, inv, step, tier, tiers, used)
    return _by_form(trace, (has, agent, inv, step, tier.tolist(), used.tolist()), agents, tiers)


def _by_form(
    trace: Trace, per_call: tuple[list[Any], ...], agents: list[str], tiers: list[str]
) -> dict[str, Any]:
    """The call rows of :func:`calls`, asked of calls_of once per distinct form; ``per_call``:
    each call's has-attributes, agent code (of ``agents``), invocation, step, tier code (of
    ``tiers``) and finished."""
    has, _, _, step, _, _ = per_call
    forms: dict[tuple[Any, ...], int] = {}
    at = forms.setdefault
    combo = [
        at((h, a if h else NONE, i, None if not h else s is None, t, u), len(forms))
        for h, a, i, s, t, u in zip(*per_call, strict=True)
    ]
    starts_of: list[Mapping[str, Any]] = [
        {}
        if not h
        else {
            A.STEP: None if nostep else F.MARK,
            A.GEN_AI_AGENT_NAME: text(agents, a),
            A.AGENT_INVOCATION: i,
        }
        for h, a, i, nostep, _, _ in forms
    ]
    ended_on: list[Mapping[str, Any]] = [{A.TIER: text(tiers, t)} for *_, t, _ in forms]
    got = calls_of(trace, starts_of, ended_on, [u for *_, u in forms])
    per = got["calls"][combo]
    form = [got["call_names"]["label"][c] for c in per[:, 3].tolist()]
    steps = [0 if not h else n for h, n in zip(has, step, strict=True)]
    # codes in order of first appearance: Arrow's dictionary encoding gives them so
    labels = pa.array(
        [f.replace(F.MARK, str(n)) for f, n in zip(form, steps, strict=True)], pa.string()
    ).dictionary_encode()
    per[:, 3] = np.asarray(labels.indices)
    return {
        "calls": per,
        "call_names": {**got["call_names"], "label": labels.dictionary.to_pylist()},
    }


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
