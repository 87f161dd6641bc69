"""Which agent each imported span belongs to: the run's agents as agentloop's sub-agent structure.

A foreign run may hold several agents (openai-agents' agents as tools and handoffs, as
OpenInference records them). Each becomes a :class:`Scope`: its model and tool spans in start
order, its agent's name, invocation (1-based, per name) and depth. The agents that run one after
another directly in a container (the run, or a tool span) form a *level*: the first is the
container's agent (the run's main agent; a tool's sub-agent, one deeper than the tool's caller),
each later one took over from the one before (a handoff: same depth, ``handoff_from`` names it).
A tool span holding agent spans is an agent called as a tool: its level hangs from the tool
(``Scope.subs``). Spans of no kind are dropped; their children count as their parent's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agentloop.export._otlp_json import OtelSpan
from agentloop.export._otlp_spans import agent_name, kind


@dataclass
class Scope:
    """One agent's part of the run: its spans, who it is, and the agents it called as tools."""

    agent: str
    invocation: int
    depth: int
    span: OtelSpan  # the agent's own span (the run span for a run without agent spans)
    main: bool = False  # the run's main agent: its spans carry no agent attributes
    handoff_from: str | None = None
    items: list[tuple[OtelSpan, str]] = field(default_factory=list)  # (span, model | tool)
    subs: dict[str, list[Scope]] = field(default_factory=dict)  # tool span id -> its level

    def all(self) -> list[Scope]:
        """This scope and every scope below it, depth first."""
        return [self, *(s for level in self.subs.values() for sc in level for s in sc.all())]


def _children(s: OtelSpan) -> list[OtelSpan]:
    return sorted(s.children, key=lambda c: c.t0)


def _first_agents(s: OtelSpan) -> list[OtelSpan]:
    """The agent spans below ``s`` that no other agent, model or tool span holds."""
    out = []
    for c in _children(s):
        k = kind(c)
        if k == "run":
            out.append(c)
        elif k is None:
            out.extend(_first_agents(c))
    return sorted(out, key=lambda c: c.t0)


class _Tree:
    def __init__(self) -> None:
        self.invocations: Counter[str] = Counter()

    def scope(
        self, span: OtelSpan, depth: int, main: bool = False, after: str | None = None
    ) -> Scope:
        name = agent_name(span)
        self.invocations[name] += 1
        return Scope(name, self.invocations[name], depth, span, main, after)

    def gather(self, sc: Scope, s: OtelSpan, skip: set[str]) -> None:
        """``sc``'s model and tool spans below ``s`` (agent spans in ``skip`` are other scopes')."""
        for c in _children(s):
            k = kind(c)
            if k in ("model", "tool"):
                sc.items.append((c, k))
                if k == "tool":
                    level = self.level(c, sc.depth + 1)
                    if level:
                        sc.subs[c.span_id] = level
            elif c.span_id not in skip:  # an agent span nested deeper than a level: flattened
                self.gather(sc, c, skip)

    def level(self, container: OtelSpan, depth: int, main: bool = False) -> list[Scope]:
        """The agents that ran one after another in ``container`` (the run's: main first)."""
        agents = _first_agents(container)
        skip = {a.span_id for a in agents}
        if main:
            head = self.scope(agents[0] if agents else container, depth, main=True)
            self.gather(head, container, skip)  # what the run holds outside its agent spans
            if agents:
                self.gather(head, agents[0], skip)
        elif agents:
            head = self.scope(agents[0], depth)
            self.gather(head, agents[0], skip)
        else:
            return []
        out = [head]
        for a in agents[1:]:
            sc = self.scope(a, depth, after=out[-1].agent)
            self.gather(sc, a, skip)
            out.append(sc)
        for sc in out:
            sc.items.sort(key=lambda x: x[0].t0)
        return out


def agent_tree(run: OtelSpan) -> list[Scope]:
    """The run's level: its main agent, then each agent it (or its successor) handed off to;
    the agents called as tools hang from their tool spans."""
    return _Tree().level(run, 0, main=True)
