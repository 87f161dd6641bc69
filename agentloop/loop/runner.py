"""The agent loop: call the model, run the turn's tool calls concurrently, feed results back, repeat.

The loop ends with a value, not an exception: each step returns ``None`` (go on) or an
:class:`agentloop.loop.ending.Ending` (status, reason): the model finished (a turn without tool calls,
or the ``finish`` tool: recognised in :meth:`Runner._finished` only), a limit was hit
(:meth:`Runner._over_limit`: output tokens, cost; the step and wall-time limits around the loop),
or a model call failed for good (its attempts go into the model span). Cancellation is the one
exception that travels. Whatever happens, ``finally`` writes the end record, even when the
success check raises or is cancelled. Only the runner opens spans; clients report timings as
data, tools know nothing of tracing. Every span records ``after``: the spans it had to wait for
(the graph what-if re-times).

Hook points for features, so the loop stays a few lines: :meth:`Runner._over_limit` (limits
checked after each model call), :meth:`Runner._emit` (run events), ``Conversation.messages``
(what the next model call is sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentloop._version import __version__
from agentloop.config.tasks import Task
from agentloop.config.tiers import Tier
from agentloop.errors import AgentloopError, ModelError
from agentloop.events import (
    EventSink,
    Observer,
    RunEvent,
    call_progress,
    fan_out,
    observer_sink,
    wants,
)
from agentloop.log import get_logger
from agentloop.loop.context_window import Fit, Window
from agentloop.loop.ending import CANCELLED, Ending, cost_limit
from agentloop.loop.model_span import failed_model_attrs, model_attrs, replayable
from agentloop.protocols import ModelClient, Tool
from agentloop.sandbox.context import RunContext
from agentloop.trace import attrs as A
from agentloop.trace.tracer import Span, Tracer
from agentloop.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
    ToolSpec,
)

FINISH = ToolSpec(
    name="finish",
    description="End the task. Call this once the work is done and checked; say what you did.",
    parameters={
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "What was done and how it was checked."}
        },
        "required": ["summary"],
        "additionalProperties": False,
    },
)

CUT_SHORT = "; the answer was cut at the output-token limit in the middle of this call"

__all__ = ["FINISH", "Observer", "RunResult", "Runner", "model_attrs", "replayable"]


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


@dataclass
class Conversation:
    """What the loop carries from step to step: the messages, and the spans the next step and
    the next model call wait for."""

    messages: list[Message]
    after: list[str] = field(default_factory=list)  # what the next model call waits for
    prev_step: list[str] = field(default_factory=list)


class Runner:
    """Runs one task with one model client and a set of tools, writing spans to ``tracer``."""

    def __init__(
        self,
        task: Task,
        client: ModelClient,
        tools: dict[str, Tool],
        tier: Tier,
        tracer: Tracer,
        ctx: RunContext,
        *,
        run_id: str | None = None,
        observer: Observer | None = None,
        check: Callable[[str], Awaitable[dict[str, Any]]] | None = None,
        events: EventSink | None = None,
    ) -> None:
        self.task, self.client, self.tier, self.tracer, self.ctx = task, client, tier, tracer, ctx
        self.tools = {name: tools[name] for name in task.tools if name in tools}
        self.specs = tuple(t.spec for t in self.tools.values()) + (
            (FINISH,) if task.finish_tool else ()
        )
        self.run_id = run_id or uuid.uuid4().hex[:12]
        # one event stream (agentloop.events); the old observer callback is an adapter over it
        self.events = fan_out(events, observer_sink(observer) if observer else None)
        self.log = get_logger("agentloop.loop.runner", run_id=self.run_id)
        self.output_tokens = 0
        self.cost_usd = 0.0  # at the tier's prices (agentloop/model/prices.py)
        self.final_text = ""
        self.check = check
        self.steps = 0
        self._sem = asyncio.Semaphore(task.limits.max_parallel_tools)
        self.window = Window.for_tier(tier, self.specs)  # context budget (context_window.py)

    def _emit(self, kind: str, span_id: str | None = None, **data: Any) -> None:
        if self.events is not None:
            try:
                self.events(
                    RunEvent(
                        kind, self.run_id, self.tracer.now() / 1e9, data.get("step"), span_id, data
                    )
                )
            except Exception as exc:  # a broken progress display must not end the run
                self.log.warning("event sink failed", error=str(exc))

    def write_header(self) -> None:
        self.tracer.header(
            run_id=self.run_id,
            agentloop=__version__,
            task={
                "name": self.task.name,
                "prompt": self.task.prompt,
                "system": self.task.system,
                "source": str(self.task.source) if self.task.source else None,
            },
            tier=self.tier.summary(),
            tools=[
                {"name": s.name, "description": s.description, "parameters": s.parameters}
                for s in self.specs
            ],
            limits=self.task.limits.record(),
            workspace=str(self.ctx.workspace),
            sandbox=self.ctx.jail.confinement if self.ctx.jail is not None else None,
        )

    async def run(self) -> RunResult:
        """Run the loop to its end; ``finally`` writes the end record whatever happens.

        ``check`` (given to the constructor) runs after the loop unless the run was cancelled or
        crashed: it is the task's success check, outside the run span's time. A check that
        raises counts as not passed; one that is cancelled makes the run cancelled.
        """
        self.write_header()
        ending, crashed = Ending.failed("internal error"), True
        t_start = time.perf_counter()
        success: dict[str, Any] | None = None
        try:
            ending = await self._run_span()
            crashed = False
        except asyncio.CancelledError:
            ending, crashed = CANCELLED, False
            raise
        except AgentloopError as exc:  # raised on purpose outside the loop's own endings
            ending, crashed = Ending.failed(exc.message), False
        except BaseException as exc:  # a bug: the trace is closed, then the error surfaces
            ending = Ending.failed(f"internal error: {type(exc).__name__}: {exc}")
            raise
        finally:
            end_t = self.tracer.now()
            elapsed = time.perf_counter() - t_start
            try:
                if self.check is not None and ending.status != "cancelled" and not crashed:
                    success = await self._check()
            except asyncio.CancelledError:
                ending = CANCELLED
                raise
            finally:
                self.tracer.end(
                    ending.status,
                    t=end_t,
                    reason=ending.reason,
                    steps=self.steps,
                    totals={"output_tokens": self.output_tokens, "elapsed_s": elapsed},
                    success=success,
                )
                self._emit(
                    "run_end",
                    None,
                    status=ending.status,
                    reason=ending.reason,
                    steps=self.steps,
                    elapsed_s=elapsed,
                    success=success,
                )
        return RunResult(
            self.run_id,
            ending.status,
            ending.reason,
            self.steps,
            self.final_text,
            elapsed,
            success=None
            if not success or success.get("passed") is None
            else bool(success["passed"]),
            success_detail=str(success.get("detail", "")) if success else "",
            totals={"output_tokens": self.output_tokens},
        )

    async def _check(self) -> dict[str, Any]:
        """The success check; one that raises is a failed check, not a lost end record."""
        assert self.check is not None
        try:
            return await self.check(self.final_text)
        except Exception as exc:
            self.log.warning("success check raised", error=str(exc))
            return {
                "passed": False,
                "detail": f"the success check could not run: {type(exc).__name__}: {exc}",
            }

    async def _run_span(self) -> Ending:
        """The run span around the loop, under the wall-time limit."""
        limit = self.task.limits.timeout_s
        async with self.tracer.span("run", f"invoke_agent {self.task.name}") as run_span:
            self._emit("run_start", run_span.id, task=self.task.name, tier=self.tier.name)
            try:
                async with asyncio.timeout(limit) as deadline:
                    ending = await self._loop()
            except TimeoutError:
                if not deadline.expired():
                    raise
                ending = Ending.limit_reached("timeout", f"wall-time limit of {limit:g} s reached")
            if ending.status == "error":
                run_span.status = "error"
            return ending

    async def _loop(self) -> Ending:
        """Step until a step says how the run ended, or the step limit."""
        conv = Conversation(
            [Message("system", self.task.system), Message("user", self.task.prompt)]
        )
        for step in range(1, self.task.limits.max_steps + 1):
            self.steps = step
            ending = await self._step(step, conv)
            if ending is not None:
                return ending
        return Ending.limit_reached("steps", f"step limit of {self.task.limits.max_steps} reached")

    async def _step(self, step: int, conv: Conversation) -> Ending | None:
        """One step: a model call, the limits, the turn's tool calls; None: go on."""
        async with self._step_span(step, conv.prev_step) as st:
            called = await self._model_call(step, conv)
            if isinstance(called, Ending):  # the call failed for good
                st.status = "error"
                return called
            resp, model_id = called
            ending = self._over_limit()
            if ending is None and resp.tool_calls:
                cut = resp.finish_reason == "length"  # the call may end mid-arguments
                results, conv.after = await self._tool_calls(step, resp.tool_calls, model_id, cut)
                conv.messages += [
                    Message("tool", res.output, tool_call_id=call.id, name=call.name)
                    for call, res in zip(resp.tool_calls, results, strict=True)
                ]
            conv.prev_step = [st.id]
            return ending or self._finished(resp)

    def _over_limit(self) -> Ending | None:
        """Limits checked after every model call (output tokens, cost)."""
        limits = self.task.limits
        if self.output_tokens > limits.max_output_tokens:
            return Ending.limit_reached(
                "output_tokens",
                f"output-token limit of "
                f"{limits.max_output_tokens} reached "
                f"({self.output_tokens} tokens)",
            )
        return cost_limit(limits.max_cost_usd, self.cost_usd)

    def _finished(self, resp: ModelResponse) -> Ending | None:
        """The one place a finished task is recognised: a turn without tool calls, or a call of
        the ``finish`` tool (whose summary becomes the final answer)."""
        if not resp.tool_calls:
            cut = ", cut at the output-token limit" if resp.finish_reason == "length" else ""
            return Ending.finished(f"the model ended the task (a turn without tool calls{cut})")
        finish = next((c for c in resp.tool_calls if c.name == "finish"), None)
        if finish is None or not self.task.finish_tool:
            return None
        summary = _summary(finish)
        if summary:
            self.final_text = summary
        return Ending.finished("the model called finish")

    @contextlib.asynccontextmanager
    async def _step_span(self, step: int, after: list[str]) -> AsyncIterator[Span]:
        """The step's span, with its step_start / step_end events (step_end however it ends)."""
        span: Span | None = None
        try:
            async with self.tracer.span("step", f"step {step}", after=after, step=step) as span:
                self._emit("step_start", span.id, step=step)
                yield span
        finally:
            if span is not None:
                self._emit(
                    "step_end",
                    span.id,
                    step=step,
                    status=span.status,
                    seconds=((span.t1 or 0) - span.t0) / 1e9,
                )

    async def _model_call(
        self, step: int, conv: Conversation
    ) -> tuple[ModelResponse, str] | Ending:
        """One model call in its span; the answer joins the conversation. A call that failed
        for good ends the run: its span keeps every attempt (and the waits between them)."""
        fit = self.window.fit(conv.messages) if self.window is not None else None
        if fit is not None and not fit.fits:  # every tool output trimmed, still too big
            return Ending.limit_reached(
                "context",
                f"the request needs about {fit.estimated} "
                f"input tokens, over the {fit.budget} the context "
                "window leaves beside room for the answer",
            )
        request = ModelRequest(messages=tuple(conv.messages), tools=self.specs, step=step)
        async with self.tracer.span(
            "model", f"chat {self.tier.model}", after=conv.after, step=step
        ) as span:
            self._emit("model_start", span.id, step=step)
            if fit is not None:
                self._record_fit(span, fit)

            def progress(tokens: int, elapsed_s: float) -> None:
                self._emit(
                    "model_progress", span.id, step=step, output_tokens=tokens, elapsed_s=elapsed_s
                )

            try:
                async with call_progress(
                    progress if wants(self.events, "model_progress") else None
                ):
                    resp = await self.client.complete(request)
            except ModelError as exc:
                failed: ModelError | None = exc
                span.set(**failed_model_attrs(exc, self.tracer, self.tier, step))
                span.status = "error"
            else:
                failed = None
                span.set(**model_attrs(resp, self.tracer, self.tier, step))
        if failed is not None:
            self._emit(
                "model_end",
                span.id,
                step=step,
                seconds=((span.t1 or 0) - span.t0) / 1e9,
                attempts=len(failed.attempts),
                error=failed.message,
            )
            return Ending.failed(failed.message)
        if self.window is not None:
            self.window.observe(resp.usage.input_tokens)
        conv.messages.append(replayable(resp.as_message()))
        if resp.text:
            self.final_text = resp.text
        self.output_tokens += resp.usage.output_tokens
        self.cost_usd += span.attrs.get(A.COST_USD) or 0.0
        self.log.debug(
            "model call",
            step=step,
            call_s=span.attrs.get(A.CALL_S),
            output_tokens=resp.usage.output_tokens,
            tool_calls=len(resp.tool_calls),
        )
        self._emit(
            "model_end",
            span.id,
            step=step,
            seconds=((span.t1 or 0) - span.t0) / 1e9,
            usage=resp.usage,
            attempts=len(resp.attempts),
            text=resp.text,
            tool_calls=resp.tool_calls,
        )
        return resp, span.id

    def _record_fit(self, span: Span, fit: Fit) -> None:
        """Each trim as a ``context.trim`` event of the model span, and the fit in its attrs."""
        trims = [t.as_dict() for t in fit.trims]
        for trim in trims:
            self.tracer.event(span, A.EVENT_CONTEXT_TRIM, **trim)
        span.set(**{A.CONTEXT_ESTIMATED_TOKENS: fit.estimated, A.CONTEXT_TRIMMED: trims})

    async def _tool_calls(
        self, step: int, calls: tuple[ToolCall, ...], model_id: str, cut: bool = False
    ) -> tuple[list[ToolResult], list[str]]:
        """Run a turn's calls concurrently (bounded); results and span ids in call order.
        ``cut``: the turn ended at the output-token limit (said in a bad-arguments error)."""

        async def one(call: ToolCall) -> tuple[ToolResult, str]:
            t_q = time.perf_counter_ns()
            async with self._sem:
                queued = time.perf_counter_ns() - t_q
                async with self.tracer.span(
                    "tool", f"execute_tool {call.name}", after=[model_id], step=step
                ) as span:
                    self._emit("tool_start", span.id, step=step, name=call.name, call_id=call.id)
                    res = await self._execute(call, cut)
                    span.set(
                        **{
                            A.GEN_AI_TOOL_NAME: call.name,
                            A.GEN_AI_TOOL_CALL_ID: call.id,
                            A.ARGUMENTS: call.arguments,
                            A.OK: res.ok,
                            A.OUTPUT: res.output,
                            A.DATA: res.data,
                            A.QUEUED_NS: queued,
                        }
                    )
                    if not res.ok:
                        span.status = "error"
            self._emit(
                "tool_end",
                span.id,
                step=step,
                name=call.name,
                ok=res.ok,
                seconds=((span.t1 or 0) - span.t0) / 1e9,
                output=res.output,
            )
            return res, span.id

        async with asyncio.TaskGroup() as tg:
            jobs = [tg.create_task(one(call)) for call in calls]
        done = [job.result() for job in jobs]
        return [res for res, _ in done], [span_id for _, span_id in done]

    async def _execute(self, call: ToolCall, cut: bool = False) -> ToolResult:
        """Run one tool call; every failure becomes a result the model sees."""
        if call.name == "finish" and self.task.finish_tool:
            return ToolResult(ok=True, output="Task finished.")
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(s.name for s in self.specs)
            return ToolResult(
                ok=False, output=f"Error: unknown tool '{call.name}'. Available tools: {known}."
            )
        try:
            args = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError as exc:
            why = CUT_SHORT if cut else ""
            return ToolResult(
                ok=False,
                output=f"Error: arguments of '{call.name}' are not valid JSON ({exc}){why}.",
            )
        if not isinstance(args, dict):
            return ToolResult(
                ok=False, output=f"Error: arguments of '{call.name}' must be a JSON object."
            )
        try:
            async with asyncio.timeout(self.task.limits.tool_timeout_s):
                return await tool(self.ctx, args)
        except TimeoutError:
            return ToolResult(
                ok=False,
                output=f"Error: tool '{call.name}' timed out after "
                f"{self.task.limits.tool_timeout_s:g} s.",
            )
        except Exception as exc:  # a tool bug must not crash the run: the model sees it
            self.log.warning("tool raised", tool=call.name, error=str(exc))
            return ToolResult(
                ok=False, output=f"Error: tool '{call.name}' failed: {type(exc).__name__}: {exc}"
            )


def _summary(call: ToolCall) -> str:
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return ""
    return str(args.get("summary", "")) if isinstance(args, dict) else ""
