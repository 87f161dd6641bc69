"""The async embedding API and composition root: wires task, tier, client, tools, trace together.

Only this module (and the CLI) imports ``tools``: the framework itself knows tools by protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack

from agentloop.config import shipped
from agentloop.config.routing import Routing
from agentloop.config.tasks import Task, load_task
from agentloop.config.tiers import Tier, get_tier, load_tiers, require_key
from agentloop.errors import ConfigError
from agentloop.events import EventSink, Observer
from agentloop.export import live_sinks
from agentloop.loadgate import Pass, RunGate, gate_for_loop
from agentloop.loop.ending import RunResult
from agentloop.loop.runner import Runner, header_fields, offered_specs
from agentloop.protocols import ModelClient, Tool
from agentloop.redact import redactor, secret_values, truncator
from agentloop.sandbox import taskenv
from agentloop.sandbox import workspace as ws
from agentloop.sandbox.closer import JailCloser
from agentloop.sandbox.context import RunContext, ToolSettings
from agentloop.script import ScriptTurn
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import JsonlSink, Pipeline

DEFAULT_TIER = "sim-standard"
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a run id names its trace file: nothing else in it
MAX_TRACE_STRING = 64_000  # longer strings in a trace record are cut (and say so)

# how a run opens its model client for its tier and turns (model_client, or a suite's)
ModelOpener = Callable[
    [Tier, list[ScriptTurn] | None], contextlib.AbstractAsyncContextManager[ModelClient]
]


@dataclass(frozen=True, kw_only=True)
class SuiteScope:
    """What a suite lends one of its runs (:mod:`agentloop.suite`); a single run has none.

    ``models`` opens the run's model client on the suite's one simulator (a route and a
    connection pool of the run's own) and, for a run of the first wave, holds it at the suite's
    start gate once connected (:mod:`agentloop.suite.shared`, :mod:`agentloop.suite.gate`);
    ``closer`` tears the run's jail down behind the runs still going once the run has emptied
    it (:mod:`agentloop.sandbox.closer`). Nothing reaches a run any other way.
    """

    models: ModelOpener | None = None
    closer: JailCloser | None = None


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a run is given besides its task: one frozen value that :func:`run_task`,
    :func:`agentloop.start_run`, :func:`execute`, the suite, the service and the CLI pass on.

    Planning (read before the run starts, by :func:`plan_run`): ``tier`` (a name or a
    :class:`Tier`; default the task's, else sim-standard), ``tiers_file``, ``trace_dir``,
    ``max_steps`` and ``timeout_s`` (overrides of the task's limits), ``run_id`` (the run's id,
    in its trace and every event; default a new random one: the service passes the id it
    answered the submission with, so a run has one id everywhere). Running: ``client`` (an
    injected model client instead of the tier's), ``tools`` (the registry; default the built-in
    tools), ``events`` (every :class:`agentloop.events.RunEvent`), ``observer`` (the older
    ``observer(kind, data)`` form of the same stream), ``script`` (turns replacing the task's,
    as a replay gives), ``keep_workspace``, ``otlp`` (an OTLP/HTTP collector to stream spans
    to) and ``unconfined`` (a real model's commands may run on the host where no jail can be
    had). ``suite``: what a suite lends the run (:class:`SuiteScope`), set by the suite only.
    """

    tier: str | Tier | None = None
    tiers_file: str | Path | None = None
    trace_dir: str | Path = "traces"
    max_steps: int | None = None
    timeout_s: float | None = None
    run_id: str | None = None
    client: ModelClient | None = None
    tools: dict[str, Tool] | None = None
    events: EventSink | None = None
    observer: Observer | None = None
    script: list[ScriptTurn] | None = None
    keep_workspace: bool = False
    otlp: str | None = None
    unconfined: bool = False
    suite: SuiteScope | None = None
    routing: Routing | None = None  # over the task's routing: (agent, call) -> tier


class RunOptions(TypedDict, total=False):
    """:class:`RunConfig`'s fields as keyword arguments (``run_task(task, tier=...)``): the
    same names and types (``tests/test_run_config.py`` holds the two equal)."""

    tier: str | Tier | None
    tiers_file: str | Path | None
    trace_dir: str | Path
    max_steps: int | None
    timeout_s: float | None
    run_id: str | None
    client: ModelClient | None
    tools: dict[str, Tool] | None
    events: EventSink | None
    observer: Observer | None
    script: list[ScriptTurn] | None
    keep_workspace: bool
    otlp: str | None
    unconfined: bool
    suite: SuiteScope | None
    routing: Routing | None


def configure(config: RunConfig | None = None, **options: Unpack[RunOptions]) -> RunConfig:
    """``config`` (default: all defaults) with ``options`` laid over it."""
    return replace(config or RunConfig(), **options)


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
    task: Task,
    tier: str | Tier | None = None,
    tiers_file: str | Path | None = None,
    asked_by: str = "tier",
) -> Tier:
    """The tier a run uses: the one asked for, else the task's default, else sim-standard.

    An unknown name is blamed on where it was written: ``asked_by`` (``--tier`` on the command
    line) for the one asked for, the task file's ``tier:`` line for the task's default.
    """
    if isinstance(tier, Tier):
        return tier
    tiers = load_tiers(Path(tiers_file) if tiers_file else None, extra=task.tiers)
    if tier:
        return get_tier(tiers, tier, source=asked_by)
    if task.tier:
        where = task.source or f"task '{task.name}'"
        return get_tier(tiers, task.tier, source=where, line=task.tier_line, field="tier")
    return get_tier(tiers, DEFAULT_TIER, source=tiers_file or "tiers.toml")


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
    """A client for ``tier``; a simulated tier starts the embedded simulator for the duration
    (a suite's run takes a route on the suite's instead: :attr:`SuiteScope.models`)."""
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

    if tier.profile is None:  # tier files refuse this; a Tier built in code may still lack it
        raise ConfigError(
            f"tier '{tier.name}' is simulated (base_url \"sim\") but has no "
            "speed profile to pace its answers: give it a profile"
        )
    async with (
        SimServer(profile=tier.profile, script=script or None) as sim,
        _http_client() as http,
    ):
        sdk = openai.AsyncOpenAI(
            base_url=sim.base_url, api_key="sim", max_retries=0, http_client=http
        )
        client = OpenAIClient(tier, client=sdk)
        try:
            yield client
        finally:
            await client.aclose()
            await sdk.close()


