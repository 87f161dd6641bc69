"""What a run is given and what it will be: RunConfig, the suite's scope, the planned RunPlan."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypedDict, Unpack

from agentloop.config.routing import Routing
from agentloop.config.tasks import Task
from agentloop.config.tiers import Tier
from agentloop.events import EventSink, Observer
from agentloop.protocols import ModelClient, Tool
from agentloop.sandbox.closer import JailCloser
from agentloop.script import ScriptTurn

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
    """Everything a run is given besides its task: one frozen value that
    :func:`agentloop.run_task`, :func:`agentloop.start_run`, :func:`agentloop.api.execute`, the
    suite, the service and the CLI pass on.

    Planning (read before the run starts, by :func:`agentloop.api.plan_run`): ``tier`` (a name
    or a :class:`Tier`; default the task's, else sim-standard), ``tiers_file``, ``trace_dir``,
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


def tool_registry() -> dict[str, Tool]:
    """The built-in tools by name."""
    import agentloop_tools as tools  # the composition root: where the framework meets the tools

    return tools.registry()
