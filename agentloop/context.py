"""RunContext: what tools may touch during one run (workspace, scrubbed env, run-scoped resources)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentloop.trace.redact import SECRET_NAME

# variables a subprocess may inherit; anything else (and anything named like a secret) is dropped
_PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "TMPDIR", "USER",
             "LOGNAME", "SHELL", "PYTHONPATH", "VIRTUAL_ENV", "PYENV_ROOT", "PYENV_VERSION")


def scrubbed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a tool's subprocess gets: an allow-list, minus anything secret-looking.

    The folder of the running interpreter comes first on PATH, so ``python`` in a task's
    commands is the Python agentloop runs on (its venv, with pytest), activated or not.
    """
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items() if k in _PASS_ENV and not SECRET_NAME.search(k)}
    here = os.path.dirname(sys.executable)
    path = [p for p in out.get("PATH", os.defpath).split(os.pathsep) if p and p != here]
    out["PATH"] = os.pathsep.join([here, *path])
    return out


@dataclass
class RunContext:
    """Implements :class:`agentloop.protocols.ToolContext` for one run.

    ``settings`` keys tools read: ``test_command``, ``allow_hosts`` (browser), ``output_cap``
    (chars fed back to the model), ``tool_timeout_s``.
    """

    workspace: Path
    env: dict[str, str] = field(default_factory=scrubbed_env)
    settings: dict[str, Any] = field(default_factory=dict)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _resources: dict[str, Any] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def resource(self, key: str,
                       factory: Callable[[contextlib.AsyncExitStack], Awaitable[Any]]) -> Any:
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
