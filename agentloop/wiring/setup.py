"""A run's set-up, timed as the root ``setup`` span and its parts; what the run starts from.

The parts, in order: ``venv`` (the task's environment), ``copy`` (the working copy), ``jail``,
``setup commands``, ``model client``, then ``mcp NAME`` for each MCP server (started together:
its start and tool listing).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentloop.config.tasks import Task
from agentloop.export import live_sinks
from agentloop.loop.loadgate import Pass, RunGate, gate_for_loop
from agentloop.loop.runner import header_fields, offered_specs
from agentloop.protocols import ModelClient, Tool
from agentloop.redact import redactor, secret_values, truncator
from agentloop.sandbox import taskenv
from agentloop.sandbox import workspace as ws
from agentloop.sandbox.context import RunContext, ToolSettings
from agentloop.trace import attrs as A
from agentloop.trace.tracer import Span, Tracer
from agentloop.trace.writer import JsonlSink, Pipeline
from agentloop.wiring.clients import model_client, substitute, tree_clients
from agentloop.wiring.config import RunConfig, RunPlan, SuiteScope

if TYPE_CHECKING:
    from agentloop_tools.mcp_tools import ServerHost

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


def open_sink(path: Path, config: RunConfig) -> Pipeline:
    """The run's trace sinks: the JSONL file and any live ones, behind the redactor."""
    return Pipeline(
        [JsonlSink(path), *live_sinks(config.otlp)],  # otlp: issue 13
        [redactor(secret_values()), truncator(MAX_TRACE_STRING)],
    )


def part(tracer: Tracer, name: str) -> contextlib.AbstractAsyncContextManager[Span]:
    """One part of the set-up, a span of kind ``setup`` under the setup span."""
    return tracer.span("setup", name)


async def prepare(plan: RunPlan, config: RunConfig, tracer: Tracer) -> tuple[ws.Place, RunContext]:
    """The run's working copy, its jail (setup run in it) and what its tools may touch; the
    three stages (copy, jail, setup commands) each a part of the set-up."""
    task = plan.task
    task_env = taskenv.current()  # the jail shows the task's venv read-only
    place = await ws.prepare_run(
        task,
        readonly=task_env.readonly if task_env else (),
        path_prefix=task_env.path_prefix if task_env else (),
        # a real model's commands are hostile input: no jail, no run, unless asked for
        require_jail=config.client is None and not plan.tier.simulated and not config.unconfined,
        stage=functools.partial(part, tracer),
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


async def _timed_start(tracer: Tracer, host: ServerHost, timeout_s: float) -> None:
    """One MCP server's start and tool listing, a part of the set-up: its tools, or why not."""
    async with part(tracer, f"mcp {host.name}") as span:
        await host.start(timeout_s)
        span.set(**{A.MCP_SERVER: host.name, A.MCP_TOOLS: [t.name for t in host.tools]})
        if host.failure is not None:  # the run goes on without its tools; the part says why
            span.status = "error"
            span.set(**{A.ERROR: host.failure})


async def open_mcp(
    task: Task,
    registry: dict[str, Tool],
    ctx: RunContext,
    stack: contextlib.AsyncExitStack,
    tracer: Tracer,
) -> tuple[dict[str, Tool], Task, list[dict[str, Any]]]:
    """The MCP servers the task's and its sub-agents' ``tools:`` name, started in the run's jail
    (one set per run, shared by its agents), their tools added to the registry and each ``mcp:``
    entry expanded to their names; one record per server for the header."""
    from agentloop_tools.mcp_tools import expand, open_servers

    wanted = (*task.tools, *(t for a in task.agents for t in a.tools))
    offered = {n: "the built-in tool" for n in wanted if n in registry}
    offered |= {a.name: "the sub-agent" for a in task.agents}
    offered |= {"finish": "the built-in tool"} if task.finish_tool else {}
    start = functools.partial(_timed_start, tracer)
    found, _, record = await open_servers(
        task.mcp_servers, wanted, ctx, offered, stack, start=start
    )
    agents = tuple(replace(a, tools=expand(a.tools, found)) for a in task.agents)
    return (
        {**registry, **found},
        replace(task, tools=expand(task.tools, found), agents=agents),
        record,
    )


async def check(task: Task, place: ws.Place, final_text: str) -> dict[str, Any]:
    """The task's success check, run in the run's jail."""
    return await ws.check_success(task, place.path, final_text, place.jail, tests=place.tests)


async def set_up(
    plan: RunPlan,
    config: RunConfig,
    tracer: Tracer,
    stack: contextlib.AsyncExitStack,
    registry: dict[str, Tool],
) -> tuple[Ready, dict[str, Any]]:
    """The parts of the set-up, in order, each resource closed by ``stack`` (the place too,
    whatever happens, once it exists): the task's venv, active for the rest of the run; the
    working copy, jail and setup commands; the model clients; the MCP servers; then the start
    gate. With what it made, what it learnt for the header (workspace, sandbox; with MCP
    servers their records and the tools as offered), which the setup span's end carries."""
    task, scope = plan.task, config.suite or SuiteScope()
    async with part(tracer, "venv"):  # built on first use; every task command of the run gets it
        stack.enter_context(taskenv.activate(await taskenv.ensure(task, setup=ws.build_setup)))
    gate = _gate_pass(config, stack)
    place, ctx = await prepare(plan, config, tracer)
    stack.push_async_callback(_closing, place, config.keep_workspace, scope)
    stack.push_async_callback(ctx.aclose)
    learnt: dict[str, Any] = {
        "workspace": str(place.path),
        "sandbox": place.jail.confinement if place.jail is not None else None,
    }
    open_model = scope.models or model_client
    async with part(tracer, "model client"):
        client = config.client
        if client is None:
            script = tuple(config.script) if config.script is not None else task.script
            turns = substitute(script, place.path)
            client = await stack.enter_async_context(open_model(plan.tier, turns))
        clients = await tree_clients(stack, plan, config, open_model, place.path)
    if task.mcp_servers:  # once per run, stopped with the run (issue 25)
        registry, task, learnt["mcp_servers"] = await open_mcp(task, registry, ctx, stack, tracer)
        specs = offered_specs(task, registry)  # the header's tools, with the servers' listed
        learnt["tools"] = header_fields(plan.run_id, task, specs, plan.tier)["tools"]
    if gate is not None:
        await gate[0].start(gate[1])
    return Ready(place, ctx, client, clients, registry, task), learnt


def _gate_pass(config: RunConfig, stack: contextlib.AsyncExitStack) -> tuple[RunGate, Pass] | None:
    """Outside a suite (which has its own start gate), the process's: the run's clock starts
    once the runs setting up beside it are set up (:mod:`agentloop.loop.loadgate`); left at the end."""
    gate = gate_for_loop() if config.suite is None else None
    if gate is None:
        return None
    ticket = gate.arrive()
    stack.callback(gate.leave, ticket)
    return gate, ticket


async def _closing(place: ws.Place, keep: bool, scope: SuiteScope) -> None:
    """The run's end: its jail closes (nothing it started survives), the copy goes unless kept."""
    await asyncio.shield(place.close(keep=keep, closer=scope.closer))
