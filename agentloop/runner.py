"""The agent loop: call the model, run the turn's tool calls concurrently, feed results back, repeat.

The loop ends in exactly one place (:meth:`Runner.run`): the model finishes (a turn without tool
calls, or the ``finish`` tool), a limit is hit (steps, output tokens, wall time), a model call fails
for good, or the calling task is cancelled. Whatever happens, ``finally`` closes the trace with an
end record. Only the runner opens spans; clients report timings as data, tools know nothing of
tracing. Every span records ``after``: the spans it had to wait for (the graph what-if re-times).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentloop import __version__, cost
from agentloop.context import RunContext
from agentloop.errors import AgentloopError, Finished, LimitReached, RunEnded
from agentloop.events import EventSink, Observer, RunEvent, call_progress, fan_out, observer_sink
from agentloop.log import get_logger
from agentloop.protocols import ModelClient, Tool
from agentloop.tasks import Task
from agentloop.tiers import Tier
from agentloop.trace.tracer import Span, Tracer
from agentloop.types import Message, ModelRequest, ModelResponse, ToolCall, ToolResult, ToolSpec

FINISH = ToolSpec(
    name="finish",
    description="End the task. Call this once the work is done and checked; say what you did.",
    parameters={"type": "object", "properties": {"summary": {
        "type": "string", "description": "What was done and how it was checked."}},
        "required": ["summary"], "additionalProperties": False},
)

__all__ = ["FINISH", "Observer", "RunResult", "Runner", "model_attrs"]


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


def _seconds(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else (b - a) / 1e9


def model_attrs(resp: ModelResponse, tracer: Tracer, tier: Tier, step: int) -> dict[str, Any]:
    """The end attributes of a model span (docs/design.md), from a client's response."""
    t, u = resp.timing, resp.usage
    rel = tracer.rel
    ttft_visible = _seconds(t.t_send, t.t_first_visible)
    decode = _seconds(t.t_first_visible, t.t_last)
    tpot = decode / (u.visible_tokens - 1) if decode and u.visible_tokens >= 2 else None
    wait_ns = sum(a.wait_ns for a in resp.attempts)
    return {
        "step": step, "tier": tier.name,
        "gen_ai.request.model": tier.model, "gen_ai.response.model": resp.model,
        "gen_ai.usage.input_tokens": u.input_tokens,
        "gen_ai.usage.output_tokens": u.output_tokens,
        "gen_ai.usage.reasoning.output_tokens": u.reasoning_tokens,
        "gen_ai.usage.cached_input_tokens": u.cached_input_tokens,
        cost.COST_ATTR: cost.call_cost(tier.prices, u.input_tokens, u.cached_input_tokens,
                                       u.output_tokens),
        "gen_ai.response.time_to_first_chunk": _seconds(t.t_send, t.t_first),
        "gen_ai.response.finish_reasons": [resp.finish_reason] if resp.finish_reason else [],
        "service_tier": resp.service_tier,
        "timing": {"t_send": rel(t.t_send), "t_hdr": rel(t.t_hdr), "t_first": rel(t.t_first),
                   "t_first_visible": rel(t.t_first_visible), "t_last": rel(t.t_last),
                   "t_end": rel(t.t_end), "chunks": t.chunks, "build_ns": t.build_ns},
        "ttfb_s": _seconds(t.t_send, t.t_hdr), "ttft_s": _seconds(t.t_send, t.t_first),
        "ttft_visible_s": ttft_visible, "decode_s": decode, "tpot_s": tpot,
        "output_tps": (1 / tpot) if tpot else None, "call_s": _seconds(t.t_send, t.t_end),
        "tokens_per_chunk": (u.output_tokens / t.chunks) if t.chunks else None,
        "attempts": [{"t_start": rel(a.t_start), "t_end": rel(a.t_end), "error": a.error,
                      "status": a.status, "wait_ns": a.wait_ns} for a in resp.attempts],
        "wait_ns": wait_ns,
        "output": {"text": resp.text, "reasoning_tokens": u.reasoning_tokens,
                   "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                  for c in resp.tool_calls]},
    }


class Runner:
    """Runs one task with one model client and a set of tools, writing spans to ``tracer``."""

    def __init__(self, task: Task, client: ModelClient, tools: dict[str, Tool], tier: Tier,
                 tracer: Tracer, ctx: RunContext, *, run_id: str | None = None,
                 observer: Observer | None = None,
                 check: Callable[[str], Awaitable[dict[str, Any]]] | None = None,
                 events: EventSink | None = None) -> None:
        self.task, self.client, self.tier, self.tracer, self.ctx = task, client, tier, tracer, ctx
        self.tools = {name: tools[name] for name in task.tools if name in tools}
        self.specs = tuple(t.spec for t in self.tools.values()) + (
            (FINISH,) if task.finish_tool else ())
        self.run_id = run_id or uuid.uuid4().hex[:12]
        # one event stream (agentloop.events); the old observer callback is an adapter over it
        self.events = fan_out(events, observer_sink(observer) if observer else None)
        self.log = get_logger("agentloop.runner", run_id=self.run_id)
        self.output_tokens = 0
        self.cost_usd = 0.0  # at the tier's prices (agentloop/cost.py)
        self.final_text = ""
        self.check = check
        self.steps = 0
        self._sem = asyncio.Semaphore(task.limits.max_parallel_tools)

    def _emit(self, kind: str, span_id: str | None = None, **data: Any) -> None:
        if self.events is not None:
            try:
                self.events(RunEvent(kind, self.run_id, self.tracer.now() / 1e9,
                                     data.get("step"), span_id, data))
            except Exception as exc:  # a broken progress display must not end the run
                self.log.warning("event sink failed", error=str(exc))

    def write_header(self) -> None:
        self.tracer.header(
            run_id=self.run_id, agentloop=__version__,
            task={"name": self.task.name, "prompt": self.task.prompt, "system": self.task.system,
                  "source": str(self.task.source) if self.task.source else None},
            tier=self.tier.summary(),
            tools=[{"name": s.name, "description": s.description, "parameters": s.parameters}
                   for s in self.specs],
            limits=dataclasses.asdict(self.task.limits), workspace=str(self.ctx.workspace),
            sandbox=self.ctx.jail.confinement if self.ctx.jail is not None else None,
        )

    async def run(self) -> RunResult:
        """Run the loop to its end; ``finally`` closes the trace whatever happens.

        ``check`` (given to the constructor) runs after the loop unless the run was cancelled or
        crashed: it is the task's success check, outside the run span's time.
        """
        self.write_header()
        status, reason, crashed = "error", "internal error", True
        t_start = time.perf_counter()
        success: dict[str, Any] | None = None
        try:
            async with self.tracer.span("run", f"invoke_agent {self.task.name}") as run_span:
                self._emit("run_start", run_span.id, task=self.task.name, tier=self.tier.name)
                try:
                    async with asyncio.timeout(self.task.limits.timeout_s) as deadline:
                        await self._loop()
                except TimeoutError:
                    if not deadline.expired():
                        raise
                    raise LimitReached("timeout", f"wall-time limit of "
                                       f"{self.task.limits.timeout_s:g} s reached") from None
        except RunEnded as ended:
            status, reason, crashed = ended.status, ended.message, False
        except AgentloopError as exc:
            status, reason, crashed = "error", exc.message, False
        except asyncio.CancelledError:
            status, reason, crashed = "cancelled", "the run was cancelled", False
            raise
        except BaseException as exc:  # a bug: the trace is closed, then the error surfaces
            reason = f"internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            end_t = self.tracer.now()
            elapsed = time.perf_counter() - t_start
            if self.check is not None and status != "cancelled" and not crashed:
                success = await self.check(self.final_text)
            self.tracer.end(status, t=end_t, reason=reason, steps=self.steps,
                            totals={"output_tokens": self.output_tokens,
                                    "elapsed_s": elapsed}, success=success)
            self._emit("run_end", None, status=status, reason=reason, steps=self.steps,
                       elapsed_s=elapsed, success=success)
        return RunResult(self.run_id, status, reason, self.steps, self.final_text, elapsed,
                         success=None if not success or success.get("passed") is None
                         else bool(success["passed"]),
                         success_detail=str(success.get("detail", "")) if success else "",
                         totals={"output_tokens": self.output_tokens})

    async def _loop(self) -> None:
        task = self.task
        messages: list[Message] = [Message("system", task.system), Message("user", task.prompt)]
        after: list[str] = []  # what the next model call waits for
        prev_step: list[str] = []
        for step in range(1, task.limits.max_steps + 1):
            self.steps = step
            async with self._step_span(step, prev_step) as st:
                resp, model_id = await self._model_call(step, messages, after)
                messages.append(resp.as_message())
                if resp.text:
                    self.final_text = resp.text
                if self.output_tokens > task.limits.max_output_tokens:
                    raise LimitReached("output_tokens", f"output-token limit of "
                                       f"{task.limits.max_output_tokens} reached "
                                       f"({self.output_tokens} tokens)")
                cost.check_limit(task.limits.max_cost_usd, self.cost_usd)
                if not resp.tool_calls:
                    raise Finished("the model ended the task (a turn without tool calls)")
                results, tool_ids = await self._tool_calls(step, resp.tool_calls, model_id)
                for call, res in zip(resp.tool_calls, results, strict=True):
                    messages.append(Message("tool", res.output, tool_call_id=call.id,
                                            name=call.name))
                finish = next((c for c in resp.tool_calls if c.name == "finish"), None)
                if finish is not None and task.finish_tool:
                    summary = _summary(finish)
                    if summary:
                        self.final_text = summary
                    raise Finished("the model called finish")
                after = tool_ids
                prev_step = [st.id]
        raise LimitReached("steps", f"step limit of {task.limits.max_steps} reached")

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
                self._emit("step_end", span.id, step=step, status=span.status,
                           seconds=((span.t1 or 0) - span.t0) / 1e9)

    async def _model_call(self, step: int, messages: list[Message],
                          after: list[str]) -> tuple[ModelResponse, str]:
        request = ModelRequest(messages=tuple(messages), tools=self.specs, step=step)
        async with self.tracer.span("model", f"chat {self.tier.model}", after=after,
                                    step=step) as span:
            self._emit("model_start", span.id, step=step)

            def progress(tokens: int, elapsed_s: float) -> None:
                self._emit("model_progress", span.id, step=step, output_tokens=tokens,
                           elapsed_s=elapsed_s)

            async with call_progress(progress if self.events is not None else None):
                resp = await self.client.complete(request)
            span.set(**model_attrs(resp, self.tracer, self.tier, step))
        self.output_tokens += resp.usage.output_tokens
        self.cost_usd += span.attrs.get(cost.COST_ATTR) or 0.0
        self.log.debug("model call", step=step, call_s=span.attrs.get("call_s"),
                      output_tokens=resp.usage.output_tokens, tool_calls=len(resp.tool_calls))
        self._emit("model_end", span.id, step=step, seconds=((span.t1 or 0) - span.t0) / 1e9,
                   usage=resp.usage,
                   attempts=len(resp.attempts), text=resp.text, tool_calls=resp.tool_calls)
        return resp, span.id

    async def _tool_calls(self, step: int, calls: tuple[ToolCall, ...],
                          model_id: str) -> tuple[list[ToolResult], list[str]]:
        """Run a turn's calls concurrently (bounded); results and span ids in call order."""

        async def one(call: ToolCall) -> tuple[ToolResult, str]:
            t_q = time.perf_counter_ns()
            async with self._sem:
                queued = time.perf_counter_ns() - t_q
                async with self.tracer.span("tool", f"execute_tool {call.name}", after=[model_id],
                                            step=step) as span:
                    self._emit("tool_start", span.id, step=step, name=call.name,
                               call_id=call.id)
                    res = await self._execute(call)
                    span.set(**{"gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.id,
                                "arguments": call.arguments, "ok": res.ok, "output": res.output,
                                "data": res.data, "queued_ns": queued})
                    if not res.ok:
                        span.status = "error"
            self._emit("tool_end", span.id, step=step, name=call.name, ok=res.ok,
                       seconds=((span.t1 or 0) - span.t0) / 1e9, output=res.output)
            return res, span.id

        async with asyncio.TaskGroup() as tg:
            jobs = [tg.create_task(one(call)) for call in calls]
        done = [job.result() for job in jobs]
        return [res for res, _ in done], [span_id for _, span_id in done]

    async def _execute(self, call: ToolCall) -> ToolResult:
        """Run one tool call; every failure becomes a result the model sees."""
        if call.name == "finish" and self.task.finish_tool:
            return ToolResult(ok=True, output="Task finished.")
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(s.name for s in self.specs)
            return ToolResult(ok=False, output=f"Error: unknown tool '{call.name}'. "
                              f"Available tools: {known}.")
        try:
            args = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError as exc:
            return ToolResult(ok=False, output=f"Error: arguments of '{call.name}' are not valid "
                              f"JSON ({exc}).")
        if not isinstance(args, dict):
            return ToolResult(ok=False, output=f"Error: arguments of '{call.name}' must be a JSON "
                              f"object.")
        try:
            async with asyncio.timeout(self.task.limits.tool_timeout_s):
                return await tool(self.ctx, args)
        except TimeoutError:
            return ToolResult(ok=False, output=f"Error: tool '{call.name}' timed out after "
                              f"{self.task.limits.tool_timeout_s:g} s.")
        except RunEnded:
            raise
        except Exception as exc:  # a tool bug must not crash the run: the model sees it
            self.log.warning("tool raised", tool=call.name, error=str(exc))
            return ToolResult(ok=False, output=f"Error: tool '{call.name}' failed: "
                              f"{type(exc).__name__}: {exc}")


def _summary(call: ToolCall) -> str:
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return ""
    return str(args.get("summary", "")) if isinstance(args, dict) else ""
