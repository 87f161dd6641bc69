"""How a run ended: the value the agent loop returns (status, reason, which limit), the result.

The loop does not raise to stop: each step returns ``None`` (go on) or an :class:`Ending`, and
limit checks (steps, output tokens, cost, wall time) return one too. ``status`` is one of
``ok`` (the model finished), ``budget`` (a limit was hit), ``error`` (a model call failed for
good) or ``cancelled``; it is what the trace's end record and :attr:`RunResult.status` say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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


@dataclass(frozen=True)
class RunResult:
    """How a run ended. ``status``: ok, error, cancelled or budget (a limit was hit)."""

    run_id: str
    status: str
    reason: str
    steps: int
    final_text: str
    elapsed_s: float
    trace_path: str | None = None
    workspace: str | None = None  # set when the working copy was kept
    success: bool | None = None
    success_detail: str = ""
    totals: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        run_id: str,
        ending: Ending,
        steps: int,
        final_text: str,
        elapsed_s: float,
        success: dict[str, Any] | None,
        totals: dict[str, Any],
    ) -> RunResult:
        """The result of a run that ended so, its success check's answer (``passed``, ``detail``)
        folded in."""
        passed = None if not success or success.get("passed") is None else bool(success["passed"])
        return cls(
            run_id,
            ending.status,
            ending.reason,
            steps,
            final_text,
            elapsed_s,
            success=passed,
            success_detail=str(success.get("detail", "")) if success else "",
            totals=totals,
        )


def output_token_limit(max_output_tokens: int, used: int) -> Ending | None:
    """The run's ending (status budget) once ``used`` output tokens are past the task's limit."""
    if used > max_output_tokens:
        return Ending.limit_reached(
            "output_tokens",
            f"output-token limit of {max_output_tokens} reached ({used} tokens)",
        )
    return None


def context_limit(estimated: int, budget: int) -> Ending:
    """The run's ending (status budget) when a request cannot fit the context window even
    with every tool output trimmed (:mod:`agentloop.loop.context_window`)."""
    return Ending.limit_reached(
        "context",
        f"the request needs about {estimated} input tokens, over the {budget} the context "
        "window leaves beside room for the answer",
    )


def cost_limit(max_cost_usd: float | None, spent_usd: float) -> Ending | None:
    """The run's ending (status budget) once ``spent_usd`` is past the task's ``max_cost_usd``."""
    if max_cost_usd is not None and spent_usd > max_cost_usd:
        return Ending.limit_reached(
            "cost",
            f"cost limit of ${max_cost_usd:g} reached "
            f"(${spent_usd:.6f} spent at the tier's prices)",
        )
    return None
