"""A recorded run as a conversation: prompts, each step's model turn and tool calls, the answer.

The one transcript model that the HTML pages (:mod:`agentloop.export._transcript_html`) and the
terminal (``agentloop report TRACE --transcript``) both draw. Built from a loaded trace's typed
spans (:class:`~agentloop.trace.reader.SpanRecord`'s ``model`` and ``tool`` views), the reasoning
summaries from the model span's ``output.reasoning`` items as written, the success check from
the end record. Every text passes the one redactor (:mod:`agentloop.redact`) on the way in, so
nothing drawn from a transcript can show a secret the trace still held.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from agentloop.loop.tool_call import FINISH, finish_summary
from agentloop.redact import Redactor, redactor
from agentloop.trace import attrs as A
from agentloop.trace.reader import SpanRecord, Trace
from agentloop.types import ToolCall


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One tool call and what it returned (``output`` None: still running when the trace ends)."""

    span_id: str
    name: str
    arguments: str  # pretty JSON when it parses, else as the model wrote it
    ok: bool
    output: str | None
    duration_ns: int | None


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """One model call: its visible text, reasoning summaries and token counts."""

    span_id: str
    text: str
    reasoning: tuple[str, ...]  # summaries as the server gave them; () when it hid them
    reasoning_tokens: int
    output_tokens: int
    duration_ns: int | None
    status: str  # ok | error | in_flight


@dataclass(frozen=True, slots=True)
class Step:
    number: int | None
    model: ModelTurn | None
    tools: tuple[ToolEntry, ...]


@dataclass(frozen=True, slots=True)
class Check:
    """The success check's verdict as the end record holds it."""

    passed: bool
    detail: str
    command: str
    output: str


@dataclass(frozen=True, slots=True)
class Transcript:
    task: str
    tier: str
    system: str
    prompt: str
    steps: tuple[Step, ...]
    answer: str  # the finish call's summary, else the last model text ('' if none)
    status: str  # the end record's status, or "incomplete"
    reason: str
    check: Check | None

    @property
    def anchors(self) -> set[str]:
        """Span ids that have a message (what a waterfall bar may link to)."""
        out = set()
        for s in self.steps:
            if s.model is not None:
                out.add(s.model.span_id)
            out.update(t.span_id for t in s.tools)
        return out


def _pretty(arguments: str) -> str:
    try:
        return orjson.dumps(orjson.loads(arguments), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        return arguments


def _summaries(raw_output: object) -> tuple[str, ...]:
    """Reasoning summary texts of a model span's ``output.reasoning`` items (as written)."""
    if not isinstance(raw_output, dict):
        return ()
    items = raw_output.get(A.OUTPUT_REASONING) or ()
    out: list[str] = []
    for item in items if isinstance(items, list) else ():
        summary = item.get("summary") if isinstance(item, dict) else None
        for part in summary if isinstance(summary, list) else ():
            text = part.get("text") if isinstance(part, dict) else part
            if isinstance(text, str) and text.strip():
                out.append(text)
    text = raw_output.get(A.OUTPUT_REASONING_TEXT)  # Chat servers stream reasoning as text
    if isinstance(text, str) and text.strip():
        out.append(text)
    return tuple(out)


def _model(s: SpanRecord, scrub: Redactor) -> ModelTurn:
    m = s.model
    out = m.output if m is not None else None
    return ModelTurn(
        span_id=s.id,
        text=scrub.text(out.text) if out is not None else "",
        reasoning=tuple(scrub.text(t) for t in _summaries(s.attrs.get(A.OUTPUT))),
        reasoning_tokens=m.reasoning_tokens if m is not None else 0,
        output_tokens=m.output_tokens if m is not None else 0,
        duration_ns=s.duration_ns,
        status=s.status,
    )


def _tool(s: SpanRecord, scrub: Redactor) -> ToolEntry:
    t = s.tool
    name = t.name if t is not None else s.name.removeprefix("execute_tool ")
    return ToolEntry(
        span_id=s.id,
        name=scrub.text(name),
        arguments=scrub.text(_pretty(t.arguments)) if t is not None else "",
        ok=t.ok if t is not None else False,
        output=scrub.text(t.output) if t is not None else None,
        duration_ns=s.duration_ns,
    )


def _answer(trace: Trace, steps: list[Step], scrub: Redactor) -> str:
    for span in reversed(trace.of_kind("tool")):
        t = span.tool
        if t is not None and t.name == FINISH.name:
            return scrub.text(finish_summary(ToolCall(t.call_id, t.name, t.arguments)))
    texts = [s.model.text for s in steps if s.model is not None and s.model.text.strip()]
    return texts[-1] if texts else ""


def _check(success: dict[str, Any] | None, scrub: Redactor) -> Check | None:
    if not success:
        return None
    return Check(
        passed=bool(success.get("passed")),
        detail=scrub.text(str(success.get("detail") or "")),
        command=scrub.text(str(success.get("command") or "")),
        output=scrub.text(str(success.get("output") or "")),
    )


def transcript(trace: Trace, scrub: Redactor | None = None) -> Transcript:
    """The conversation a trace recorded, every text redacted (default: this process's secret
    values and secret-shaped text)."""
    scrub = scrub or redactor()
    by_step: dict[int | None, tuple[list[SpanRecord], list[SpanRecord]]] = {}
    for s in sorted(trace.spans.values(), key=lambda s: s.t0):
        if s.kind in ("model", "tool"):
            models, tools = by_step.setdefault(s.step, ([], []))
            (models if s.kind == "model" else tools).append(s)
    steps: list[Step] = []
    for number, (models, tools) in by_step.items():
        # a step with retried or repeated model calls shows each as its own turn
        for k, m in enumerate(models or [None]):
            steps.append(
                Step(
                    number,
                    _model(m, scrub) if m is not None else None,
                    tuple(_tool(t, scrub) for t in tools) if k == len(models or [None]) - 1 else (),
                )
            )
    end = trace.end_record
    return Transcript(
        task=scrub.text(trace.run.task.name),
        tier=scrub.text(trace.run.tier.name),
        system=scrub.text(trace.run.task.system),
        prompt=scrub.text(trace.run.task.prompt),
        steps=tuple(steps),
        answer=_answer(trace, steps, scrub),
        status=end.status if end is not None else "incomplete",
        reason=scrub.text(end.reason) if end is not None else "the trace ends mid-run",
        check=_check(end.success if end is not None else None, scrub),
    )
