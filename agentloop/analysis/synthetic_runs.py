"""Synthetic runs shaped like the runner's: steps in sequence, tools in parallel, sub-agents.

:func:`sequential_run` writes steps (:class:`StepSpec`) as the runner does, with given gaps and
speed; a step's sub-agents (:class:`SubRun`) nest their own steps, and :func:`fanout_run` is the
lead-and-workers shape of issue 23. The records come from :mod:`agentloop.analysis.synthetic`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentloop.analysis.synthetic import TraceBuilder, model_attrs
from agentloop.trace import attrs as A


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step of :func:`sequential_run`: a model call, then its tools in parallel.

    ``attempts`` are failed attempts before the successful one, as ``(service_ns, wait_ns)``.
    """

    base_ns: int
    reasoning: int = 0
    visible: int = 2
    input_tokens: int = 1000
    tools: tuple[tuple[str, int], ...] = ()
    attempts: tuple[tuple[int, int], ...] = ()
    tail_ns: int = 0
    agents: tuple[SubRun, ...] = ()  # sub-agents called as tools, beside ``tools``


@dataclass(frozen=True, slots=True)
class SubRun:
    """A sub-agent invoked as a tool by a :class:`StepSpec` (:func:`fanout_run`): its steps."""

    name: str
    steps: tuple[StepSpec, ...]
    tier: str | None = None  # the tier its calls used; None: the run's tier


def sequential_run(
    steps: list[StepSpec],
    *,
    gap_ns: int = 1_000_000,
    tps: float = 60.0,
    finish: bool = True,
    **header_fields: Any,
) -> TraceBuilder:
    """A run shaped like the runner's: steps in sequence, each a model call then its tools.

    Every framework gap (step start, model start, request build before ``t_send``, after
    ``t_end``, tool dispatch, step end, run end, end record) is ``gap_ns``; the model streams at
    ``tps``. ``finish=False`` leaves out the run's end and the end record (a killed run).

    A step's ``agents`` are sub-agents called as tools beside its ``tools`` (issue 23): a tool
    span ``execute_tool NAME`` holding an ``agent`` span ``invoke_agent NAME`` holding the
    sub-run's steps, every span of the sub-run carrying the agent's name, invocation and
    depth; the sub-runs of one step overlap in time. Records are then written in time order,
    as the tracer writes them.
    """
    b = TraceBuilder(output_tps=tps, **header_fields)
    tiers = header_fields.get("tiers")
    main_tier = tiers[0]["name"] if tiers else "synthetic"
    t = 0
    run = b.start("run", "invoke_agent demo", t)
    em = _Emitter(b, gap_ns, tps, {}, {t["name"]: t for t in tiers or []})
    t, _ = em.steps(steps, run, t, None, main_tier)
    if finish:
        t += gap_ns
        b.end(run, t)
        b.finish(t + gap_ns, steps=len(steps))
    if em.nested:  # a sub-run's records were made in one go: put them in time order
        b.records[1:] = sorted(b.records[1:], key=lambda r: int(r["t"]))
    return b