def _pairs(plan: RunPlan) -> list[tuple[str, Tier, tuple[ScriptTurn, ...]]]:
    """Each (agent, tier) a run with sub-agents or routing may call, with that agent's turns."""
    out = []
    agents = [("main", plan.tier.name, plan.task.script)] + [
        (a.name, a.tier or plan.tier.name, a.script) for a in plan.task.agents
    ]
    for name, default, script in agents:
        names = {default} | {t for k, t in plan.routing.calls.items() if k.agent == name}
        names.add(plan.routing.agents.get(name, default))
        out += [(name, plan.tiers[t], script) for t in sorted(names) if t in plan.tiers]
    return out


async def _tree_clients(
    stack: contextlib.AsyncExitStack,
    plan: RunPlan,
    config: RunConfig,
    open_model: ModelOpener,
    work: Path,
) -> dict[tuple[str, str], ModelClient]:
    """A client per (agent, tier) of a run with sub-agents or routing (the main agent's own
    client on its own tier aside): each simulated pair a route of its own, with that agent's
    script and that tier's profile (a suite's routes when in a suite, else one simulator for
    the run); a real tier one client for every agent."""
    if not plan.tiers or config.client is not None:
        return {}
    from agentloop.clients.openai_client import OpenAIClient

    out: dict[tuple[str, str], ModelClient] = {}
    real: dict[str, ModelClient] = {}
    sim: Any = None
    for agent, tier, script in _pairs(plan):
        if agent == "main" and tier.name == plan.tier.name:
            continue  # the run's own client
        turns = _substitute(script, work)
        if not tier.simulated:
            if tier.name not in real:
                real[tier.name] = await stack.enter_async_context(open_model(tier, None))
            out[(agent, tier.name)] = real[tier.name]
        elif config.suite is not None and config.suite.models is not None:
            out[(agent, tier.name)] = await stack.enter_async_context(open_model(tier, turns))
        else:
            import openai

            from agentloop.sim import SimServer

            if tier.profile is None:
                raise ConfigError(f"tier '{tier.name}' is simulated but has no speed profile")
            if sim is None:
                sim = await stack.enter_async_context(SimServer(profile=tier.profile))
            route = await stack.enter_async_context(sim.route(tier.profile, turns or None))
            http = await stack.enter_async_context(_http_client())  # the one TLS context
            sdk = openai.AsyncOpenAI(
                base_url=route.base_url, api_key="sim", max_retries=0, http_client=http
            )
            client = OpenAIClient(tier, client=sdk)
            stack.push_async_callback(sdk.close)
            stack.push_async_callback(client.aclose)
            out[(agent, tier.name)] = client
    return out


