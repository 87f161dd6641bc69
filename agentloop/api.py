"""The async embedding API: open a task, resolve its tier, plan a run and run it.

The run's wiring (its configuration, model clients, set-up and execution) lives in
:mod:`agentloop.wiring`; its public names are re-exported here, where callers have always
found them.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Unpack

from agentloop.config import shipped
from agentloop.config.tasks import Task, load_task
from agentloop.config.tiers import Tier, get_tier, load_tiers, require_key
from agentloop.errors import ConfigError
from agentloop.loop.ending import RunResult
from agentloop.wiring.clients import model_client, resolve_routing
from agentloop.wiring.config import (
    ModelOpener,
    RunConfig,
    RunOptions,
    RunPlan,
    SuiteScope,
    configure,
    tool_registry,
)
from agentloop.wiring.execute import execute

__all__ = [
    "DEFAULT_TIER",
    "ModelOpener",
    "RunConfig",
    "RunOptions",
    "RunPlan",
    "SuiteScope",
    "configure",
    "execute",
    "model_client",
    "open_task",
    "plan_run",
    "resolve_routing",
    "resolve_tier",
    "run_task",
    "tool_registry",
    "trace_path_for",
]

DEFAULT_TIER = "sim-standard"
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a run id names its trace file: nothing else in it


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


def trace_path_for(trace_dir: Path, task: Task, tier: Tier, run_id: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", task.name)
    return trace_dir / f"{stamp}-{safe}-{tier.name}-{run_id[:6]}.jsonl"


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
