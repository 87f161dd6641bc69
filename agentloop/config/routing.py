"""Which tier each model call of a run uses: per agent, per single call, from a plan or flags.

A :class:`Routing` maps agent names (``main`` for the top agent) to tier names, and single
calls (:class:`CallKey`: agent, invocation, step) to tier names. It comes from a task file's
``routing:``, ``--route AGENT=TIER`` flags (:func:`parse_routes`), a plan file written by
``agentloop route`` (:func:`load_plan`) or the Python API; :meth:`Routing.over` stacks them
(plan and flags over the task's routing). The runner asks :meth:`Routing.tier_for` per call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agentloop.errors import ConfigError
from agentloop.trace.attrs import MAIN_AGENT

PLAN_FORMAT = 1  # the plan file's "agentloop_plan" version


@dataclass(frozen=True, slots=True, order=True)
class CallKey:
    """One model call of a run: the agent, which invocation of it (1-based), which step (1-based)."""

    agent: str
    invocation: int
    step: int


def _frozen(mapping: Mapping[Any, str] | None) -> Mapping[Any, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class Routing:
    """Tier names per agent and per call; empty means every call on its default tier."""

    agents: Mapping[str, str] = field(default_factory=lambda: _frozen(None))
    calls: Mapping[CallKey, str] = field(default_factory=lambda: _frozen(None))
    task: str | None = None  # the task the plan was computed for
    trace: str | None = None  # run_id of the trace the plan was computed from

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", _frozen(self.agents))
        object.__setattr__(self, "calls", _frozen(self.calls))

    def __bool__(self) -> bool:
        return bool(self.agents or self.calls)

    def tier_for(self, agent: str, invocation: int, step: int, default: str) -> str:
        """The tier of one call: its own entry, else its agent's, else ``default``."""
        hit = self.calls.get(CallKey(agent, invocation, step))
        if hit is not None:
            return hit
        return self.agents.get(agent, default)

    def over(self, other: Routing) -> Routing:
        """This routing with ``other`` laid on top: ``other``'s entries win."""
        return Routing(
            agents={**self.agents, **other.agents},
            calls={**self.calls, **other.calls},
            task=other.task if other.task is not None else self.task,
            trace=other.trace if other.trace is not None else self.trace,
        )

    def tiers(self) -> set[str]:
        """Every tier name the routing mentions."""
        return set(self.agents.values()) | set(self.calls.values())

    def as_plan(self) -> dict[str, Any]:
        """The routing as a plan file holds it (JSON-able; :func:`load_plan` reads it back)."""
        return {
            "agentloop_plan": PLAN_FORMAT,
            "task": self.task,
            "trace": self.trace,
            "agents": dict(sorted(self.agents.items())),
            "calls": [
                {"agent": k.agent, "invocation": k.invocation, "step": k.step, "tier": t}
                for k, t in sorted(self.calls.items())
            ],
        }

    def check(self, agents: set[str], tiers: set[str], source: object) -> None:
        """Raise ConfigError naming ``source`` and the field for an unknown agent or tier."""
        known_agents = agents | {MAIN_AGENT}
        for name, tier in sorted(self.agents.items()):
            _check_one(source, f"agents.{name}", name, tier, known_agents, tiers)
        for i, (key, tier) in enumerate(sorted(self.calls.items())):
            _check_one(source, f"calls[{i}]", key.agent, tier, known_agents, tiers)


def _check_one(
    source: object, where: str, agent: str, tier: str, agents: set[str], tiers: set[str]
) -> None:
    if agent not in agents:
        raise ConfigError(
            f"{source}: field '{where}': unknown agent '{agent}'"
            f" (known: {', '.join(sorted(agents))})"
        )
    if tier not in tiers:
        raise ConfigError(
            f"{source}: field '{where}': unknown tier '{tier}'"
            f" (known: {', '.join(sorted(tiers)) or 'none'})"
        )


def parse_routes(values: list[str]) -> Routing:
    """``--route AGENT=TIER`` values (repeatable; a later one for the same agent wins)."""
    agents: dict[str, str] = {}
    for value in values:
        agent, sep, tier = value.partition("=")
        agent, tier = agent.strip(), tier.strip()
        if not sep or not agent or not tier:
            raise ConfigError(f"--route '{value}': expected AGENT=TIER (e.g. main=sim-ultrafast)")
        agents[agent] = tier
    return Routing(agents=agents)


def load_plan(path: str | Path) -> Routing:
    """Read a plan file (``agentloop route -o``); ConfigError naming file and field if bad."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the plan: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}, line {exc.lineno}: not JSON: {exc.msg}") from exc
    return plan_from_json(data, path)


def plan_from_json(data: object, source: object) -> Routing:
    """A plan's JSON value as a Routing; ConfigError naming ``source`` and the field if bad."""

    def bad(where: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: field '{where}': {why}")

    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a plan is a JSON object with 'agentloop_plan'")
    if data.get("agentloop_plan") != PLAN_FORMAT:
        raise bad("agentloop_plan", f"expected {PLAN_FORMAT} (a plan from `agentloop route`)")
    unknown = set(data) - {"agentloop_plan", "task", "trace", "agents", "calls"}
    if unknown:
        raise bad(sorted(unknown)[0], "unknown field")
    for key in ("task", "trace"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise bad(key, "expected a string or null")
    raw_agents = data.get("agents") or {}
    if not isinstance(raw_agents, dict):
        raise bad("agents", "expected an object of agent name -> tier name")
    agents: dict[str, str] = {}
    for name, tier in raw_agents.items():
        if not isinstance(tier, str) or not tier:
            raise bad(f"agents.{name}", "expected a tier name")
        agents[str(name)] = tier
    raw_calls = data.get("calls") or []
    if not isinstance(raw_calls, list):
        raise bad("calls", "expected a list of {agent, invocation, step, tier}")
    calls: dict[CallKey, str] = {}
    for i, entry in enumerate(raw_calls):
        where = f"calls[{i}]"
        if not isinstance(entry, dict):
            raise bad(where, "expected an object {agent, invocation, step, tier}")
        extra = set(entry) - {"agent", "invocation", "step", "tier"}
        if extra:
            raise bad(f"{where}.{sorted(extra)[0]}", "unknown field")
        for key in ("agent", "tier"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise bad(f"{where}.{key}", "expected a non-empty string")
        for key in ("invocation", "step"):
            number = entry.get(key)
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise bad(f"{where}.{key}", "expected an integer >= 1")
        calls[CallKey(entry["agent"], entry["invocation"], entry["step"])] = entry["tier"]
    return Routing(agents=agents, calls=calls, task=data.get("task"), trace=data.get("trace"))
