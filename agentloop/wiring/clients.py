"""A run's model clients: its tier's, and one per (agent, tier) for sub-agents and routing.

A simulated tier's simulator is started for the run (or a route taken on a suite's).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentloop.config.routing import Routing
from agentloop.config.tasks import Task
from agentloop.config.tiers import Tier, load_tiers
from agentloop.errors import ConfigError
from agentloop.protocols import ModelClient
from agentloop.script import ScriptTurn
from agentloop.wiring.config import ModelOpener, RunConfig, RunPlan


def substitute(script: tuple[ScriptTurn, ...], work: Path) -> list[ScriptTurn]:
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
    (a suite's run takes a route on the suite's instead: ``SuiteScope.models``)."""
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
    from agentloop.sim import SimServer

    if tier.profile is None:  # tier files refuse this; a Tier built in code may still lack it
        raise ConfigError(
            f"tier '{tier.name}' is simulated (base_url \"sim\") but has no "
            "speed profile to pace its answers: give it a profile"
        )
    async with (
        SimServer(profile=tier.profile, script=script or None) as sim,
        contextlib.AsyncExitStack() as stack,
    ):
        yield await _sim_client(stack, tier, sim.base_url)


async def _sim_client(stack: contextlib.AsyncExitStack, tier: Tier, base_url: str) -> ModelClient:
    """The real client on ``base_url`` of a simulator on this event loop (the one TLS context),
    closed by ``stack``: the loop's lag bounds its calls' timing (``server_on_loop``)."""
    import openai

    from agentloop.clients.openai_client import OpenAIClient

    http = await stack.enter_async_context(_http_client())
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="sim", max_retries=0, http_client=http)
    stack.push_async_callback(sdk.close)
    client = OpenAIClient(tier, client=sdk, server_on_loop=True)
    stack.push_async_callback(client.aclose)
    return client


def pairs(plan: RunPlan) -> list[tuple[str, Tier, tuple[ScriptTurn, ...]]]:
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


async def tree_clients(
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
    out: dict[tuple[str, str], ModelClient] = {}
    real: dict[str, ModelClient] = {}
    sim: Any = None
    in_suite = config.suite is not None and config.suite.models is not None
    for agent, tier, script in pairs(plan):
        if agent == "main" and tier.name == plan.tier.name:
            continue  # the run's own client
        turns = substitute(script, work)
        if not tier.simulated:
            if tier.name not in real:
                real[tier.name] = await stack.enter_async_context(open_model(tier, None))
            out[(agent, tier.name)] = real[tier.name]
        elif in_suite:
            out[(agent, tier.name)] = await stack.enter_async_context(open_model(tier, turns))
        else:
            from agentloop.sim import SimServer

            if tier.profile is None:
                raise ConfigError(f"tier '{tier.name}' is simulated but has no speed profile")
            if sim is None:
                sim = await stack.enter_async_context(SimServer(profile=tier.profile))
            route = await stack.enter_async_context(sim.route(tier.profile, turns or None))
            out[(agent, tier.name)] = await _sim_client(stack, tier, route.base_url)
    return out


def _http_client() -> Any:
    from agentloop.clients._tls import http_client  # one TLS context, kernel stamps (issue 28)

    return http_client(stamped=True)


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