@functools.cache
def _tls_context() -> Any:
    """The process's one TLS context for the simulator's clients: making one loads the trust
    store, ~0.1 s of blocked event loop that every concurrent run's streams were read late by."""
    import httpx2

    return httpx2.create_ssl_context()


def _http_client() -> Any:
    import httpx2

    return httpx2.AsyncClient(verify=_tls_context())


def trace_path_for(trace_dir: Path, task: Task, tier: Tier, run_id: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", task.name)
    return trace_dir / f"{stamp}-{safe}-{tier.name}-{run_id[:6]}.jsonl"


@dataclass(frozen=True)
class RunPlan:
    """What a run will be, known before it starts: task (limits applied), tier, id, trace path;
    for a run with sub-agents or routing, every tier it may use (main's first) and its routing."""

    task: Task
    tier: Tier
    run_id: str
    trace_path: Path
    tiers: dict[str, Tier] = field(default_factory=dict)  # {}: the one tier ``tier``
    routing: Routing = field(default_factory=Routing)


def resolve_routing(
    task: Task, tier: Tier, config: RunConfig
) -> tuple[Tier, dict[str, Tier], Routing]:
    """The main agent's tier, every tier the run may use (main's first) and the routing:
    ``config.routing`` (a plan, ``--route``) over the task's ``routing:`` over the tier asked
    for. An unknown agent or tier, or a plan for another task, raises ConfigError."""
    routing = Routing(agents=task.routing)
    given = config.routing
    if given is not None:
        if given.task is not None and given.task != task.name:
            raise ConfigError(
                f"routing plan, field 'task': the plan is for task '{given.task}', "
                f"not '{task.name}' (compute one from a trace of '{task.name}')"
            )
        routing = routing.over(given)
    if not routing and not task.agents:
        return tier, {}, routing
    known = load_tiers(Path(config.tiers_file) if config.tiers_file else None, extra=task.tiers)
    known[tier.name] = tier
    agents = {a.name for a in task.agents}
    if task.routing:
        Routing(agents=task.routing).check(agents, set(known), task.source or task.name)
    if given is not None:
        given.check(agents, set(known), "routing plan")
    main = known[routing.agents.get("main", tier.name)]
    used = {main.name: main}
    for i, agent in enumerate(task.agents):
        if agent.tier is not None and agent.tier not in known:
            raise ConfigError(
                f"{task.source or task.name}: field 'agents[{i}].tier': unknown tier "
                f"'{agent.tier}' (known tiers: {', '.join(sorted(known))})"
            )
        used.setdefault(agent.tier or tier.name, known[agent.tier or tier.name])
    for name in sorted(routing.tiers()):
        used.setdefault(name, known[name])
    return main, used, routing


def _agents_on(task: Task, tier: Tier) -> Task:
    """``task`` with each sub-agent's default tier spelled out: its own, else the run's tier
    (``--tier`` or the task's; routing ``main`` moves the main agent alone)."""
    if not task.agents:
        return task
    return replace(task, agents=tuple(replace(a, tier=a.tier or tier.name) for a in task.agents))


def plan_run(task: Task | str | Path, config: RunConfig | None = None) -> RunPlan:
    """Load the task, apply the config's limit overrides, resolve its tier, name the run and
    its trace.

    Bad input (task or tier file, a limit below 1 step or 0 s) raises :class:`ConfigError`.
    """
    config = config or RunConfig()
    max_steps, timeout_s = config.max_steps, config.timeout_s
    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"max_steps must be at least 1 (got {max_steps})")
    if timeout_s is not None and not timeout_s > 0:
        raise ConfigError(f"timeout_s must be more than 0 seconds (got {timeout_s:g})")
    if config.run_id is not None and not RUN_ID.fullmatch(config.run_id):
        raise ConfigError(
            f"run_id must be 1-64 letters, digits, '-' or '_' (got {config.run_id!r})"
        )
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
    the_tier = resolve_tier(task, config.tier, config.tiers_file)
    task = _agents_on(task, the_tier)
    the_tier, tiers, routing = resolve_routing(task, the_tier, config)
    for used in (the_tier, *tiers.values()):
        require_key(used)  # refused now, not after the set-up at the first model call
    run_id = config.run_id or uuid.uuid4().hex[:12]
    trace = trace_path_for(Path(config.trace_dir), task, the_tier, run_id)
    return RunPlan(task, the_tier, run_id, trace, tiers, routing)


