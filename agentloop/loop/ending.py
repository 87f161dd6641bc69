"""How a run ended: the value the agent loop returns (status, reason, which limit).

The loop does not raise to stop: each step returns ``None`` (go on) or an :class:`Ending`, and
limit checks (steps, output tokens, cost, wall time) return one too. ``status`` is one of
``ok`` (the model finished), ``budget`` (a limit was hit), ``error`` (a model call failed for
good) or ``cancelled``; it is what the trace's end record and ``RunResult.status`` say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "budget", "error", "cancelled"]


@dataclass(frozen=True, slots=True)
class Ending:
    """Why the loop stopped. ``limit`` names the limit for status ``budget``."""

    status: Status
    reason: str
    limit: str | None = None

    @classmethod
    def finished(cls, reason: str) -> Ending:
        return cls("ok", reason)

    @classmethod
    def limit_reached(cls, limit: str, reason: str) -> Ending:
        return cls("budget", reason, limit)

    @classmethod
    def failed(cls, reason: str) -> Ending:
        return cls("error", reason)


CANCELLED = Ending("cancelled", "the run was cancelled")


def cost_limit(max_cost_usd: float | None, spent_usd: float) -> Ending | None:
    """The run's ending (status budget) once ``spent_usd`` is past the task's ``max_cost_usd``."""
    if max_cost_usd is not None and spent_usd > max_cost_usd:
        return Ending.limit_reached(
            "cost",
            f"cost limit of ${max_cost_usd:g} reached "
            f"(${spent_usd:.6f} spent at the tier's prices)",
        )
    return None
