"""The fast cold builder's step labels: a kept step span's label made on arrays, not per step.

For :mod:`agentloop.analysis.fastcols`: :func:`step_labels` gives the value
:func:`agentloop.analysis.agents.step_text` (the one owner of the label's form) gives each step
span, from the start values the builder took (``st``, :class:`~agentloop.analysis._fastwin.
Starts`), made once per agent and invocation with a mark where the step's number goes and then
joined around each step's number (``tests/test_fastcols.py`` compares every label with
the checked path's).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from agentloop.analysis import _fastshape as F
from agentloop.analysis._fastreport import groups, joined_around
from agentloop.analysis._fasttext import decimal, take
from agentloop.analysis._fastwin import text
from agentloop.analysis.agents import step_text
from agentloop.trace import attrs as A


def step_labels(
    st: dict[str, Any], agents: list[str], keep: np.ndarray, is_step: np.ndarray
) -> pa.Array:
    """A kept step span's label (:func:`agentloop.analysis.agents.step_text`), else null.

    step_text's label of a numbered step, made once per agent and invocation with a mark where
    the number goes (the forms grouped by :func:`agentloop.analysis._fastreport.groups`), its
    two sides then joined around each step's number on arrays (a loop over 200,000 steps took
    0.11 s); a step without a number, or of an agent whose name holds the mark, is labelled by
    step_text itself."""
    rows = np.flatnonzero(is_step)
    at = np.flatnonzero(keep)[rows]
    agent, inv_none = st["agent"][at], st["inv_none"][at]
    inv = np.where(inv_none, 0, st["inv"][at])
    marked = [c for c, a in enumerate(agents) if F.MARK in a]
    fast = st["has"][at] & ~st["step_none"][at]
    if marked:
        fast &= ~np.isin(agent, marked)
    pair = [agent[fast], inv_none[fast], inv[fast]]  # a label's form: agent and invocation
    first, form = groups(pair)
    sides = [
        _around_mark(agents, a, None if z else i)
        for a, z, i in zip(*(p[first].tolist() for p in pair), strict=True)
    ]
    made = joined_around(sides, form, decimal(st["step"][at][fast]))
    slow = [
        _slow_label(st, agents, j, int(inv[k]), bool(inv_none[k])) for k, j in _where_not(fast, at)
    ]
    where = np.full(len(is_step), -1, np.int32)  # each row's label in [made, slow], -1: null
    where[rows[fast]] = np.arange(len(made))
    where[rows[~fast]] = len(made) + np.arange(len(slow))
    labels = pa.concat_arrays([made, pa.array(slow, pa.string())]) if slow else made
    return take(labels, where)


def _around_mark(agents: list[str], agent: int, inv: int | None) -> tuple[str, str]:
    """What comes before and after a step's number in the labels of ``agent``'s invocation."""
    who = {A.STEP: F.MARK, A.GEN_AI_AGENT_NAME: text(agents, agent), A.AGENT_INVOCATION: inv}
    before, _, after = step_text(who, "").partition(F.MARK)
    return before, after


def _where_not(fast: np.ndarray, at: np.ndarray) -> list[tuple[int, int]]:
    """(row among the steps, record index) of each step the fast path does not label."""
    k = np.flatnonzero(~fast)
    return list(zip(k.tolist(), at[k].tolist(), strict=True))


def _slow_label(st: dict[str, Any], agents: list[str], j: int, inv: int, no_inv: bool) -> str:
    """step_text's label of the step span started by record ``j``, from its own values."""
    name = st["name"][j].as_py()
    if not st["has"][j] or st["step_none"][j]:
        return step_text({A.STEP: None}, name)
    agent = int(st["agent"][j])
    who = {A.GEN_AI_AGENT_NAME: text(agents, agent), A.AGENT_INVOCATION: None if no_inv else inv}
    return step_text({**who, A.STEP: int(st["step"][j])}, name)
