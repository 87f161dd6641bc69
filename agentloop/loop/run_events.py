"""A run's live events, each built from the span or value it reports: one owner of their data.

The runner says what happened (a step's span ended, a model call answered, a tool returned) and
this module says what the event carries, one method per kind, so each event's data has one
owner. ``t_s`` is the trace's clock; ``span_id`` the trace span's id. A failing sink is logged
and never ends the run (a broken progress display must not); only an exception that is no
:class:`Exception` (a bug, an exit) travels.
"""

from __future__ import annotations

from typing import Any

from agentloop.errors import ModelError
from agentloop.events import EventSink, RunEvent, wants
from agentloop.loop.ending import Ending
from agentloop.trace.tracer import Span, Tracer
from agentloop.types import ModelResponse, ToolCall, ToolResult


def _seconds(span: Span) -> float:
    return ((span.t1 or 0) - span.t0) / 1e9


class RunEvents:
    """The event stream of run ``run_id``, to ``sink`` (``None``: no events are built)."""

    def __init__(
        self,
        sink: EventSink | None,
        run_id: str,
        tracer: Tracer,
        log: Any,
        agent: str | None = None,
    ) -> None:
        self.sink, self.run_id, self.tracer, self.log = sink, run_id, tracer, log
        self.agent = agent  # a sub-run's events carry its agent's name (``data["agent"]``)

    def wants(self, kind: str) -> bool:
        """Whether the sink takes events of ``kind`` (one that does not costs no work)."""
        return wants(self.sink, kind)

    def emit(self, kind: str, span_id: str | None = None, **data: Any) -> None:
        if self.sink is None:
            return
        t_s = self.tracer.now() / 1e9
        if self.agent is not None:
            data = {**data, "agent": self.agent}
        try:
            self.sink(RunEvent(kind, self.run_id, t_s, data.get("step"), span_id, data))
        except Exception as exc:  # a broken progress display must not end the run
            self.log.warning("event sink failed", error=str(exc))

    def step_end(self, span: Span, step: int) -> None:
        self.emit("step_end", span.id, step=step, status=span.status, seconds=_seconds(span))

    def model_progress(self, span: Span, step: int, tokens: int, elapsed_s: float) -> None:
        self.emit("model_progress", span.id, step=step, output_tokens=tokens, elapsed_s=elapsed_s)

    def model_end(self, span: Span, step: int, answer: ModelResponse | ModelError) -> None:
        """A model call's end: its answer (usage, text, tool calls), or why it failed."""
        if isinstance(answer, ModelError):
            self.emit(
                "model_end",
                span.id,
                step=step,
                seconds=_seconds(span),
                attempts=len(answer.attempts),
                error=answer.message,
            )
            return
        self.emit(
            "model_end",
            span.id,
            step=step,
            seconds=_seconds(span),
            usage=answer.usage,
            attempts=len(answer.attempts),
            text=answer.text,
            tool_calls=answer.tool_calls,
        )

    def tool_start(self, span: Span, step: int, call: ToolCall) -> None:
        self.emit("tool_start", span.id, step=step, name=call.name, call_id=call.id)

    def tool_end(self, span: Span, step: int, call: ToolCall, res: ToolResult) -> None:
        self.emit(
            "tool_end",
            span.id,
            step=step,
            name=call.name,
            ok=res.ok,
            seconds=_seconds(span),
            output=res.output,
        )

    def run_end(
        self, ending: Ending, steps: int, elapsed_s: float, success: dict[str, Any] | None
    ) -> None:
        self.emit(
            "run_end",
            None,
            status=ending.status,
            reason=ending.reason,
            steps=steps,
            elapsed_s=elapsed_s,
            success=success,
        )
