"""When a run stops on its own, and the limits' defaults: their one owner.

A task file's ``limits:`` (:mod:`agentloop.config.tasks`), the service's run requests and the
tools' settings (:mod:`agentloop.sandbox.context`) all take their defaults from :class:`Limits`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentloop.trace.header import LimitsRecord


@dataclass(frozen=True)
class Limits:
    """When a run stops on its own: steps, output tokens, wall time, cost; and tool concurrency."""

    max_steps: int = 30
    max_output_tokens: int = 200_000
    timeout_s: float = 600.0
    max_parallel_tools: int = 4
    tool_timeout_s: float = 120.0
    max_cost_usd: float | None = None  # USD at the tier's prices (agentloop/model/prices.py)
    max_agent_depth: int = 3  # how deep sub-agents may call sub-agents (the task file checks)

    def record(self) -> LimitsRecord:
        """The limits as a trace header records them."""
        return {
            "max_steps": self.max_steps,
            "max_output_tokens": self.max_output_tokens,
            "timeout_s": self.timeout_s,
            "max_parallel_tools": self.max_parallel_tools,
            "tool_timeout_s": self.tool_timeout_s,
            "max_cost_usd": self.max_cost_usd,
        }
