"""A run's trace header as it is known before the set-up, and the tools the model is offered.

:func:`header_fields` is line 1 of a trace but ``workspace``, ``sandbox`` and ``mcp_servers``
(the composition root writes it before the set-up; :meth:`agentloop.loop.runner.Runner` writes it
itself when it was not); :func:`offered_specs` is the tool list both record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentloop._version import __version__
from agentloop.config.routing import Routing
from agentloop.config.tasks import Task
from agentloop.config.tiers import Tier
from agentloop.loop.subagent import agent_spec
from agentloop.loop.tool_call import FINISH
from agentloop.protocols import Tool
from agentloop.types import ToolSpec


def offered_specs(task: Task, tools: Mapping[str, Tool]) -> tuple[ToolSpec, ...]:
    """The tools the model is offered, as :class:`Runner` builds them (its sub-agents' too)."""
    own = [tools[n].spec for n in task.tools if n in tools]
    subs = [agent_spec(a) for n in task.tools if n not in tools and (a := task.agent(n))]
    return (*own, *subs, *((FINISH,) if task.finish_tool else ()))


def header_fields(
    run_id: str,
    task: Task,
    specs: tuple[ToolSpec, ...],
    tier: Tier,
    tiers: Mapping[str, Tier] | None = None,
    routing: Routing | None = None,
    mcp_servers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The header's fields known before the set-up: all but ``workspace``, ``sandbox`` and
    ``mcp_servers`` (those a run opened before its set-up records on its setup span)."""
    tiers = tiers or {tier.name: tier}
    out: dict[str, Any] = {
        "run_id": run_id,
        "agentloop": __version__,
        "task": {
            "name": task.name,
            "prompt": task.prompt,
            "system": task.system,
            "source": str(task.source) if task.source else None,
        },
        "tier": tier.summary(),
    }
    if len(tiers) > 1 or task.agents:
        out["tiers"] = [t.summary() for t in tiers.values()]
    if task.agents:
        out["agents"] = [
            {
                "name": a.name,
                "description": a.description,
                "tier": a.tier or tier.name,
                "tools": [*a.tools, *a.agents],
            }
            for a in task.agents
        ]
    if routing:
        out["routing"] = routing.as_plan()
    if mcp_servers:
        out["mcp_servers"] = mcp_servers
    out["tools"] = [
        {"name": s.name, "description": s.description, "parameters": s.parameters} for s in specs
    ]
    out["limits"] = task.limits.record()
    return out
