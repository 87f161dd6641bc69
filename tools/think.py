"""think: a scratchpad tool, so the model's reasoning between actions shows up in the trace."""

from __future__ import annotations

from agentloop.protocols import ToolContext
from agentloop.types import ToolResult


async def think(ctx: ToolContext, thought: str) -> ToolResult:
    """Write down your reasoning (a plan, a hypothesis, what a result means); changes nothing.

    Args:
        thought: the reasoning to record.
    """
    words = len(thought.split())
    return ToolResult(ok=True, output=f"Noted ({words} words).", data={"chars": len(thought)})