@dataclass
class _Emitter:
    """Writes the steps of one agent (the main one or a sub-run) into a TraceBuilder."""

    b: TraceBuilder
    gap_ns: int
    tps: float
    invocations: dict[str, int]
    tiers: dict[str, dict[str, Any]]
    nested: bool = False

    def steps(
        self,
        steps: list[StepSpec] | tuple[StepSpec, ...],
        parent: str,
        t: int,
        who: tuple[str, int, int] | None,
        tier: str,
    ) -> tuple[int, list[str]]:
        """Steps in sequence under ``parent`` from ``t``; ``who``: (agent, invocation, depth)
        of a sub-run, None for the main agent. Returns the end instant and the last spans."""
        tag: dict[str, Any] = {}
        if who is not None:
            tag = dict(
                zip((A.GEN_AI_AGENT_NAME, A.AGENT_INVOCATION, A.AGENT_DEPTH), who, strict=True)
            )
        prof = self.tiers.get(tier, {}).get("profile")
        tps = self.tps if who is None or not prof else float(prof["output_tps"])
        agent = _Agent(tag, tps, 0 if who is None else who[2], tier)
        prev_step: list[str] = []
        prev: list[str] = []
        for k, sp in enumerate(steps, start=1):
            t, prev_step, prev = self._step(k, sp, parent, t, prev_step, prev, agent)
        return t, prev_step

    def _step(
        self,
        k: int,
        sp: StepSpec,
        parent: str,
        t: int,
        prev_step: list[str],
        prev: list[str],
        agent: _Agent,
    ) -> tuple[int, list[str], list[str]]:
        """Step ``k`` from ``t``: its model call, then its tools and sub-agents side by side.
        Returns the end instant, the step span, and the spans the next model call waits for."""
        b, gap_ns = self.b, self.gap_ns
        t += gap_ns
        st = b.start("step", f"step {k}", t, parent, prev_step, step=k, **agent.tag)
        m, t = self._model(k, sp, st, t + gap_ns, prev, agent)
        ends = []
        for j, (name, d) in enumerate(sp.tools):
            tid = b.start("tool", f"execute_tool {name}", t + gap_ns, st, [m], step=k, **agent.tag)
            ends.append((t + gap_ns + d, j, tid, name))
        for j, sub in enumerate(sp.agents, start=len(sp.tools)):
            ends.append(self._sub_run(k, j, sub, st, m, t, agent))
        for te, _, tid, name in sorted(ends):
            tool_attrs: dict[str, Any] = {A.GEN_AI_TOOL_NAME: name, A.OK: True, A.OUTPUT: ""}
            b.end(tid, te, **tool_attrs)
        t = max((e[0] for e in ends), default=t) + gap_ns
        b.end(st, t)
        return t, [st], ([e[2] for e in ends] or [m])

    def _model(
        self, k: int, sp: StepSpec, st: str, t: int, prev: list[str], agent: _Agent
    ) -> tuple[str, int]:
        """Step ``k``'s model span from ``t``, its failed attempts first: the span and the
        instant after it."""
        b, gap_ns = self.b, self.gap_ns
        m = b.start("model", "chat demo", t, st, prev, step=k, **agent.tag)
        t += gap_ns
        failed = []
        for service, wait in sp.attempts:
            failed.append(
                dict(zip(A.ATTEMPT_KEYS, (t, t + service, "status 503", 503, wait), strict=True))
            )
            t += service + wait
        attrs = model_attrs(
            t,
            sp.base_ns,
            sp.reasoning,
            sp.visible,
            agent.tps,
            input_tokens=sp.input_tokens,
            tail_ns=sp.tail_ns,
            step=k,
            attempts=failed,
            tier=agent.tier,
        )
        t = attrs[A.TIMING][A.T_END] + gap_ns
        b.end(m, t, **attrs)
        return m, t

    def _sub_run(
        self, k: int, j: int, sub: SubRun, st: str, m: str, t: int, agent: _Agent
    ) -> tuple[int, int, str, str]:
        """Sub-agent ``sub`` called as step ``k``'s ``j``-th tool after model span ``m``: its
        tool span holding an agent span holding its steps. Returns (end, j, tool span, name)."""
        b, gap_ns = self.b, self.gap_ns
        self.nested = True
        t0 = t + gap_ns
        tid = b.start("tool", f"execute_tool {sub.name}", t0, st, [m], step=k, **agent.tag)
        inv = self.invocations[sub.name] = self.invocations.get(sub.name, 0) + 1
        sub_tier = sub.tier or agent.tier
        agent_attrs: dict[str, Any] = {
            A.GEN_AI_AGENT_NAME: sub.name,
            A.AGENT_INVOCATION: inv,
            A.AGENT_DEPTH: agent.depth + 1,
            A.TIER: sub_tier,
        }
        ag = b.start("agent", f"invoke_agent {sub.name}", t0 + gap_ns, tid, **agent_attrs)
        te, _ = self.steps(sub.steps, ag, t0 + gap_ns, (sub.name, inv, agent.depth + 1), sub_tier)
        b.end(ag, te + gap_ns)
        return te + 2 * gap_ns, j, tid, sub.name


@dataclass(frozen=True, slots=True)
class _Agent:
    """Whose steps an :class:`_Emitter` writes: the tags on its spans, its speed, its depth
    (0: the main agent) and its tier."""

    tag: dict[str, Any]
    tps: float
    depth: int
    tier: str


def fanout_run(
    sizes: list[int] | tuple[int, ...],
    *,
    rounds: int = 1,
    visible: int = 60,
    tiers: list[dict[str, Any]] | None = None,
    sub_tier: str | None = None,
    tool_ns: int = 50_000_000,
) -> TraceBuilder:
    """A lead agent that, ``rounds`` times, sends one sub-agent per entry of ``sizes`` in
    parallel (agent ``w<j>`` runs ``sizes[j]`` steps of a model call and a read, then answers),
    reads their findings, and ends with a closing step: the fan-out of issue 23.

    Answers' lengths vary deterministically with the step, so calls differ. ``tiers``: the
    header's tier list (main's first); ``sub_tier``: the tier the sub-agents' calls used.
    """

    def sub(j: int, n: int, r: int) -> SubRun:
        steps = tuple(
            StepSpec(
                200_000_000, visible=visible + 7 * ((j + k + r) % 5), tools=(("read", tool_ns),)
            )
            for k in range(n)
        )
        return SubRun(f"w{j}", (*steps, StepSpec(200_000_000, visible=visible // 2)), sub_tier)

    lead = [
        StepSpec(
            300_000_000,
            visible=visible // 2,
            agents=tuple(sub(j, n, r) for j, n in enumerate(sizes)),
        )
        for r in range(rounds)
    ]
    return sequential_run([*lead, StepSpec(300_000_000, visible=visible)], tiers=tiers)
