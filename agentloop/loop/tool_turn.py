"""A turn's tool calls: run concurrently under the task's bound, each in a span, results in order.

:class:`ToolTurn` is the runner's tool side (:meth:`agentloop.loop.runner.Runner._step`): a
``tool`` span per call after the model span that asked for it, its queueing time before the
bound let it through, the ``tool_start``/``tool_end`` events, and the call itself through
:func:`agentloop.loop.tool_call.run_call` (every failure a result the model sees). A sub-agent's
tool keeps time by its own wall-time limit, not a tool's.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agentloop.config.limits import Limits
from agentloop.loop.run_events import RunEvents
from agentloop.loop.subagent import AgentTool
from agentloop.loop.tool_call import run_call, tool_attrs
from agentloop.protocols import Tool
from agentloop.sandbox.context import RunContext
from agentloop.trace.tracer import Tracer
from agentloop.types import ToolCall, ToolResult, ToolSpec


@dataclass
class ToolTurn:
    """What running a turn's tool calls needs of its run: the tools offered, their limits, the
    trace and event stream, and the bound on calls at once (one per run, made here)."""

    tools: dict[str, Tool]
    specs: tuple[ToolSpec, ...]
    ctx: RunContext
    limits: Limits
    finish_tool: bool
    tracer: Tracer
    emit: RunEvents
    log: Any  # the run's bound logger (agentloop.log.get_logger)
    span_attrs: dict[str, Any]
    _sem: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self._sem = asyncio.Semaphore(self.limits.max_parallel_tools)

    async def run(
        self, step: int, calls: tuple[ToolCall, ...], model_id: str, cut: bool = False
    ) -> tuple[list[ToolResult], list[str]]:
        """Run a turn's calls concurrently (bounded); results and span ids in call order.
        ``cut``: the turn ended at the output-token limit (said in a bad-arguments error)."""

        async def one(call: ToolCall) -> tuple[ToolResult, str]:
            t_q = time.perf_counter_ns()
            async with self._sem:
                queued = time.perf_counter_ns() - t_q
                async with self.tracer.span(
                    "tool",
                    f"execute_tool {call.name}",
                    after=[model_id],
                    step=step,
                    **self.span_attrs,
                ) as span:
                    self.emit.tool_start(span, step, call)
                    res = await self.execute(call, cut)
                    span.set(**tool_attrs(call, res, queued))
                    # a tool may name more of itself for its spans (an MCP tool: mcp.server)
                    span.set(**getattr(self.tools.get(call.name), "span_attrs", None) or {})
                    if not res.ok:
                        span.status = "error"
            self.emit.tool_end(span, step, call, res)
            return res, span.id

        async with asyncio.TaskGroup() as tg:
            jobs = [tg.create_task(one(call)) for call in calls]
        done = [job.result() for job in jobs]
        return [res for res, _ in done], [span_id for _, span_id in done]

    async def execute(self, call: ToolCall, cut: bool = False) -> ToolResult:
        """Run one tool call (:func:`agentloop.loop.tool_call.run_call`): every failure is a
        result the model sees."""
        sub = self.tools.get(call.name)
        timeout_s = self.limits.tool_timeout_s
        if isinstance(sub, AgentTool):  # a sub-run keeps time by its own limit, not a tool's
            timeout_s = max(timeout_s, sub.agent.limits.timeout_s + 5.0)
        return await run_call(
            call,
            self.tools,
            self.specs,
            self.ctx,
            timeout_s=timeout_s,
            finish_tool=self.finish_tool,
            log=self.log,
            cut=cut,
        )
