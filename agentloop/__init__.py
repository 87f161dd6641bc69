"""agentloop: run agent tasks, trace where their time goes, predict what a faster tier buys."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentloop._version import __version__

if TYPE_CHECKING:
    from agentloop.api import open_task, resolve_tier, run_task
    from agentloop.config.tasks import Limits, Task, load_task
    from agentloop.config.tiers import Tier, load_tiers
    from agentloop.errors import AgentloopError, ConfigError, ModelError, TaskFileError
    from agentloop.events import RunEvent
    from agentloop.handle import RunHandle, start_run
    from agentloop.loop.ending import RunResult
    from agentloop.loop.runner import Runner
    from agentloop.model.speed import SpeedProfile
    from agentloop.trace.reader import Trace, load_trace
    from agentloop.wiring.config import RunConfig

# each public name's home module, imported on first use (PEP 562): importing a part of agentloop
# (the suite's simulator child, a tool) loads that part and what it imports, not the whole library
_HOME = {
    "AgentloopError": "agentloop.errors",
    "ConfigError": "agentloop.errors",
    "Limits": "agentloop.config.tasks",
    "ModelError": "agentloop.errors",
    "RunConfig": "agentloop.wiring.config",
    "RunEvent": "agentloop.events",
    "RunHandle": "agentloop.handle",
    "RunResult": "agentloop.loop.ending",
    "Runner": "agentloop.loop.runner",
    "SpeedProfile": "agentloop.model.speed",
    "Task": "agentloop.config.tasks",
    "TaskFileError": "agentloop.errors",
    "Tier": "agentloop.config.tiers",
    "Trace": "agentloop.trace.reader",
    "load_task": "agentloop.config.tasks",
    "load_tiers": "agentloop.config.tiers",
    "load_trace": "agentloop.trace.reader",
    "open_task": "agentloop.api",
    "resolve_tier": "agentloop.api",
    "run_task": "agentloop.api",
    "start_run": "agentloop.handle",
}

__all__ = [
    "AgentloopError",
    "ConfigError",
    "Limits",
    "ModelError",
    "RunConfig",
    "RunEvent",
    "RunHandle",
    "RunResult",
    "Runner",
    "SpeedProfile",
    "Task",
    "TaskFileError",
    "Tier",
    "Trace",
    "__version__",
    "load_task",
    "load_tiers",
    "load_trace",
    "open_task",
    "resolve_tier",
    "run_task",
    "start_run",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'agentloop' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
