"""Turning a recorded trace back into a script, so a run can be replayed at another tier."""

from __future__ import annotations

from typing import Any

from agentloop.script import ScriptTurn
from agentloop.trace.reader import Trace


def script_from_trace(trace: Trace) -> list[ScriptTurn]:
    """The model turns recorded in ``trace``'s model spans (their ``output`` attr), in step order.

    Model spans without an ``output`` (calls that failed for good, or were in flight when the
    run died) are left out: they never became part of the conversation.
    """
    spans = [s for s in trace.of_kind("model") if isinstance(s.attrs.get("output"), dict)]

    def order(s: Any) -> tuple[int, int]:
        step = s.attrs.get("step", s.start_attrs.get("step"))
        return (int(step) if isinstance(step, int) else 1 << 62, s.t0)

    return [ScriptTurn.from_dict(s.attrs["output"]) for s in sorted(spans, key=order)]
