"""agentloop: run agent tasks, trace where their time goes, predict what a faster tier buys."""

from agentloop._version import __version__
from agentloop.api import RunConfig, open_task, resolve_tier, run_task
from agentloop.config.tasks import Limits, Task, load_task
from agentloop.config.tiers import Tier, load_tiers
from agentloop.errors import AgentloopError, ConfigError, ModelError, TaskFileError
from agentloop.events import RunEvent
from agentloop.handle import RunHandle, start_run
from agentloop.loop.runner import Runner, RunResult
from agentloop.model.speed import SpeedProfile
from agentloop.trace.reader import Trace, load_trace

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
