"""Executing a planned run: task env, start gate, trace, set-up, the loop and the clean-up.

The trace opens at the run's first moment; the set-up is its root ``setup`` span.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import replace

from agentloop.errors import ConfigError
from agentloop.loadgate import Pass, RunGate, gate_for_loop
from agentloop.loop.ending import RunResult
from agentloop.loop.runner import Runner, header_fields, offered_specs
from agentloop.protocols import Tool
from agentloop.sandbox import taskenv
from agentloop.sandbox import workspace as ws
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import Pipeline
from agentloop.wiring.config import RunConfig, RunPlan, SuiteScope, tool_registry
from agentloop.wiring.setup import Ready, check, open_sink, set_up, setup_span


def refuse_unscripted(plan: RunPlan, config: RunConfig) -> None:
    """A task without ``script:`` on a simulated tier would get filler text and report ``ok``:
    refused before the run (issue 10a)."""
    if config.client is None and plan.tier.simulated and not plan.task.script and not config.script:
        raise ConfigError(
            f"task '{plan.task.name}' has no script, and tier '{plan.tier.name}' is the "
            "simulator, which plays only scripted turns (it would answer with filler text). "
            "Run it on a real tier (--tier openai-standard, or any OpenAI-compatible endpoint "
            "in tiers.toml), on the local model (--tier local-smollm2: llama.cpp on this "
            "machine, offline), or give the task a script: of turns for the simulator to play."
        )


async def execute(plan: RunPlan, config: RunConfig | None = None) -> RunResult:
    """Run a planned task in its own Python environment (:mod:`agentloop.sandbox.taskenv`).

    ``config``'s planning fields were read by :func:`agentloop.api.plan_run` already; its
    running fields (client, tools, events, script, ...) are read here. Every task command of
    the run (setup, tools, success check) gets the task's venv.
    """
    config = config or RunConfig()
    refuse_unscripted(plan, config)
    task_env = await taskenv.ensure(plan.task, setup=ws.build_setup)
    with taskenv.activate(task_env):
        return await _execute_in_env(plan, config)


async def _execute_in_env(plan: RunPlan, config: RunConfig) -> RunResult:
    """The run held at the process's start gate (the task env is active)."""
    # outside a suite (which has its own start gate), the process's: the clock starts once the
    # runs setting up beside this one are set up (agentloop.loadgate)
    gate = gate_for_loop() if config.suite is None else None
    ticket = gate.arrive() if gate is not None else None
    try:
        return await _execute_gated(plan, config, gate, ticket)
    finally:
        if gate is not None and ticket is not None:
            gate.leave(ticket)


def _early_tracer(plan: RunPlan, config: RunConfig, registry: dict[str, Tool]) -> Tracer | None:
    """The trace opened at the run's first moment, its header written with what is known
    (issue 24); None for a run with MCP servers, whose tools the header lists once they are up."""
    if plan.task.mcp_servers:
        return None
    tracer = Tracer(open_sink(plan.trace_path, config))
    specs = offered_specs(plan.task, registry)
    tracer.header(
        **header_fields(plan.run_id, plan.task, specs, plan.tier, plan.tiers or None, plan.routing)
    )
    return tracer


async def _execute_gated(
    plan: RunPlan, config: RunConfig, gate: RunGate | None, ticket: Pass | None
) -> RunResult:
    """The trace, the set-up (a root span of kind ``setup``: the reader keeps it out of the
    analysis), the loop; the jail closed and the copy removed whatever happens."""
    registry = tool_registry() if config.tools is None else config.tools
    tracer = _early_tracer(plan, config, registry)
    places: list[ws.Place] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            if tracer is not None:
                stack.callback(tracer.sink.close)
            async with setup_span(tracer) as span:
                ready = await set_up(plan, config, tracer, stack, registry, places)
                if span is not None:
                    jail = ready.place.jail
                    span.set(
                        workspace=str(ready.place.path),
                        sandbox=jail.confinement if jail is not None else None,
                    )
                if gate is not None and ticket is not None:
                    await gate.start(ticket)
            if tracer is None:  # the trace and the run's clock start once the servers are up
                sink: Pipeline = open_sink(plan.trace_path, config)
                stack.callback(sink.close)
            result = await _runner(plan, config, ready, tracer or Tracer(sink)).run()
    finally:  # the jail closes (nothing the run started survives), the copy goes unless kept
        scope = config.suite or SuiteScope()
        for place in places:
            await asyncio.shield(place.close(keep=config.keep_workspace, closer=scope.closer))
    kept = str(places[0].path) if config.keep_workspace else None
    return replace(result, trace_path=str(plan.trace_path), workspace=kept)


def _runner(plan: RunPlan, config: RunConfig, ready: Ready, tracer: Tracer) -> Runner:
    runner = Runner(
        ready.task,
        ready.client,
        ready.registry,
        plan.tier,
        tracer,
        ready.ctx,
        run_id=plan.run_id,
        observer=config.observer,
        check=functools.partial(check, ready.task, ready.place),
        events=config.events,
        routing=plan.routing,
        tiers=plan.tiers or None,
        clients=ready.clients,
        mcp_servers=ready.mcp_record,
    )
    runner.header_written = not plan.task.mcp_servers
    return runner
