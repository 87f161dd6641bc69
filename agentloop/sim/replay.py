"""Turning a recorded trace back into a script, so a run can be replayed at another tier."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.trace.attrs import AGENT_INVOCATION, GEN_AI_AGENT_NAME

if TYPE_CHECKING:  # only named in a signature: the simulator child needs no trace reader
    from agentloop.trace.reader import Trace


def script_from_trace(
    trace: Trace, agent: str | None = None, invocation: int = 1
) -> list[ScriptTurn]:
    """The model turns recorded in ``trace``'s model spans (their ``output`` attr), in step order:
    the main agent's, or with ``agent`` that sub-agent's ``invocation``.

    Model spans without an ``output`` (calls that failed for good, or were in flight when the
    run died) are left out: they never became part of the conversation.
    """
    turns = [
        (s.model.step if s.model.step is not None else 1 << 62, s.t0, s.model.output)
        for s in trace.of_kind("model")
        if s.model is not None
        and s.model.output is not None
        and s.start_attrs.get(GEN_AI_AGENT_NAME) == agent
        and (agent is None or s.start_attrs.get(AGENT_INVOCATION, 1) == invocation)
    ]
    turns.sort(key=lambda x: (x[0], x[1]))
    return [
        ScriptTurn(
            text=out.text,
            reasoning_tokens=out.reasoning_tokens,
            tool_calls=tuple(ScriptToolCall(c.name, c.arguments) for c in out.tool_calls),
        )
        for _, _, out in turns
    ]
