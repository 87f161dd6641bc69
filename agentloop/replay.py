"""Replay a recorded run: its model turns served by the simulator at any tier, tools re-run or fed.

Live replay executes the tools again (tool time is measured anew) and reports *divergence*: the
first step whose tool result differs from the recording in a way that would change the next model
request. Workspace paths and durations printed by test runners are normalised before comparing,
so a replay in a new working folder does not diverge on those alone. ``offline`` feeds the
recorded tool outputs instead: no side effects, nothing to diverge.

A replay always talks to the embedded simulator, whatever tier the trace (or ``--tier``) names: a
real endpoint's tier is replayed as a simulated tier with its speed profile, so no model request
ever leaves the machine (the recorded conversation is not sent anywhere).
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Unpack

import orjson

from agentloop import api
from agentloop.config.tasks import Task, load_task
from agentloop.config.tiers import SIM, Tier, load_tiers
from agentloop.errors import ConfigError, TaskFileError, TraceFileError
from agentloop.loop.ending import RunResult
from agentloop.protocols import Tool
from agentloop.script import ScriptTurn
from agentloop.trace import attrs as A
from agentloop.trace.reader import SpanRecord, Trace, load_trace
from agentloop.types import ToolResult, ToolSpec

_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|sec|seconds)\b")


@dataclass(frozen=True)
class Divergence:
    """A step whose tool result differs from the recording."""

    step: int
    tool: str
    recorded: str
    replayed: str

    def describe(self) -> str:
        pairs = itertools.zip_longest(
            self.recorded.splitlines(), self.replayed.splitlines(), fillvalue=""
        )
        for a, b in pairs:
            if a != b:
                return (
                    f"step {self.step}: {self.tool} returned {b[:80]!r} where the recording "
                    f"had {a[:80]!r}"
                )
        return f"step {self.step}: {self.tool} result differs"


@dataclass(frozen=True)
class ReplayResult:
    """The replayed run, and where (if anywhere) it diverged from the recording."""

    run: RunResult
    divergences: list[Divergence] = field(default_factory=list)


def recorded_turns(trace: Trace, agent: str | None = None) -> list[ScriptTurn]:
    """The model turns of a trace (the main agent's, or ``agent``'s first invocation's), in step
    order, with its workspace path made ``{workspace}``."""
    from agentloop.sim import script_from_trace

    old = trace.run.workspace
    turns = script_from_trace(trace, agent)
    if not old:
        return turns
    return [
        replace(
            t,
            text=t.text.replace(old, "{workspace}"),
            tool_calls=tuple(
                replace(c, arguments=c.arguments.replace(old, "{workspace}")) for c in t.tool_calls
            ),
        )
        for t in turns
    ]


def _tool_spans_by_step(trace: Trace) -> dict[int, list[SpanRecord]]:
    """Tool spans per step, in the order the model asked for them (its tool_calls order)."""
    order: dict[str, int] = {}
    for m in trace.of_kind("model"):
        if m.model is not None and m.model.output is not None:
            for i, call in enumerate(m.model.output.tool_calls):
                order[call.id] = i
    steps: dict[int, list[SpanRecord]] = defaultdict(list)
    for t in trace.of_kind("tool"):
        if t.tool is not None and _main(t):  # a sub-agent's result is its caller's tool's
            steps[t.step or 0].append(t)
    for spans in steps.values():
        spans.sort(key=lambda s: order.get(s.tool.call_id if s.tool else "", 0))
    return steps


def _main(span: SpanRecord) -> bool:
    """Whether a span is the main agent's (a sub-run's carry their agent's name)."""
    return A.GEN_AI_AGENT_NAME not in span.start_attrs


def _normal(text: str, workspace: str | None) -> str:
    if workspace:
        text = text.replace(workspace, "{workspace}")
    return _DURATION.sub("<t>", text)


def divergences(recorded: Trace, replayed: Trace) -> list[Divergence]:
    """Steps whose tool results differ (after normalising paths and durations)."""
    a, b = _tool_spans_by_step(recorded), _tool_spans_by_step(replayed)
    wa, wb = recorded.run.workspace, replayed.run.workspace
    found = []
    for step in sorted(b):
        for old, new in zip(a.get(step, []), b[step], strict=False):
            if old.tool is None or new.tool is None:  # only finished spans are grouped
                continue
            ra, rb = _normal(old.tool.output, wa), _normal(new.tool.output, wb)
            if ra != rb or old.tool.ok != new.tool.ok:
                found.append(Divergence(step, new.tool.name, ra, rb))
    return found


class RecordedTool:
    """Answers a tool call with the recorded result of the same call (name and arguments)."""

    def __init__(self, spec: ToolSpec, results: dict[str, deque[ToolResult]]) -> None:
        self.spec = spec
        self._results = results

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        key = _args_key(arguments, str(ctx.workspace))
        queue = self._results.get(key)
        if not queue:
            return ToolResult(
                ok=False,
                output=f"Error: no recorded result for {self.spec.name} "
                f"with these arguments (offline replay)",
            )
        return queue.popleft()


def _args_key(arguments: Any, workspace: str | None) -> str:
    text = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
    return text.replace(workspace, "{workspace}") if workspace else text


def recorded_tools(trace: Trace) -> dict[str, RecordedTool]:
    """Offline stand-ins for every tool in the trace header, fed from its tool spans."""
    wa = trace.run.workspace
    by_tool: dict[str, dict[str, deque[ToolResult]]] = defaultdict(lambda: defaultdict(deque))
    for span in sorted(trace.of_kind("tool"), key=lambda s: s.t0):
        tool = span.tool
        if tool is None or not _main(span):  # in flight when the run stopped; a sub-run's
            continue
        try:
            args = orjson.loads(tool.arguments or "{}")
        except orjson.JSONDecodeError:
            continue
        by_tool[tool.name][_args_key(args, wa)].append(
            ToolResult(ok=tool.ok, output=tool.output, data=tool.data)
        )
    return {
        t.name: RecordedTool(ToolSpec(t.name, t.description, t.parameters), by_tool[t.name])
        for t in trace.run.tools
        if t.name != "finish"
    }


def task_of(trace: Trace) -> Task:
    """The recorded task: its file when still there (for workspace and setup), else the header.

    The header's ``task.source`` is untrusted: only a YAML file that loads as a task is used.
    Anything else (``/etc/shadow``, a file that has since broken) is not read into a message:
    the replay goes on from the header's task.
    """
    info = trace.run.task
    tools = tuple(t.name for t in trace.run.tools if t.name != "finish")
    finish = any(t.name == "finish" for t in trace.run.tools)
    task = None
    source = Path(info.source) if info.source else None
    if source is not None and source.suffix in (".yaml", ".yml") and source.is_file():
        try:
            task = load_task(source)
        except TaskFileError:
            task = None
    if task is None:
        task = Task(name=info.name, prompt=info.prompt, system=info.system)
    return replace(task, tools=tools, finish_tool=finish)


def _tree_of(trace: Trace, task: Task, path: object, config: api.RunConfig) -> tuple[Task, int]:
    """The recorded task with each sub-agent on the replay's tier and playing its recorded
    turns (a later invocation that went otherwise diverges, and says so), and how many
    sub-agent steps the recording had. Needs the task file: the header has no agent's prompt."""
    if not task.agents:
        raise TraceFileError(
            f"{path}, field 'agents': the run had sub-agents, and its task file "
            f"({trace.run.task.source or 'not recorded'}) is gone or no longer declares them; "
            "a replay of sub-agents needs it"
        )
    routed = config.routing.tiers() if config.routing else set()
    known = load_tiers(Path(config.tiers_file) if config.tiers_file else None, extra=task.tiers)
    real = sorted(t for t in routed if t in known and not known[t].simulated)
    if real:
        raise ConfigError(
            f"routing, tier '{real[0]}': a replay serves every call from the simulator; "
            "route agents to simulated tiers (sim-standard, sim-ultrafast, ...)"
        )
    agents = tuple(
        replace(a, tier=None, script=tuple(recorded_turns(trace, a.name)) or a.script)
        for a in task.agents
    )
    sub_steps = sum(
        1 for m in trace.of_kind("model") if not _main(m) and m.model and m.model.output
    )
    return replace(task, agents=agents), sub_steps


def simulated(tier: Tier, trace: Trace) -> Tier:
    """``tier`` as served by the embedded simulator (its profile, else the recording's)."""
    if tier.simulated:
        return tier
    profile = tier.profile or trace.run.tier.profile
    return replace(tier, base_url=SIM, api_key_env=None, profile=profile)


async def replay(
    trace_path: str | Path,
    *,
    offline: bool = False,
    until_step: int | None = None,
    config: api.RunConfig | None = None,
    **options: Unpack[api.RunOptions],
) -> ReplayResult:
    """Re-run a recorded trace's model turns at the config's tier (default: the recorded tier).

    ``config`` and its fields as keywords as :func:`agentloop.run_task` takes them (``tier``,
    ``tiers_file``, ``trace_dir``, ``events``, ...), except what a replay decides itself: its
    client (the embedded simulator, always), its script (the recorded turns) and its step limit
    (their number); ``offline`` also replaces the tools with the recorded results.
    """
    base = api.configure(config, **options)
    trace = load_trace(trace_path)
    turns = recorded_turns(trace)
    if not turns:
        raise TraceFileError(f"{trace_path}: no finished model turn to replay")
    if until_step is not None:
        turns = turns[:until_step]
    task = task_of(trace)
    steps = len(turns)
    if trace.run.agents:  # a tree: each sub-agent replays its first invocation's turns
        task, sub_steps = _tree_of(trace, task, trace_path, base)
        steps += 0 if offline else sub_steps
    if offline:
        task = replace(task, workspace=None, setup=(), success_command=None)
    task = replace(task, limits=replace(task.limits, max_steps=steps))
    tier = base.tier or trace.run.tier.name
    the_tier = simulated(api.resolve_tier(task, tier, base.tiers_file), trace)
    tools: dict[str, Tool] | None = dict(recorded_tools(trace)) if offline else base.tools
    run = replace(base, tier=the_tier, tools=tools, script=turns, client=None, max_steps=None)
    result = await api.run_task(task, config=run)
    found = [] if offline else divergences(trace, load_trace(result.trace_path or ""))
    return ReplayResult(result, found)
