"""The async embedding API and composition root: wires task, tier, client, tools, trace together.

Only this module (and the CLI) imports ``tools``: the framework itself knows tools by protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentloop.config import shipped
from agentloop.config.tasks import Task, load_task
from agentloop.config.tiers import Tier, get_tier, load_tiers
from agentloop.errors import ConfigError
from agentloop.events import EventSink, Observer
from agentloop.export import live_sinks
from agentloop.loop.runner import Runner, RunResult
from agentloop.protocols import ModelClient, Tool
from agentloop.redact import redactor, secret_values, truncator
from agentloop.sandbox import taskenv
from agentloop.sandbox import workspace as ws
from agentloop.sandbox.context import RunContext, ToolSettings
from agentloop.script import ScriptTurn
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import JsonlSink, Pipeline

DEFAULT_TIER = "sim-standard"
MAX_TRACE_STRING = 64_000  # longer strings in a trace record are cut (and say so)


def tool_registry() -> dict[str, Tool]:
    """The built-in tools by name."""
    import agentloop_tools as tools  # composition root: the one place the framework meets the tools package

    return tools.registry()


def open_task(path: str | Path) -> Task:
    """Load and validate a task file against the built-in tools.

    A bare name that is not a file (``checkout-timeouts``) is looked up among the shipped tasks.
    """
    if not Path(path).exists() and shipped.looks_like_name(str(path)):
        path = shipped.find_task(str(path))
    return load_task(path, set(tool_registry()))


def resolve_tier(
    task: Task, tier: str | Tier | None = None, tiers_file: str | Path | None = None
) -> Tier:
    """The tier a run uses: the one asked for, else the task's default, else sim-standard."""
    if isinstance(tier, Tier):
        return tier
    tiers = load_tiers(Path(tiers_file) if tiers_file else None, extra=task.tiers)
    return get_tier(tiers, tier or task.tier or DEFAULT_TIER, source=tiers_file or "tiers.toml")


def _substitute(script: tuple[ScriptTurn, ...], work: Path) -> list[ScriptTurn]:
    """Scripted turns may write ``{workspace}``; it becomes this run's working folder."""
    path = str(work)
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')  # inside JSON argument text
    out = []
    for turn in script:
        calls = tuple(
            replace(c, arguments=c.arguments.replace("{workspace}", quoted))
            for c in turn.tool_calls
        )
        out.append(replace(turn, text=turn.text.replace("{workspace}", path), tool_calls=calls))
    return out


@contextlib.asynccontextmanager
async def model_client(
    tier: Tier,
    script: list[ScriptTurn] | None = None,
) -> AsyncIterator[ModelClient]:
    """A client for ``tier``; a simulated tier starts the embedded simulator for the duration."""
    from agentloop.clients.openai_client import OpenAIClient

    if tier.local is not None:  # a llama-server agentloop starts for the run (issue 10a)
        from agentloop.model.local import serve

        async with serve(tier.local) as server:
            client = OpenAIClient(tier, base_url=server.base_url)
            try:
                yield client
            finally:
                await client.aclose()
        return
    if not tier.simulated:
        client = OpenAIClient(tier)
        try:
            yield client
        finally:
            await client.aclose()
        return
    import openai

    from agentloop.sim import SimServer
    from agentloop.sim.server import SHARED

    if tier.profile is None:  # tier files refuse this; a Tier built in code may still lack it
        raise ConfigError(
            f"tier '{tier.name}' is simulated (base_url \"sim\") but has no "
            "speed profile to pace its answers: give it a profile"
        )
    shared = SHARED.get()  # a suite's one simulator (agentloop.suite): this run takes a route
    if shared is not None:
        async with shared.sim.route(tier.profile, script or None) as route, shared.pool() as http:
            # a copy of the suite's one SDK client (a new AsyncOpenAI loads the TLS trust store,
            # ~0.1 s of blocked event loop; a copy 0.5 ms) on a connection pool of the run's own
            client = OpenAIClient(
                tier, client=shared.sdk.with_options(base_url=route.base_url, http_client=http)
            )
            try:
                if shared.gate is not None:  # a suite's start gate (agentloop.suite.gate)
                    await shared.gate(http, route.base_url)
                yield client
            finally:
                await client.aclose()
        return
    async with SimServer(profile=tier.profile, script=script or None) as sim:
        sdk = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)
        client = OpenAIClient(tier, client=sdk)
        try:
            yield client
        finally:
            await client.aclose()
            await sdk.close()


def trace_path_for(trace_dir: Path, task: Task, tier: Tier, run_id: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", task.name)
    return trace_dir / f"{stamp}-{safe}-{tier.name}-{run_id[:6]}.jsonl"


@dataclass(frozen=True)
class RunPlan:
    """What a run will be, known before it starts: task (limits applied), tier, id, trace path."""

    task: Task
    tier: Tier
    run_id: str
    trace_path: Path


def plan_run(
    task: Task | str | Path,
    *,
    tier: str | Tier | None = None,
    tiers_file: str | Path | None = None,
    trace_dir: str | Path = "traces",
    max_steps: int | None = None,
    timeout_s: float | None = None,
) -> RunPlan:
    """Load the task, apply limit overrides, resolve the tier and name the run and its trace.

    Bad input (task or tier file, a limit below 1 step or 0 s) raises :class:`ConfigError`.
    """
    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"max_steps must be at least 1 (got {max_steps})")
    if timeout_s is not None and not timeout_s > 0:
        raise ConfigError(f"timeout_s must be more than 0 seconds (got {timeout_s:g})")
    if not isinstance(task, Task):
        task = open_task(task)
    if max_steps is not None or timeout_s is not None:
        task = replace(
            task,
            limits=replace(
                task.limits,
                max_steps=max_steps or task.limits.max_steps,
                timeout_s=timeout_s or task.limits.timeout_s,
            ),
        )
    the_tier = resolve_tier(task, tier, tiers_file)
    run_id = uuid.uuid4().hex[:12]
    return RunPlan(task, the_tier, run_id, trace_path_for(Path(trace_dir), task, the_tier, run_id))


