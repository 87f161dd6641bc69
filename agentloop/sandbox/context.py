"""RunContext: what tools may touch during one run (workspace, jail, typed settings, resources)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agentloop.config.limits import Limits
from agentloop.errors import ConfigError
from agentloop.redact import SECRET_NAME
from agentloop.sandbox import taskenv
from agentloop.sandbox.jail import Jail, JailSpec, open_jail

DEFAULT_OUTPUT_CAP = 16_000  # characters of a tool's text fed back to the model
MIN_OUTPUT_CAP = 200
DEFAULT_TOOL_TIMEOUT_S = Limits.tool_timeout_s  # the limits' defaults: agentloop/config/limits.py

# variables a subprocess may inherit; anything else (and anything named like a secret) is dropped
_PASS_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "PYENV_ROOT",
    "PYENV_VERSION",
)


def scrubbed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a tool's subprocess gets: an allow-list, minus anything secret-looking.

    During a run, the task's own venv (:func:`agentloop.sandbox.taskenv.current`) comes first on PATH
    and agentloop's interpreter folder is taken off it; outside a run, the folder of the running
    interpreter comes first, so ``python`` is the Python agentloop runs on, activated or not.
    """
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items() if k in _PASS_ENV and not SECRET_NAME.search(k)}
    task_env = taskenv.current()
    if task_env is not None:
        return task_env.apply(out)
    here = os.path.dirname(sys.executable)
    path = [p for p in out.get("PATH", os.defpath).split(os.pathsep) if p and p != here]
    out["PATH"] = os.pathsep.join([here, *path])
    return out


@dataclass(frozen=True)
class ToolSettings:
    """What the tools of one run may rely on: written once, here, with its defaults."""

    test_command: str | None = None  # what run_tests runs
    allow_hosts: tuple[str, ...] = ()  # hosts the browser may reach besides loopback
    output_cap: int = DEFAULT_OUTPUT_CAP  # characters of a tool's text fed back to the model
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S  # ceiling on one tool call
    browser_executable: str | None = None  # Chromium to drive (default: the system one)
    browser_args: tuple[str, ...] = ()  # extra Chromium flags

    def __post_init__(self) -> None:
        if isinstance(self.allow_hosts, str):
            object.__setattr__(self, "allow_hosts", (self.allow_hosts,))
        object.__setattr__(self, "allow_hosts", tuple(str(h) for h in self.allow_hosts))
        object.__setattr__(self, "browser_args", tuple(str(a) for a in self.browser_args))
        object.__setattr__(self, "output_cap", max(MIN_OUTPUT_CAP, int(self.output_cap)))
        object.__setattr__(self, "tool_timeout_s", float(self.tool_timeout_s))

    @classmethod
    def of(cls, value: ToolSettings | Mapping[str, Any] | None) -> ToolSettings:
        """Settings from a mapping of the same names (an unknown name is an error)."""
        if value is None:
            return cls()
        if isinstance(value, ToolSettings):
            return value
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(
                f"unknown tool setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**{k: v for k, v in value.items() if v is not None})


@dataclass
class RunContext:
    """Implements :class:`agentloop.protocols.ToolContext` for one run.

    ``jail`` runs the run's commands (:mod:`agentloop.sandbox.jail`); without one, the first command
    opens a jail over the workspace for the rest of the context's life.
    """

    workspace: Path
    env: dict[str, str] = field(default_factory=scrubbed_env)
    settings: ToolSettings = field(default_factory=ToolSettings)
    jail: Jail | None = None
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _resources: dict[str, Any] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.settings = ToolSettings.of(self.settings)

    async def the_jail(self) -> Jail:
        """The jail this run's commands execute in (opened here once if none was given)."""
        if self.jail is None:

            async def factory(stack: contextlib.AsyncExitStack) -> Jail:
                jail = await open_jail(JailSpec(workspace=Path(self.workspace)))
                stack.push_async_callback(jail.aclose)
                return jail

            self.jail = await self.resource("jail", factory)
        return self.jail

    async def resource(
        self, key: str, factory: Callable[[contextlib.AsyncExitStack], Awaitable[Any]]
    ) -> Any:
        """The run-scoped resource ``key``, made once by ``await factory(stack)`` (lazily)."""
        if key in self._resources:
            return self._resources[key]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._resources:
                self._resources[key] = await factory(self.stack)
        return self._resources[key]

    async def aclose(self) -> None:
        """Close every run-scoped resource (the browser, for one)."""
        self._resources.clear()
        await self.stack.aclose()
