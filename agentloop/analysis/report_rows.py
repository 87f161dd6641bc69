"""A report's two long parts, its step rows and its critical path, as rows and as columns.

:class:`StepRow` is one step of :class:`agentloop.analysis.report.Report`; :class:`StepColumns`
the same rows a column each, as the loops' rows give them (:meth:`StepColumns.of_rows`) or a
trace's arrays do (:func:`agentloop.analysis.vreport.step_columns`). :func:`steps_json` and
:func:`path_json` write both as the report's JSON rows (a long run has 200,000 steps and a
million path segments: a whole column goes through one array operation where it can).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple


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
    """The step rows as columns, a value per step (ints as a list or an int64 array), each
    step's tools flat (``tool_off``: step k's are ``tool_off[k]:tool_off[k + 1]``): what
    :func:`steps_json` writes, made from the loops' rows or from a trace's arrays."""

    step: list[str]
    start_ns: Any
    duration_ns: Any
    base: Any
    reasoning: Any
    decode: Any
    other: Any
    tool_names: list[str]
    tool_ns: Any
    tool_off: list[int]
    input_tokens: list[int]
    output_tokens: list[int]
    reasoning_tokens: list[int]
    cumulative_ns: Any
    in_flight: list[bool]
    cached_tokens: list[int]

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

    def rows(self) -> tuple[StepRow, ...]:
        """The :class:`StepRow` of each step."""
        from agentloop.analysis.columnar import frozen_rows

        names, ns, off = self.tool_names, _ints(self.tool_ns), self.tool_off
        base, reasoning, decode, other = map(
            _ints, (self.base, self.reasoning, self.decode, self.other)
        )
        return frozen_rows(
            StepRow,
            step=self.step,
            start_ns=_ints(self.start_ns),
            duration_ns=_ints(self.duration_ns),
            model=[
                {"base": a, "reasoning": b, "decode": c, "other": d}
                for a, b, c, d in zip(base, reasoning, decode, other, strict=True)
            ],
            tools=[
                tuple(zip(names[a:b], ns[a:b], strict=True)) for a, b in itertools.pairwise(off)
            ],
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            reasoning_tokens=self.reasoning_tokens,
            cumulative_ns=_ints(self.cumulative_ns),
            in_flight=self.in_flight,
            cached_tokens=self.cached_tokens,
        )


def _ints(col: Any) -> list[int]:
    return col.tolist() if hasattr(col, "tolist") else list(col)


def _seconds(ns: Any) -> list[float]:
    """ns as seconds (``ns / 1e9`` each: numpy divides as Python does), in one array pass."""
    import numpy as np

    return (np.asarray(ns, np.int64) / 1e9).tolist()  # type: ignore[no-any-return]


def steps_json(sc: StepColumns) -> list[dict[str, Any]]:
    """The report's ``steps`` as JSON rows; times in seconds."""
    names, secs_ = sc.tool_names, _seconds(sc.tool_ns)
    tools = [
        [{"name": n, "seconds": v} for n, v in zip(names[a:b], secs_[a:b], strict=True)]
        for a, b in itertools.pairwise(sc.tool_off)
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
            sc.step,
            _seconds(sc.start_ns),
            _seconds(sc.duration_ns),
            model,
            tools,
            sc.input_tokens,
            sc.output_tokens,
            sc.reasoning_tokens,
            sc.cached_tokens,
            _seconds(sc.cumulative_ns),
            sc.in_flight,
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