async def run_task(
    task: Task | str | Path,
    *,
    tier: str | Tier | None = None,
    tiers_file: str | Path | None = None,
    trace_dir: str | Path = "traces",
    max_steps: int | None = None,
    timeout_s: float | None = None,
    client: ModelClient | None = None,
    tools: dict[str, Tool] | None = None,
    observer: Observer | None = None,
    keep_workspace: bool = False,
    script: list[ScriptTurn] | None = None,
    events: EventSink | None = None,
    otlp: str | None = None,
    unconfined: bool = False,
) -> RunResult:
    """Run one task to its end and return how it ended; the trace goes under ``trace_dir``.

    ``script`` replaces the task's scripted turns (replay); ``{workspace}`` in either becomes the
    run's working folder. ``unconfined`` lets a real (unscripted) model's commands run on the
    host where no jail can be had (refused otherwise: a model's output is hostile). ``events`` receives every :class:`agentloop.events.RunEvent`;
    ``observer(kind, data)`` is the older form of the same stream.
    Cancelling the calling task cancels the run: its subprocesses are killed and the trace is
    closed with status ``cancelled`` before ``CancelledError`` propagates
    (:func:`agentloop.start_run` gives a handle whose cancel returns a result instead).
    """
    plan = plan_run(
        task,
        tier=tier,
        tiers_file=tiers_file,
        trace_dir=trace_dir,
        max_steps=max_steps,
        timeout_s=timeout_s,
    )
    return await execute(
        plan,
        client=client,
        tools=tools,
        observer=observer,
        keep_workspace=keep_workspace,
        script=script,
        events=events,
        otlp=otlp,
        unconfined=unconfined,
    )


def _refuse_unscripted(
    plan: RunPlan, client: ModelClient | None, script: list[ScriptTurn] | None
) -> None:
    """A task without ``script:`` on a simulated tier would get filler text and report ``ok``:
    refused before the run (issue 10a)."""
    if client is None and plan.tier.simulated and not plan.task.script and not script:
        raise ConfigError(
            f"task '{plan.task.name}' has no script, and tier '{plan.tier.name}' is the "
            "simulator, which plays only scripted turns (it would answer with filler text). "
            "Run it on a real tier (--tier openai-standard, or any OpenAI-compatible endpoint "
            "in tiers.toml), on the local model (--tier local-smollm2: llama.cpp on this "
            "machine, offline), or give the task a script: of turns for the simulator to play."
        )


async def execute(plan: RunPlan, **kwargs: Any) -> RunResult:
    """Run a planned task in its own Python environment (:mod:`agentloop.sandbox.taskenv`).

    Keywords as :func:`run_task` takes them (client, tools, observer, keep_workspace, script,
    events). Every task command of the run (setup, tools, success check) gets the task's venv.
    """
    _refuse_unscripted(plan, kwargs.get("client"), kwargs.get("script"))
    task_env = await taskenv.ensure(plan.task, setup=ws.build_setup)
    with taskenv.activate(task_env):
        return await _execute_in_env(plan, **kwargs)


async def _execute_in_env(
    plan: RunPlan,
    *,
    client: ModelClient | None = None,
    tools: dict[str, Tool] | None = None,
    observer: Observer | None = None,
    keep_workspace: bool = False,
    script: list[ScriptTurn] | None = None,
    events: EventSink | None = None,
    otlp: str | None = None,
    unconfined: bool = False,
) -> RunResult:
    """Workspace and setup, client, trace, the loop, clean-up (the task env is active)."""
    task, the_tier, run_id, path = plan.task, plan.tier, plan.run_id, plan.trace_path
    registry = tool_registry() if tools is None else tools
    task_env = taskenv.current()  # the jail shows the task's venv read-only
    place = await ws.prepare_run(  # the working copy, the run's jail, setup run in it
        task,
        readonly=task_env.readonly if task_env else (),
        path_prefix=task_env.path_prefix if task_env else (),
        # a real model's commands are hostile input: no jail, no run, unless asked for
        require_jail=client is None and not the_tier.simulated and not unconfined,
    )
    work = place.path
    ctx = RunContext(
        workspace=work,
        jail=place.jail,
        settings=ToolSettings(
            test_command=task.test_command,
            allow_hosts=task.allow_hosts,
            tool_timeout_s=task.limits.tool_timeout_s,
        ),
    )
    turns = _substitute(tuple(script) if script is not None else task.script, work)

    async def check(final_text: str) -> dict[str, Any]:
        return await ws.check_success(task, work, final_text, place.jail, tests=place.tests)

    try:
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(ctx.aclose)
            the_client = (
                client
                if client is not None
                else await stack.enter_async_context(model_client(the_tier, turns))
            )
            # the trace and the run's clock start once the client is ready: simulator start-up
            # is not the run's time
            sink = Pipeline(
                [JsonlSink(path), *live_sinks(otlp)],  # otlp: issue 13
                [redactor(secret_values()), truncator(MAX_TRACE_STRING)],
            )
            stack.callback(sink.close)
            runner = Runner(
                task,
                the_client,
                registry,
                the_tier,
                Tracer(sink),
                ctx,
                run_id=run_id,
                observer=observer,
                check=check,
                events=events,
            )
            result = await runner.run()
    finally:  # the jail closes (nothing the run started survives), the copy goes unless kept
        await asyncio.shield(place.close(keep=keep_workspace))
    return replace(result, trace_path=str(path), workspace=str(work) if keep_workspace else None)
