"""Sub-agents as tools: the tool a caller sees, which sub-run it is, and what the caller is told.

A task's :class:`agentloop.config.tasks.Agent` appears to its caller as a tool (``name``,
``description``, one ``input`` string argument). Calling it runs a sub-run: a
:class:`agentloop.loop.runner.Runner` of its own under an ``agent`` span (``invoke_agent
NAME``), in the same workspace, jail, trace and run-wide budgets (:meth:`Runner.invoke`). Its
final answer is the tool's result; however else it ends (a limit, a model error) the caller gets
an error result, and the run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from agentloop.config.tasks import Agent, Task
from agentloop.loop.ending import Ending
from agentloop.trace import attrs as A
from agentloop.types import ToolResult, ToolSpec

if TYPE_CHECKING:
    from agentloop.protocols import Tool, ToolContext


class Caller(Protocol):
    """What an agent's tool needs of the runner that offers it (:meth:`Runner.invoke`); a
    protocol, so this module does not import the runner that imports it."""

    async def invoke(self, agent: Agent, text: str) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class AgentScope:
    """Which sub-run a runner is: its agent, which invocation of it (1-based), how deep."""

    name: str
    invocation: int
    depth: int

    def span_attrs(self) -> dict[str, Any]:
        """The start attrs of every step, model and tool span of the sub-run."""
        return {
            A.GEN_AI_AGENT_NAME: self.name,
            A.AGENT_INVOCATION: self.invocation,
            A.AGENT_DEPTH: self.depth,
        }


def agent_spec(agent: Agent) -> ToolSpec:
    """The tool the caller is offered for ``agent``."""
    return ToolSpec(
        name=agent.name,
        description=agent.description,
        parameters={
            "type": "object",
            "properties": {"input": {"type": "string", "description": "what to ask the sub-agent"}},
            "required": ["input"],
            "additionalProperties": False,
        },
    )


class AgentTool:
    """A sub-agent as one of its caller's tools; a call runs :meth:`Runner.invoke`."""

    def __init__(self, caller: Caller, agent: Agent) -> None:
        self.caller, self.agent = caller, agent
        self._spec = agent_spec(agent)

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, ctx: ToolContext[Any], arguments: dict[str, Any]) -> ToolResult:
        text = arguments.get("input")
        if not isinstance(text, str) or not text.strip():
            return ToolResult(
                ok=False, output=f"Error: '{self.agent.name}' takes one string argument 'input'."
            )
        return await self.caller.invoke(self.agent, text)


def sub_result(name: str, ending: Ending, final_text: str) -> ToolResult:
    """What the caller sees of a sub-run: its answer, or an error saying how it ended."""
    if ending.status == "ok":
        return ToolResult(ok=True, output=final_text or f"({name} gave no answer)")
    return ToolResult(
        ok=False,
        output=f"Error: sub-agent '{name}' did not finish ({ending.status}): {ending.reason}",
    )


def sub_task(root: Task, agent: Agent, text: str, default_tier: str) -> Task:
    """The task a sub-run of ``agent`` runs on ``text``: the root task with the agent's system,
    prompt, tools, limits, tier (default: the main agent's) and script."""
    return replace(
        root,
        name=agent.name,
        system=agent.system,
        prompt=agent.render(text),
        tools=(*agent.tools, *agent.agents),
        limits=agent.limits,
        finish_tool=agent.finish_tool,
        tier=agent.tier or default_tier,
        script=agent.script,
    )


def run_tools(task: Task, registry: Mapping[str, Tool], caller: Caller) -> dict[str, Tool]:
    """The tools a run offers, in the task's order: the registry's it lists, then its sub-agents
    (each an :class:`AgentTool` that ``caller`` runs)."""
    out: dict[str, Tool] = {name: registry[name] for name in task.tools if name in registry}
    for name in task.tools:
        agent = task.agent(name)
        if agent is not None and name not in registry:
            out[name] = AgentTool(caller, agent)
    return out
