"""agentloop: run agent tasks, trace where their time goes, predict what a faster tier buys."""

__version__ = "0.1.0"

from agentloop.api import open_task, resolve_tier, run_task  # noqa: E402
from agentloop.errors import AgentloopError, ConfigError, ModelError, TaskFileError  # noqa: E402
from agentloop.runner import Runner, RunResult  # noqa: E402
from agentloop.tasks import Limits, Task, load_task  # noqa: E402
from agentloop.tiers import SpeedProfile, Tier, load_tiers  # noqa: E402
from agentloop.trace.reader import Trace, load_trace  # noqa: E402

__all__ = [
    "AgentloopError", "ConfigError", "Limits", "ModelError", "RunResult", "Runner",
    "SpeedProfile", "Task", "TaskFileError", "Tier", "Trace", "__version__", "load_task",
    "load_tiers", "load_trace", "open_task", "resolve_tier", "run_task",
]
