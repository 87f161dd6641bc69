"""Executing a planned run: its trace, opened at the run's first moment, set-up, loop, end.

A run that never gets past its set-up still ends its trace (cancelled or failed in set-up).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterator
from dataclasses import replace

from agentloop.analysis.runend import cache_trace
from agentloop.errors import AgentloopError, ConfigError
from agentloop.loop.ending import RunResult
from agentloop.loop.runner import Runner, header_fields, offered_specs
from agentloop.protocols import Tool
from agentloop.trace.tracer import Tracer
from agentloop.wiring.config import RunConfig, RunPlan, tool_registry
from agentloop.wiring.setup import Ready, check, open_sink, set_up

CANCELLED_IN_SETUP = "cancelled during set-up"  # the end record's reason: no step ran
FAILED_IN_SETUP = "set-up failed"  # ... followed by why


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
    """Run a planned task: its trace, its set-up, the loop and the clean-up.

    ``config``'s planning fields were read by :func:`agentloop.api.plan_run` already; its
    running fields (client, tools, events, script, ...) are read here. The set-up is a root
    span of kind ``setup`` (the reader keeps it out of the analysis); every task command of
    the run (setup, tools, success check) gets the task's venv
    (:mod:`agentloop.sandbox.taskenv`); whatever happens, the jail closes and the copy goes
    unless kept.
    """
    config = config or RunConfig()
    refuse_unscripted(plan, config)
    registry = tool_registry() if config.tools is None else config.tools
    tracer = _open_trace(plan, config, registry)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(tracer.sink.close)
        with _ended_if_unready(tracer):
            async with tracer.span("setup", "set-up") as span:
                ready, learnt = await set_up(plan, config, tracer, stack, registry)
                span.set(**learnt)
        result = await _runner(plan, config, ready, tracer).run()
    # the trace is closed: a big one's columnar cache now, so its first analysis reads it at once
    await asyncio.to_thread(cache_trace, plan.trace_path)
    kept = str(ready.place.path) if config.keep_workspace else None
    return replace(result, trace_path=str(plan.trace_path), workspace=kept)


def _open_trace(plan: RunPlan, config: RunConfig, registry: dict[str, Tool]) -> Tracer:
    """The trace opened at the run's first moment, its header written with what is known
    (issue 24); what the set-up learns (workspace, sandbox, MCP servers and their tools) rides
    on the setup span's end, and the reader puts it back in the header."""
    tracer = Tracer(open_sink(plan.trace_path, config))
    specs = offered_specs(plan.task, registry)
    tiers = plan.tiers or None
    tracer.header(**header_fields(plan.run_id, plan.task, specs, plan.tier, tiers, plan.routing))
    return tracer


@contextlib.contextmanager
def _ended_if_unready(tracer: Tracer) -> Iterator[None]:
    """A run that never got past its set-up still ends its trace: the end record says it was
    cancelled, or failed, during the set-up (no steps), and the exception goes on."""
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
            status, reason = "cancelled", CANCELLED_IN_SETUP
        elif isinstance(exc, AgentloopError):
            status, reason = "error", f"{FAILED_IN_SETUP}: {exc.message}"
        else:
            status, reason = (
                "error",
                f"{FAILED_IN_SETUP}: internal error: {type(exc).__name__}: {exc}",
            )
        totals = {"output_tokens": 0, "elapsed_s": 0.0}  # no agent time: the run never began
        tracer.end(status, reason=reason, steps=0, totals=totals, success=None)
        raise


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
    )
    runner.header_written = True  # by _open_trace, before the set-up
    return runner
