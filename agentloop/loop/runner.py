"""The agent loop: call the model, run the turn's tool calls concurrently, feed results back, repeat.

:meth:`Runner._loop` steps; a step (:meth:`Runner._step`) is one model call
(:meth:`Runner._model_call`) then the turn's tool calls (:class:`~agentloop.loop.tool_turn.ToolTurn`). The loop
ends with a value, not an exception: each step returns ``None`` (go on) or an
:class:`agentloop.loop.ending.Ending` (status, reason): the model finished (a turn without tool
calls, or the ``finish`` tool: recognised in :meth:`Runner._finished` only), a limit was hit
(:meth:`Runner._over_limit`: output tokens, cost; the step and wall-time limits around the loop;
the context window before a call), or a model call failed for good (its attempts go into the
model span). Cancellation is the one exception that travels. Whatever happens, ``finally``
writes the end record, even when the success check raises or is cancelled. Only the runner
opens spans; clients report timings as data, tools know nothing of tracing. Every span records
``after``: the spans it had to wait for (the graph what-if re-times).

The features live beside the loop, each in a module of its own: the limits and the result
(:mod:`~agentloop.loop.ending`), the context budget (:mod:`~agentloop.loop.context_window`), a
model span's attributes (:mod:`~agentloop.loop.model_span`) and the call inside it
(:mod:`~agentloop.loop.model_call`), a turn's tool calls (:mod:`~agentloop.loop.tool_turn`) and
one call's span attributes (:mod:`~agentloop.loop.tool_call`), the live events
(:mod:`~agentloop.loop.run_events`), the header (:mod:`~agentloop.loop.header`), the success
check (:mod:`~agentloop.loop.check`), a step's carry and verdicts (:mod:`~agentloop.loop.step`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any

from agentloop.config.routing import Routing
from agentloop.config.tasks import Agent, Task
from agentloop.config.tiers import Tier
from agentloop.errors import AgentloopError, ModelError
from agentloop.events import EventSink, Observer, fan_out, observer_sink
from agentloop.log import get_logger
from agentloop.loop.check import Check, run_check
from agentloop.loop.context_window import Window
from agentloop.loop.ending import CANCELLED, Ending, RunResult, context_limit
from agentloop.loop.header import header_fields, offered_specs
from agentloop.loop.model_call import complete, record_fit
from agentloop.loop.model_span import replayable
from agentloop.loop.run_events import RunEvents
from agentloop.loop.step import Conversation, finished, over_limit
from agentloop.loop.subagent import AgentScope, run_tools, sub_result, sub_task
from agentloop.loop.tool_call import FINISH
from agentloop.loop.tool_turn import ToolTurn
from agentloop.protocols import ModelClient, Tool
from agentloop.sandbox.context import RunContext
from agentloop.trace import attrs as A
from agentloop.trace.tracer import Span, Tracer
from agentloop.types import Message, ModelRequest, ModelResponse, ToolResult

# the header is header.py's; the composition root (agentloop/wiring/) imports it from here
__all__ = ["Runner", "header_fields", "offered_specs"]


class Runner:
    """Runs one task with a model client per tier and a set of tools, writing spans to ``tracer``.

    A sub-agent's run is a Runner too (``scope`` says which; ``parent`` is its caller): it
    shares the trace, workspace, jail, clients and the run-wide budgets of its root.
    """

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
        check: Check | None = None,
        events: EventSink | None = None,
        routing: Routing | None = None,
        tiers: Mapping[str, Tier] | None = None,
        clients: Mapping[tuple[str, str], ModelClient] | None = None,
        scope: AgentScope | None = None,
        parent: Runner | None = None,
        mcp_servers: list[dict[str, Any]] | None = None,
    ) -> None:
        self.mcp_servers = mcp_servers  # the header's record of the MCP servers' set-up
        self.task, self.client, self.tier, self.tracer, self.ctx = task, client, tier, tracer, ctx
        self.registry = tools
        self.routing = routing or Routing()
        self.tiers: Mapping[str, Tier] = tiers or {tier.name: tier}  # every tier, main's first
        self.clients = clients or {}  # (agent, tier name) -> client; else ``client``
        self.scope, self.parent = scope, parent
        self.root: Runner = parent.root if parent is not None else self
        self.agent_name = scope.name if scope else A.MAIN_AGENT
        self.span_attrs = scope.span_attrs() if scope else {}
        self.invocations: Counter[str] = Counter()  # the root's: invocations per agent
        self.tools = run_tools(task, tools, self)  # the sub-agents as tools too
        self.specs = tuple(t.spec for t in self.tools.values()) + (
            (FINISH,) if task.finish_tool else ()
        )
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.log = get_logger("agentloop.loop.runner", run_id=self.run_id)
        # one event stream (agentloop.events); the old observer callback is an adapter over it
        sink = fan_out(events, observer_sink(observer) if observer else None)
        self.emit = RunEvents(
            sink, self.run_id, tracer, self.log, agent=scope.name if scope else None
        )
        self.output_tokens = 0  # this agent's own
        self.cost_usd = 0.0  # at each call's tier's prices (agentloop/model/prices.py)
        # the whole run's, counted across every agent (the root's are the ones that count)
        self.all_steps, self.all_output_tokens, self.all_cost_usd = 0, 0, 0.0
        self.final_text = ""
        self.check = check
        self.steps = 0
        self.window = Window.for_tier(tier, self.specs)  # context budget (context_window.py)
        self.turn = self._tool_turn()  # the turn's tool calls (tool_turn.py)
        self.header_written = False  # True: line 1 went out before the set-up (issue 24)

    def _tool_turn(self) -> ToolTurn:
        """What the turn's tool calls need of this run (made once, in ``__init__``)."""
        return ToolTurn(
            self.tools,
            self.specs,
            self.ctx,
            self.task.limits,
            self.task.finish_tool,
            self.tracer,
            self.emit,
            self.log,
            self.span_attrs,
        )

    @property
    def events(self) -> EventSink | None:
        """The run's event sink (:class:`agentloop.loop.run_events.RunEvents` builds each)."""
        return self.emit.sink

    @events.setter
    def events(self, sink: EventSink | None) -> None:
        self.emit.sink = sink

    def write_header(self) -> None:
        """Line 1, unless :func:`write_early_header` wrote it before the set-up (issue 24)."""
        if self.header_written:
            return
        self.tracer.header(
            **header_fields(
                self.run_id,
                self.task,
                self.specs,
                self.tier,
                self.tiers,
                self.routing,
                self.mcp_servers,
            ),
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
                    success = await run_check(self.check, self.final_text, self.tracer, self.log)
            except asyncio.CancelledError:
                ending = CANCELLED
                raise
            finally:
                self._end(ending, end_t, elapsed, success)
        return RunResult.of(
            self.run_id,
            ending,
            self.steps,
            self.final_text,
            elapsed,
            success,
            {"output_tokens": self.all_output_tokens},
        )

    def _end(
        self, ending: Ending, end_t: int, elapsed: float, success: dict[str, Any] | None
    ) -> None:
        """The trace's end record and the ``run_end`` event."""
        self.tracer.end(
            ending.status,
            t=end_t,
            reason=ending.reason,
            steps=self.steps,
            totals={"output_tokens": self.all_output_tokens, "elapsed_s": elapsed},
            success=success,
        )
        self.emit.run_end(ending, self.steps, elapsed, success)

    async def _run_span(self) -> Ending:
        """The run span around the loop, under the wall-time limit."""
        async with self.tracer.span("run", f"invoke_agent {self.task.name}") as run_span:
            self.emit.emit("run_start", run_span.id, task=self.task.name, tier=self.tier.name)
            ending = await self._timed_loop()
            if ending.status == "error":
                run_span.status = "error"
            return ending

    async def _timed_loop(self) -> Ending:
        """The loop under the task's (or sub-agent's) wall-time limit: reaching it is an ending."""
        limit = self.task.limits.timeout_s
        try:
            async with asyncio.timeout(limit) as deadline:
                return await self._loop()
        except TimeoutError:
            if not deadline.expired():
                raise
            return Ending.limit_reached("timeout", f"wall-time limit of {limit:g} s reached")

    async def _loop(self) -> Ending:
        """Step until a step says how the run ended, or the step limit (this agent's own, or
        the run's across every agent)."""
        conv = Conversation(
            [Message("system", self.task.system), Message("user", self.task.prompt)]
        )
        root_limit = self.root.task.limits.max_steps
        for step in range(1, self.task.limits.max_steps + 1):
            if self.root.all_steps >= root_limit:
                return Ending.limit_reached(
                    "steps", f"the run's step limit of {root_limit} reached (all agents)"
                )
            self.steps = step
            self.root.all_steps += 1
            ending = await self._step(step, conv)
            if ending is not None:
                return ending
        return Ending.limit_reached("steps", f"step limit of {self.task.limits.max_steps} reached")

    async def invoke(self, agent: Agent, text: str) -> ToolResult:
        """Run sub-agent ``agent`` on ``text`` (a call of its tool): its answer, or an error
        result saying how it ended. Cancelling the caller cancels it."""
        root = self.root
        root.invocations[agent.name] += 1
        scope = AgentScope(
            agent.name, root.invocations[agent.name], (self.scope.depth if self.scope else 0) + 1
        )
        task = sub_task(root.task, agent, text, root.tier.name)
        child = Runner(
            task,
            self.client,
            self.registry,
            root.tiers.get(task.tier or "", root.tier),
            self.tracer,
            self.ctx,
            run_id=root.run_id,
            events=root.emit.sink,
            routing=root.routing,
            tiers=root.tiers,
            clients=root.clients,
            scope=scope,
            parent=self,
        )
        return await child._sub_run()

    async def _sub_run(self) -> ToolResult:
        """This sub-run's loop in its ``agent`` span, under its own wall-time limit."""
        assert self.scope is not None
        attrs = {**self.scope.span_attrs(), A.TIER: self.tier.name}
        async with self.tracer.span("agent", f"invoke_agent {self.scope.name}", **attrs) as span:
            ending = await self._timed_loop()
            if ending.status != "ok":
                span.status = "error"
                span.set(**{A.ERROR: ending.reason})
        return sub_result(self.scope.name, ending, self.final_text)

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
                results, conv.after = await self.turn.run(step, resp.tool_calls, model_id, cut)
                conv.messages += [
                    Message("tool", res.output, tool_call_id=call.id, name=call.name)
                    for call, res in zip(resp.tool_calls, results, strict=True)
                ]
            conv.prev_step = [st.id]
            return ending or self._finished(resp)

    def _over_limit(self) -> Ending | None:
        """This agent's limits and the run's, after a model call (:func:`over_limit`)."""
        root = self.root
        return over_limit(
            self.task.limits,
            root.task.limits,
            self.output_tokens,
            self.cost_usd,
            root.all_output_tokens,
            root.all_cost_usd,
        )

    def _finished(self, resp: ModelResponse) -> Ending | None:
        """Whether ``resp`` finished the task (:func:`finished`); a ``finish`` call's summary
        becomes the final answer."""
        ending, summary = finished(resp, self.task.finish_tool)
        if summary:
            self.final_text = summary
        return ending

    @contextlib.asynccontextmanager
    async def _step_span(self, step: int, after: list[str]) -> AsyncIterator[Span]:
        """The step's span, with its step_start / step_end events (step_end however it ends)."""
        span: Span | None = None
        try:
            async with self.tracer.span(
                "step", f"step {step}", after=after, step=step, **self.span_attrs
            ) as span:
                self.emit.emit("step_start", span.id, step=step)
                yield span
        finally:
            if span is not None:
                self.emit.step_end(span, step)

    async def _model_call(
        self, step: int, conv: Conversation
    ) -> tuple[ModelResponse, str] | Ending:
        """One model call in its span; the answer joins the conversation. A call that failed
        for good ends the run: its span keeps every attempt (and the waits between them)."""
        fit = self.window.fit(conv.messages) if self.window is not None else None
        if fit is not None and not fit.fits:  # every tool output trimmed, still too big
            return context_limit(fit.estimated, fit.budget)
        request = ModelRequest(messages=tuple(conv.messages), tools=self.specs, step=step)
        client, tier = self._route(step)
        async with self.tracer.span(
            "model", f"chat {tier.model}", after=conv.after, step=step, **self.span_attrs
        ) as span:
            self.emit.emit("model_start", span.id, step=step)
            if fit is not None:
                record_fit(self.tracer, span, fit)
            answer = await complete(request, span, client, tier, self.tracer, self.emit)
        if isinstance(answer, ModelError):
            self.emit.model_end(span, step, answer)
            return Ending.failed(answer.message)
        self._took(answer, span, conv, step)
        self.emit.model_end(span, step, answer)
        return answer, span.id

    def _route(self, step: int) -> tuple[ModelClient, Tier]:
        """The client and tier of this agent's model call at ``step`` (the routing's choice)."""
        invocation = self.scope.invocation if self.scope else 1
        name = self.routing.tier_for(self.agent_name, invocation, step, self.tier.name)
        tier = self.tiers.get(name, self.tier)
        return self.clients.get((self.agent_name, tier.name), self.client), tier

    def _took(self, resp: ModelResponse, span: Span, conv: Conversation, step: int) -> None:
        """An answer joins the conversation and the run's counts (tokens, cost, final text)."""
        if self.window is not None:
            self.window.observe(resp.usage.input_tokens)
        conv.messages.append(replayable(resp.as_message()))
        if resp.text:
            self.final_text = resp.text
        cost = span.attrs.get(A.COST_USD) or 0.0
        self.output_tokens += resp.usage.output_tokens
        self.cost_usd += cost
        self.root.all_output_tokens += resp.usage.output_tokens
        self.root.all_cost_usd += cost
        self.log.debug(
            "model call",
            step=step,
            call_s=span.attrs.get(A.CALL_S),
            output_tokens=resp.usage.output_tokens,
            tool_calls=len(resp.tool_calls),
        )
