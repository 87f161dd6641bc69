"""The fast cold builder's report rows: each model call's tier, agent and step; time outside the agent.

For :mod:`agentloop.analysis.fastcols`: the same values as :func:`agentloop.analysis.columnar.
columns_of` gives ``calls``, ``call_names`` and ``outside``, from the typed records the builder
decoded. The call rows are made by their one owner, :func:`agentloop.analysis.columnar.calls_of`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
    with, the tier it ended on; a finished call has a usage row."""
    rows = np.flatnonzero(keep)[np.flatnonzero(is_model)].tolist()
    end_of = np.full(len(starts), -1, I64)
    end_of[r["eid"]] = np.arange(len(ends))
    who = [starts[j].attrs for j in rows]
    done = [ends[k].attrs if k >= 0 else None for k in end_of[rows].tolist()]
    return calls_of(
        trace,
        [
            {}
            if a is None
            else {A.STEP: a.step, A.GEN_AI_AGENT_NAME: a.agent, A.AGENT_INVOCATION: a.inv}
            for a in who
        ],
        [{} if a is None else {A.TIER: a.tier} for a in done],
        [k >= 0 for k in end_of[rows].tolist()],
    )


def outside(r: dict[str, Any], keep: np.ndarray, s: dict[str, Any]) -> dict[str, Any]:
    """The wall time's parts outside the agent's, as :func:`agentloop.analysis.report.
    _two_times` reads them from the set-up and check root spans (the finished ones timed, the
    open ones named), around the kept spans' time (first root's start to the run's end)."""
    roots = np.flatnonzero(~keep & (r["parent"] < 0)).tolist()
    kind = [F.KINDS[k] for k in r["kind"][roots].tolist()]
    t0, t1 = r["t0"][roots].tolist(), r["t1"][roots].tolist()  # t1 -1: still open
    left = tuple(k for k, b in zip(kind, t1, strict=True) if b < 0)
    done = [i for i, b in enumerate(t1) if b >= 0]
    if not done:
        return {"outside_open": left} if left else {}
    mine = s["t0"][s["parent"] < 0]
    start = int(mine.min()) if mine.size else s["end_ns"]
    setup = [t1[i] - t0[i] for i in done if kind[i] == "setup"]
    check = [t1[i] - t0[i] for i in done if kind[i] == "check"]
    return {
        "setup_ns": sum(setup) if setup else None,
        "check_ns": sum(check) if check else None,
        "wall_ns": max([s["end_ns"], *(t1[i] for i in done)])
        - min([start, *(t0[i] for i in done)]),
        "outside_open": left,
    }
