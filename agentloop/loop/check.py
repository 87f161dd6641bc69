"""The task's success check after the loop: a ``check`` span of its own; one that raises fails.

The check runs outside the run span (the run's wall time, not the agent's: the reader keeps it
out of the analysis), and a check that raises is a failed check, never a lost end record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentloop.trace.tracer import Tracer

Check = Callable[[str], Awaitable[dict[str, Any]]]  # the final answer -> {passed, detail, ...}


async def run_check(
    check: Check | None, final_text: str, tracer: Tracer, log: Any
) -> dict[str, Any]:
    """``check`` on the run's final answer, as a root span of kind ``check``; ``log``: the run's
    bound logger (a raising check is warned about there)."""
    assert check is not None
    async with tracer.span("check", "success check") as span:
        try:
            result = await check(final_text)
        except Exception as exc:
            log.warning("success check raised", error=str(exc))
            result = {
                "passed": False,
                "detail": f"the success check could not run: {type(exc).__name__}: {exc}",
            }
        passed = result.get("passed")
        span.set(**{"check.passed": passed if isinstance(passed, bool) else None})
        return result
