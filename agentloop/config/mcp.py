"""A task file's ``mcp_servers:``: the MCP servers whose tools a run offers, validated.

Each server is either a command (stdio: ``command``, ``args``, ``env`` naming the variables it
is given, ``cwd`` relative to the workspace) or a ``url`` (streamable HTTP, ``headers`` whose
values may name variables as ``${NAME}``). ``tools:`` then takes ``mcp:NAME`` (every tool of
the server) or ``mcp:NAME/TOOL`` (one). A stdio server runs in the run's jail, where the run's
commands can read its environment: a secret-looking variable is refused there (a URL server's
headers are sent by agentloop itself, never shown to the jail).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentloop.errors import ConfigError
from agentloop.redact import SECRET_NAME

PREFIX = "mcp:"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class McpServerModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list)
    cwd: str | None = None
    url: str | None = Field(default=None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


@dataclass(frozen=True)
class McpServer:
    """One MCP server of a task: stdio (``command``) or streamable HTTP (``url``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # names of variables passed from agentloop's environment
    cwd: str | None = None  # relative to the run's workspace
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()  # (header, value with ${VAR} references)

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable-http"

    def record(self) -> dict[str, Any]:
        """What the trace header says of the server (no values of variables)."""
        if self.command is not None:
            return {"transport": "stdio", "command": [self.command, *self.args]}
        return {"transport": "streamable-http", "url": self.url}

    def header_values(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """The headers with their ``${VAR}`` references filled in from the environment."""
        env = os.environ if environ is None else environ
        out = {}
        for key, template in self.headers:
            missing = [v for v in _VAR.findall(template) if v not in env]
            if missing:
                raise ConfigError(
                    f"MCP server '{self.name}': header {key!r} names variable "
                    f"{missing[0]} which is not set"
                )
            out[key] = _VAR.sub(lambda m: env[m.group(1)], template)
        return out


def problem(name: str, m: McpServerModel) -> tuple[str, str] | None:
    """(field, why) when a server entry is not usable; None when it is."""
    if not _NAME.fullmatch(name):
        return "", f"server name {name!r} must be letters, digits, '_', '.', '-'"
    if (m.command is None) == (m.url is None):
        return "", "give either command (a stdio server) or url (streamable HTTP), not both"
    if m.url is not None:
        if not re.match(r"https?://", m.url):
            return "url", f"{m.url!r} must be an http:// or https:// URL"
        for f in ("args", "env", "cwd"):
            if getattr(m, f):
                return f, f"{f} is for a command (stdio) server, not a url one"
    if m.command is not None and m.headers:
        return "headers", "headers are for a url (streamable HTTP) server"
    for i, var in enumerate(m.env):
        if not _ENV_NAME.fullmatch(var):
            return f"env[{i}]", f"{var!r} is not a variable name"
        if SECRET_NAME.search(var):
            return f"env[{i}]", (
                f"{var} looks like a secret: a stdio server runs in the run's jail, where the "
                "run's commands can read its environment (serve it over url: with headers)"
            )
    if m.cwd is not None and (os.path.isabs(m.cwd) or ".." in m.cwd.split("/")):
        return "cwd", f"{m.cwd!r} must be a folder inside the workspace (relative, no '..')"
    return None


def build(name: str, m: McpServerModel) -> McpServer:
    return McpServer(
        name=name,
        command=m.command,
        args=tuple(m.args),
        env=tuple(m.env),
        cwd=m.cwd,
        url=m.url,
        headers=tuple(m.headers.items()),
    )


def parse_ref(entry: str) -> tuple[str, str | None] | None:
    """``mcp:NAME`` -> (NAME, None), ``mcp:NAME/TOOL`` -> (NAME, TOOL); None: not an MCP entry."""
    if not entry.startswith(PREFIX):
        return None
    server, _, tool = entry[len(PREFIX) :].partition("/")
    return server, (tool or None)
