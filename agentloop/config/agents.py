"""A task's sub-agents: the Agent value, and the checks that their names, tools and calls hold.

Names unique and not a tool's, the tools and sub-agents they list known, no agent calling itself
around a loop, no chain deeper than ``limits.max_agent_depth``, every name ``routing`` gives
known; each fault a :class:`~agentloop.errors.TaskFileError` naming the line and field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentloop.config._task_schema import _TaskModel
from agentloop.config.limits import Limits
from agentloop.config.mcp import parse_ref
from agentloop.config.where import field_name, key_line
from agentloop.errors import TaskFileError
from agentloop.script import ScriptTurn
from agentloop.trace.attrs import MAIN_AGENT


@dataclass(frozen=True)
class Agent:
    """A sub-agent: the caller sees a tool ``name`` (one ``input`` string argument); calling it
    runs a loop of its own with ``system``, ``prompt`` (``{input}`` filled in), ``tools``
    (built-in tools and ``mcp:`` entries), the sub-agents it may call (``agents``) and its own ``limits``."""

    name: str
    description: str
    system: str
    prompt: str
    tools: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    tier: str | None = None
    limits: Limits = field(default_factory=Limits)
    finish_tool: bool = True
    script: tuple[ScriptTurn, ...] = ()

    def render(self, text: str) -> str:
        """The prompt with the caller's input in place of ``{input}`` (nothing else expands)."""
        return self.prompt.replace("{input}", text)


def checked_agents(
    m: _TaskModel, root: yaml.Node | None, path: Path, known_tools: set[str] | None
) -> tuple[Agent, ...]:
    """The sub-agents, checked: names unique and not a built-in tool's, tools and sub-agents
    known, no cycle, no chain deeper than ``limits.max_agent_depth``, routing names known."""
    names = [a.name for a in m.agents]

    def fail(loc: tuple[Any, ...], why: str) -> TaskFileError:
        return TaskFileError(path, why, line=key_line(root, loc), field=field_name(loc))

    _check_names(m, names, known_tools, fail)
    calls = {a.name: [t for t in (*a.tools, *a.agents) if t in names] for a in m.agents}
    _check_calls(m, names, calls, fail)
    return tuple(
        Agent(
            name=a.name,
            description=a.description,
            system=a.system,
            prompt=a.prompt,
            tools=tuple(t for t in a.tools if t not in names),
            agents=tuple(dict.fromkeys(calls[a.name])),
            tier=a.tier,
            limits=Limits(**a.limits.model_dump()),
            finish_tool=a.finish_tool,
            script=tuple(ScriptTurn.from_dict(t.model_dump()) for t in a.script),
        )
        for a in m.agents
    )


_Fail = Callable[[tuple[Any, ...], str], TaskFileError]


def _check_names(
    m: _TaskModel, names: list[str], known_tools: set[str] | None, fail: _Fail
) -> None:
    """Each agent's name is its own and no tool's; what it lists is a known tool or agent."""
    builtin = known_tools or set()
    for i, a in enumerate(m.agents):
        if a.name in builtin or a.name in (MAIN_AGENT, "finish"):
            raise fail(("agents", i, "name"), f"agent name '{a.name}' is taken by a tool")
        if names.index(a.name) != i:
            raise fail(("agents", i, "name"), f"a second agent named '{a.name}'")
        for j, t in enumerate(a.tools):
            ref = parse_ref(t)  # an MCP server's tools: the run's servers, shared by its agents
            if ref is not None and ref[0] not in m.mcp_servers:
                raise fail(
                    ("agents", i, "tools", j),
                    f"'{t}' names MCP server '{ref[0]}', which mcp_servers does not define",
                )
            if ref is None and known_tools is not None and t not in known_tools | set(names):
                raise fail(("agents", i, "tools", j), f"unknown tool '{t}'")
        for j, sub in enumerate(a.agents):
            if sub not in names:
                raise fail(("agents", i, "agents", j), f"unknown agent '{sub}'")


def _check_calls(m: _TaskModel, names: list[str], calls: dict[str, list[str]], fail: _Fail) -> None:
    """No cycle of agents, no chain past ``limits.max_agent_depth``, routing names known."""
    top = [t for t in m.tools if t in names]
    limit = m.limits.max_agent_depth

    loop = _cycle(calls)
    if loop:
        raise fail(
            ("agents", names.index(loop[0]), "agents"), f"a cycle of agents: {' -> '.join(loop)}"
        )

    def walk(name: str, chain: tuple[str, ...]) -> None:
        if len(chain) + 1 > limit:
            raise fail(
                ("agents", names.index(name), "name"),
                f"agent '{name}' is called at depth {len(chain) + 1} "
                f"({' -> '.join((MAIN_AGENT, *chain, name))}), past limits.max_agent_depth "
                f"= {limit}",
            )
        for sub in calls[name]:
            walk(sub, (*chain, name))

    for name in top:
        walk(name, ())
    known_agents = {MAIN_AGENT, *names}
    for agent in m.routing:
        if agent not in known_agents:
            raise fail(
                ("routing", agent),
                f"unknown agent '{agent}' (known: {', '.join(sorted(known_agents))})",
            )


def _cycle(calls: dict[str, list[str]]) -> list[str] | None:
    """A loop of agents calling agents (``[a, b, a]``), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for sub in calls.get(name, []):
            found = visit(sub, [*path, name])
            if found:
                return found
        done.add(name)
        return None

    for name in calls:
        found = visit(name, [])
        if found:
            return found
    return None
