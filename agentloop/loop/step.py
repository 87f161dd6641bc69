"""A step's carry and verdicts: the conversation between steps, the limits after a call, a finish.

:class:`agentloop.loop.runner.Runner` steps with a :class:`Conversation`; after each model call
it asks :func:`over_limit` (output tokens, cost: the agent's own, then the run's across every
agent) and :func:`finished` (the one place a finished task is recognised).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentloop.config.limits import Limits
from agentloop.loop.ending import Ending, cost_limit, output_token_limit
from agentloop.loop.tool_call import finish_summary
from agentloop.types import Message, ModelResponse


@dataclass
class Conversation:
    """What the loop carries from step to step: the messages, and the spans the next step and
    the next model call wait for."""

    messages: list[Message]
    after: list[str] = field(default_factory=list)  # what the next model call waits for
    prev_step: list[str] = field(default_factory=list)


def over_limit(
    own: Limits, run: Limits, tokens: int, cost_usd: float, all_tokens: int, all_cost_usd: float
) -> Ending | None:
    """Limits checked after every model call (output tokens, cost): the agent's own (``own``,
    with its ``tokens`` and ``cost_usd``), then the run's across every agent (``run``)."""
    return (
        output_token_limit(own.max_output_tokens, tokens)
        or cost_limit(own.max_cost_usd, cost_usd)
        or output_token_limit(run.max_output_tokens, all_tokens)
        or cost_limit(run.max_cost_usd, all_cost_usd)
    )


def finished(resp: ModelResponse, finish_tool: bool) -> tuple[Ending | None, str]:
    """The one place a finished task is recognised: a turn without tool calls, or a call of
    the ``finish`` tool (offered when ``finish_tool``). With the ending, the ``finish`` call's
    summary (the final answer; "" when there is none)."""
    if not resp.tool_calls:
        cut = ", cut at the output-token limit" if resp.finish_reason == "length" else ""
        return Ending.finished(f"the model ended the task (a turn without tool calls{cut})"), ""
    finish = next((c for c in resp.tool_calls if c.name == "finish"), None)
    if finish is None or not finish_tool:
        return None, ""
    return Ending.finished("the model called finish"), finish_summary(finish)