async def run_task(
    task: Task | str | Path,
    *,
    config: RunConfig | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Run one task to its end and return how it ended; the trace goes under ``trace_dir``.

    The run is set by ``config`` (a :class:`RunConfig`), by its fields given as keywords
    (``run_task(task, tier="sim-ultrafast", events=sink)``), or by both (the keywords win).
    ``script`` replaces the task's scripted turns (replay); ``{workspace}`` in either becomes the
    run's working folder. ``unconfined`` lets a real (unscripted) model's commands run on the
    host where no jail can be had (refused otherwise: a model's output is hostile). ``events``
    receives every :class:`agentloop.events.RunEvent`; ``observer(kind, data)`` is the older
    form of the same stream.
    Cancelling the calling task cancels the run: its subprocesses are killed and the trace is
    closed with status ``cancelled`` before ``CancelledError`` propagates
    (:func:`agentloop.start_run` gives a handle whose cancel returns a result instead).
    """
    the_config = configure(config, **options)
    return await execute(plan_run(task, the_config), the_config)


def _refuse_unscripted(plan: RunPlan, config: RunConfig) -> None:
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

    ``config``'s planning fields were read by :func:`plan_run` already; its running fields
    (client, tools, events, script, ...) are read here. Every task command of the run (setup,
    tools, success check) gets the task's venv.
    """
    config = config or RunConfig()
    _refuse_unscripted(plan, config)
    task_env = await taskenv.ensure(plan.task, setup=ws.build_setup)
    with taskenv.activate(task_env):
        return await _execute_in_env(plan, config)


async def _prepare(plan: RunPlan, config: RunConfig) -> tuple[ws.Place, RunContext]:
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


async def _open_mcp(
    task: Task, registry: dict[str, Tool], ctx: RunContext, stack: contextlib.AsyncExitStack
) -> tuple[dict[str, Tool], Task, list[dict[str, Any]]]:
    """The task's MCP servers started in the run's jail, their tools added to the registry and
    the task's ``mcp:`` entries expanded to their names; the set-up's record for the header."""
    from agentloop_tools.mcp_tools import open_servers

    offered = {n for n in task.tools if n in registry} | ({"finish"} if task.finish_tool else set())
    found, names, record = await open_servers(task.mcp_servers, task.tools, ctx, offered, stack)
    return {**registry, **found}, replace(task, tools=names), record


def _open_sink(path: Path, config: RunConfig) -> Pipeline:
    """The run's trace sinks: the JSONL file and any live ones, behind the redactor."""
    return Pipeline(
        [JsonlSink(path), *live_sinks(config.otlp)],  # otlp: issue 13
        [redactor(secret_values()), truncator(MAX_TRACE_STRING)],
    )


def _setup_span(tracer: Tracer | None) -> contextlib.AbstractAsyncContextManager[Any]:
    """The set-up's root span (kind ``setup``, before the run span), if the trace is open."""
    return tracer.span("setup", "set-up") if tracer is not None else contextlib.nullcontext()


def _setup_part(tracer: Tracer | None, name: str) -> contextlib.AbstractAsyncContextManager[Any]:
    """One part of the set-up, a span under the setup span."""
    return tracer.span("setup", name) if tracer is not None else contextlib.nullcontext()


async def _check(task: Task, place: ws.Place, final_text: str) -> dict[str, Any]:
    """The task's success check, run in the run's jail."""
    return await ws.check_success(task, place.path, final_text, place.jail, tests=place.tests)


async def _execute_in_env(plan: RunPlan, config: RunConfig) -> RunResult:
    """Workspace and setup, client, trace, the loop, clean-up (the task env is active)."""
    # outside a suite (which has its own start gate), the process's: the clock starts once the
    # runs setting up beside this one are set up (agentloop.loadgate)
    gate = gate_for_loop() if config.suite is None else None
    ticket = gate.arrive() if gate is not None else None
    try:
        return await _execute_gated(plan, config, gate, ticket)
    finally:
        if gate is not None and ticket is not None:
            gate.leave(ticket)


async def _execute_gated(
    plan: RunPlan, config: RunConfig, gate: RunGate | None, ticket: Pass | None
) -> RunResult:
    task, path, scope = plan.task, plan.trace_path, config.suite or SuiteScope()
    registry = tool_registry() if config.tools is None else config.tools
    script = tuple(config.script) if config.script is not None else task.script
    # issue 24: the trace opens first, its header written with what is known, and the set-up
    # is a root span of kind ``setup`` (the reader keeps it out of the analysis), so a run
    # killed while setting up leaves a trace. A run with MCP servers opens them in its set-up
    # and lists their tools in the header: its trace still opens once they are up.
    early = not task.mcp_servers
    sink: Pipeline | None = _open_sink(path, config) if early else None
    tracer = Tracer(sink) if sink is not None else None
    if tracer is not None:
        tracer.header(
            **header_fields(
                plan.run_id,
                task,
                offered_specs(task, registry),
                plan.tier,
                plan.tiers or None,
                plan.routing,
            )
        )
    place: ws.Place | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            if sink is not None:
                stack.callback(sink.close)
            async with _setup_span(tracer) as setup:
                async with _setup_part(tracer, "workspace"):  # the copy, the jail, setup commands
                    place, ctx = await _prepare(plan, config)
                work = place.path
                stack.push_async_callback(ctx.aclose)
                if setup is not None:
                    setup.set(
                        workspace=str(work),
                        sandbox=place.jail.confinement if place.jail is not None else None,
                    )
                turns = _substitute(script, work)
                open_model = scope.models or model_client
                async with _setup_part(tracer, "model client"):
                    client = (
                        config.client
                        if config.client is not None
                        else await stack.enter_async_context(open_model(plan.tier, turns))
                    )
                    clients = await _tree_clients(stack, plan, config, open_model, work)
                mcp_record = None
                if task.mcp_servers:  # once per run, before its start gate and trace (a clash,
                    # exit 2, leaves no trace file); stopped with the run (issue 25)
                    registry, task, mcp_record = await _open_mcp(task, registry, ctx, stack)
                if gate is not None and ticket is not None:
                    await gate.start(ticket)
            if sink is None:  # the trace and the run's clock start once the client is ready
                sink = _open_sink(path, config)
                stack.callback(sink.close)
            runner = Runner(
                task,
                client,
                registry,
                plan.tier,
                tracer if tracer is not None else Tracer(sink),
                ctx,
                run_id=plan.run_id,
                observer=config.observer,
                check=functools.partial(_check, task, place),
                events=config.events,
                routing=plan.routing,
                tiers=plan.tiers or None,
                clients=clients,
                mcp_servers=mcp_record,
            )
            runner.header_written = early
            result = await runner.run()
    finally:  # the jail closes (nothing the run started survives), the copy goes unless kept
        if place is not None:
            await asyncio.shield(place.close(keep=config.keep_workspace, closer=scope.closer))
    work = place.path
    kept = str(work) if config.keep_workspace else None
    return replace(result, trace_path=str(path), workspace=kept)
