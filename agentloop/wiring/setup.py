"""A run's set-up, timed as the root ``setup`` span and its parts; what the run starts from.

The parts: the working copy, the jail and setup commands, the model clients, the MCP servers.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentloop.config.tasks import Task
from agentloop.export import live_sinks
from agentloop.protocols import ModelClient, Tool
from agentloop.redact import redactor, secret_values, truncator
from agentloop.sandbox import taskenv
from agentloop.sandbox import workspace as ws
from agentloop.sandbox.context import RunContext, ToolSettings
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import JsonlSink, Pipeline
from agentloop.wiring.clients import model_client, substitute, tree_clients
from agentloop.wiring.config import RunConfig, RunPlan, SuiteScope

MAX_TRACE_STRING = 64_000  # longer strings in a trace record are cut (and say so)


@dataclass(frozen=True)
class Ready:
    """What the set-up made, for the run: its place and context, its clients, its tools (the
    MCP servers' added) and the task with its ``mcp:`` entries expanded."""

    place: ws.Place
    ctx: RunContext
    client: ModelClient
    clients: dict[tuple[str, str], ModelClient]
    registry: dict[str, Tool]
    task: Task
    mcp_record: list[dict[str, Any]] | None


async def prepare(plan: RunPlan, config: RunConfig) -> tuple[ws.Place, RunContext]:
    """The run's working copy, its jail (setup run in it) and what its tools may touch."""
    task = plan.task
    task_env = taskenv.current()  # the jail shows the task's venv read-only
    place = await ws.prepare_run(
        task,
        readonly=task_env.readonly if task_env else (),
        path_prefix=task_env.path_prefix if task_env else (),
        # a real model's commands are hostile input: no jail, no run, unless asked for
        require_jail=config.client is None and not plan.tier.simulated and not config.unconfined,
    )
    ctx = RunContext(
        workspace=place.path,
        jail=place.jail,
        settings=ToolSettings(
            test_command=task.test_command,
            allow_hosts=task.allow_hosts,
            tool_timeout_s=task.limits.tool_timeout_s,
        ),
    )
    return place, ctx


async def open_mcp(
    task: Task, registry: dict[str, Tool], ctx: RunContext, stack: contextlib.AsyncExitStack
) -> tuple[dict[str, Tool], Task, list[dict[str, Any]]]:
    """The task's MCP servers started in the run's jail, their tools added to the registry and
    the task's ``mcp:`` entries expanded to their names; the set-up's record for the header."""
    from agentloop_tools.mcp_tools import open_servers

    offered = {n for n in task.tools if n in registry} | ({"finish"} if task.finish_tool else set())
    found, names, record = await open_servers(task.mcp_servers, task.tools, ctx, offered, stack)
    return {**registry, **found}, replace(task, tools=names), record


def open_sink(path: Path, config: RunConfig) -> Pipeline:
    """The run's trace sinks: the JSONL file and any live ones, behind the redactor."""
    return Pipeline(
        [JsonlSink(path), *live_sinks(config.otlp)],  # otlp: issue 13
        [redactor(secret_values()), truncator(MAX_TRACE_STRING)],
    )


def setup_span(tracer: Tracer | None) -> contextlib.AbstractAsyncContextManager[Any]:
    """The set-up's root span (kind ``setup``, before the run span), if the trace is open."""
    return tracer.span("setup", "set-up") if tracer is not None else contextlib.nullcontext()


def setup_part(tracer: Tracer | None, name: str) -> contextlib.AbstractAsyncContextManager[Any]:
    """One part of the set-up, a span under the setup span."""
    return tracer.span("setup", name) if tracer is not None else contextlib.nullcontext()


async def check(task: Task, place: ws.Place, final_text: str) -> dict[str, Any]:
    """The task's success check, run in the run's jail."""
    return await ws.check_success(task, place.path, final_text, place.jail, tests=place.tests)


async def set_up(
    plan: RunPlan,
    config: RunConfig,
    tracer: Tracer | None,
    stack: contextlib.AsyncExitStack,
    registry: dict[str, Tool],
    places: list[ws.Place],
) -> Ready:
    """The parts of the set-up, in order, each resource closed by ``stack``; the place is
    appended to ``places`` as soon as it exists (the caller closes it whatever happens)."""
    task, scope = plan.task, config.suite or SuiteScope()
    script = tuple(config.script) if config.script is not None else task.script
    async with setup_part(tracer, "workspace"):  # the copy, the jail, setup commands
        place, ctx = await prepare(plan, config)
    places.append(place)
    stack.push_async_callback(ctx.aclose)
    open_model = scope.models or model_client
    async with setup_part(tracer, "model client"):
        client = (
            config.client
            if config.client is not None
            else await stack.enter_async_context(
                open_model(plan.tier, substitute(script, place.path))
            )
        )
        clients = await tree_clients(stack, plan, config, open_model, place.path)
    mcp_record = None
    if task.mcp_servers:  # once per run, before its start gate and trace (a clash, exit 2,
        # leaves no trace file); stopped with the run (issue 25)
        registry, task, mcp_record = await open_mcp(task, registry, ctx, stack)
    return Ready(place, ctx, client, clients, registry, task, mcp_record)
