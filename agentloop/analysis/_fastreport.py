"""The fast cold builder's report rows: each model call's tier, agent and step; time outside the agent.

For :mod:`agentloop.analysis.fastcols`: the same values as :func:`agentloop.analysis.columnar.
columns_of` gives ``calls``, ``call_names`` and ``outside``, from the typed records the builder
decoded. The call rows are made by their one owner, :func:`agentloop.analysis.columnar.calls_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from agentloop.analysis import _fastshape as F
from agentloop.analysis.columnar import calls_of
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace

I64 = np.int64


def calls(
    trace: Trace,
    starts: list[F.SpanStart],
    ends: list[F.SpanEnd],
    r: dict[str, Any],
    keep: np.ndarray,
    is_model: np.ndarray,
) -> dict[str, Any]:
    """Each kept model span's call row (:func:`agentloop.analysis.columnar.calls_of`, the one
    owner), from the attributes the Structs kept: the agent, invocation and step it started
    with, the tier it ended on; a finished call has a usage row.

    calls_of is asked once per distinct (agent, invocation, tier, finished, numbered), in order
    of first appearance, with a mark for the step number in the label, filled in per call (a
    call of calls_of per call: 0.74 s for 200,000 calls, load ~2.5); the labels' codes are
    then given in order of first appearance, as calls_of gives them."""
    rows = np.flatnonzero(keep)[np.flatnonzero(is_model)].tolist()
    end_of = np.full(len(starts), -1, I64)
    end_of[r["eid"]] = np.arange(len(ends))
    who = [starts[j].attrs for j in rows]
    done = [ends[k].attrs if k >= 0 else None for k in end_of[rows].tolist()]
    used = [k >= 0 for k in end_of[rows].tolist()]
    if any(a is not None and F.MARK in (a.agent or "") for a in who):
        return _each(trace, who, done, used)
    forms: dict[tuple[Any, ...], int] = {}
    at = forms.setdefault
    combo = [
        at(
            (None, None, None, t, u) if a is None else (a.agent, a.inv, a.step is None, t, u),
            len(forms),
        )
        for a, t, u in zip(who, [None if e is None else e.tier for e in done], used, strict=True)
    ]
    starts_of: list[Mapping[str, Any]] = [
        {}
        if agent is None and inv is None and nostep is None
        else {
            A.STEP: None if nostep else F.MARK,
            A.GEN_AI_AGENT_NAME: agent,
            A.AGENT_INVOCATION: inv,
        }
        for agent, inv, nostep, _, _ in forms
    ]
    tiers: list[Mapping[str, Any]] = [{A.TIER: t} for *_, t, _ in forms]
    got = calls_of(trace, starts_of, tiers, [u for *_, u in forms])
    per = got["calls"][combo]
    form = [got["call_names"]["label"][c] for c in per[:, 3].tolist()]
    steps = [0 if a is None else a.step for a in who]
    # codes in order of first appearance: Arrow's dictionary encoding gives them so
    labels = pa.array(
        [f.replace(F.MARK, str(n)) for f, n in zip(form, steps, strict=True)], pa.string()
    ).dictionary_encode()
    per[:, 3] = np.asarray(labels.indices)
    return {
        "calls": per,
        "call_names": {**got["call_names"], "label": labels.dictionary.to_pylist()},
    }


def _each(trace: Trace, who: list[Any], done: list[Any], used: list[bool]) -> dict[str, Any]:
    """calls_of on every call's own attributes (an agent name holding the mark)."""
    return calls_of(
        trace,
        [
            {}
            if a is None
            else {A.STEP: a.step, A.GEN_AI_AGENT_NAME: a.agent, A.AGENT_INVOCATION: a.inv}
            for a in who
        ],
        [{} if a is None else {A.TIER: a.tier} for a in done],
        used,
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
