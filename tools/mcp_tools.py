"""MCP servers' tools for a run, through the official ``mcp`` SDK's ClientSession.

:func:`open_servers` starts every server a task's ``tools:`` names (``mcp:NAME`` or
``mcp:NAME/TOOL``), once per run (:class:`ServerHost`, :mod:`agentloop_tools._mcp_host`; a
stdio one in the run's jail, :mod:`agentloop_tools._mcp_stdio`), lists their tools and returns
them as :class:`McpTool`\\ s (each meets the Tool protocol, under the server's own name and
schema). A server that fails to start, dies, hangs past the tool timeout or answers with an
error or malformed content gives the model an error result, never an exception; the run goes
on. Closing the run's stack stops every server (and the jail kills what is left).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from agentloop_tools._mcp_host import ServerHost, describe
from agentloop_tools._mcp_stdio import McpDown
from agentloop_tools._sandbox import cap_text, output_cap

from agentloop.config import mcp as mcp_config
from agentloop.config.mcp import McpServer
from agentloop.errors import ConfigError
from agentloop.protocols import Tool, ToolContext
from agentloop.trace import attrs as A
from agentloop.types import ToolResult, ToolSpec

__all__ = ["McpDown", "McpTool", "ServerHost", "expand", "open_servers", "render"]

START_MIN_S = 15.0  # the least a server is given to start and list its tools


class McpTool:
    """One tool of an MCP server, as the Tool protocol wants it; its spans carry ``mcp.server``."""

    def __init__(self, host: ServerHost, tool: Any | None, name: str) -> None:
        self.host, self.tool_name = host, name
        self.span_attrs = {A.MCP_SERVER: host.name}
        if tool is None:  # named by mcp:NAME/TOOL, its server did not start
            self.spec = ToolSpec(name, f"(MCP server '{host.name}' is not running)", _ANY)
        else:
            schema = dict(tool.input_schema or {}) or dict(_ANY)
            self.spec = ToolSpec(name, tool.description or tool.title or "", schema)

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        server = self.host.name
        # a little under the run's ceiling, so this error (with the server named) wins
        ceiling = float(ctx.settings.tool_timeout_s)
        timeout_s = max(ceiling - 0.5, ceiling * 0.9)
        try:
            result = await self.host.call(self.tool_name, arguments, timeout_s)
        except McpDown as exc:
            return _failed(server, f"MCP server '{server}' is not running: {exc}", "down")
        except TimeoutError:
            return _failed(
                server,
                f"MCP server '{server}' did not answer {self.tool_name} within {timeout_s:g} s",
                "timeout",
            )
        except Exception as exc:  # the SDK refused the answer (malformed), or the server erred
            return _failed(server, f"MCP server '{server}' failed: {describe(exc)}", "protocol")
        text = render(result)
        out = cap_text(text, output_cap(ctx), what="MCP result")
        data: dict[str, Any] = {"content": [c.type for c in result.content]}
        if result.is_error:
            data["error"] = "tool"
            return ToolResult(ok=False, output=out or "(the tool reported an error)", data=data)
        return ToolResult(ok=True, output=out, data=data)


_ANY: dict[str, Any] = {"type": "object", "properties": {}}


def _failed(server: str, why: str, kind: str) -> ToolResult:
    return ToolResult(ok=False, output=f"Error: {why}", data={"error": kind})


def render(result: Any) -> str:
    """The text the model sees of a CallToolResult: text blocks as they are, other blocks
    named, the structured result as JSON when no text came."""
    parts = []
    for block in result.content:
        kind = block.type
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data):,} base64 chars]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        elif kind == "resource":
            res = block.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(orjson.dumps(result.structured_content).decode())
    return "\n".join(parts)


async def open_servers(
    servers: tuple[McpServer, ...],
    wanted: tuple[str, ...],
    ctx: ToolContext[Any],
    offered: Mapping[str, str],
    stack: contextlib.AsyncExitStack,
    start: Callable[[ServerHost, float], Awaitable[None]] | None = None,
) -> tuple[dict[str, Tool], tuple[str, ...], list[dict[str, Any]]]:
    """Start the servers ``wanted`` (a task's ``tools:``) names, in parallel, each stopped by
    ``stack``; (their tools by name, ``wanted`` with each ``mcp:`` entry expanded to its
    tools' names, one record per server for the trace header). ``offered``: the run's other
    tool names, each with what it is ("the built-in tool", "the sub-agent"); a clash with one,
    or between servers, is a :class:`ConfigError` naming both. ``start`` starts one server
    within a timeout (default :meth:`ServerHost.start`; a run's set-up times each as a part of
    its own)."""
    by_name = {s.name: s for s in servers}
    refs = [(w, mcp_config.parse_ref(w)) for w in wanted]
    used = list(dict.fromkeys(ref[0] for _, ref in refs if ref is not None))
    hosts = {name: ServerHost(by_name[name], ctx) for name in used}
    for host in hosts.values():
        stack.push_async_callback(host.aclose)
    # a start is an interpreter starting in the jail, not a tool call: a short tool timeout
    # (a test's 2 s) is not its bound on a loaded machine
    timeout = max(float(ctx.settings.tool_timeout_s), START_MIN_S)
    starting = start or ServerHost.start
    await asyncio.gather(*(starting(h, timeout) for h in hosts.values()))
    registry: dict[str, Tool] = {}
    names: list[str] = []
    for entry, ref in refs:
        if ref is None:
            names.append(entry)
            continue
        host = hosts[ref[0]]
        for name, tool in _picked(entry, host, ref[1]):
            if _claim(name, host, registry, offered):
                registry[name] = McpTool(host, tool, name)
                names.append(name)
    return registry, tuple(names), [_record(h) for h in hosts.values()]


def _picked(entry: str, host: ServerHost, tool: str | None) -> list[tuple[str, Any | None]]:
    """The tools one ``mcp:`` entry names: all of the server's, or the one (None: its server
    did not start, the tool stays, saying so); a tool the server does not have is an error."""
    listed = {t.name: t for t in host.tools}
    if tool is None:
        return list(listed.items())
    if tool in listed or host.failure is not None:
        return [(tool, listed.get(tool))]
    raise ConfigError(
        f"'{entry}': MCP server '{host.name}' has no tool '{tool}' "
        f"(it has: {', '.join(sorted(listed)) or 'none'})"
    )


def _claim(
    name: str, host: ServerHost, registry: Mapping[str, Tool], offered: Mapping[str, str]
) -> bool:
    """Whether ``name`` is a new tool of ``host`` (False: it has it already); a clash with
    another server's tool or with one of ``offered`` is a :class:`ConfigError` naming both."""
    had = registry.get(name)
    if isinstance(had, McpTool) and had.host.name != host.name:
        raise ConfigError(
            f"tool name clash: '{name}' of MCP server '{host.name}' and of MCP server "
            f"'{had.host.name}'; name only one of them in tools:"
        )
    if name in offered:
        raise ConfigError(
            f"tool name clash: '{name}' of MCP server '{host.name}' and "
            f"{offered[name]} '{name}'; drop one of them from tools:"
        )
    return had is None


def _record(h: ServerHost) -> dict[str, Any]:
    """A server's record in the trace header: how it was reached, its set-up, tools, failure."""
    return {
        "name": h.name,
        **h.server.record(),
        "setup_s": round(h.setup_s, 4),
        "tools": [t.name for t in h.tools],
        "error": h.failure,
    }


def expand(entries: tuple[str, ...], opened: dict[str, Tool]) -> tuple[str, ...]:
    """``entries`` (a task's or a sub-agent's ``tools:``) with each ``mcp:`` entry replaced by
    the names of the tools :func:`open_servers` opened for it (``opened``: its registry)."""
    out: list[str] = []
    for entry in entries:
        ref = mcp_config.parse_ref(entry)
        if ref is None:
            out.append(entry)
            continue
        out += [
            name
            for name, tool in opened.items()
            if isinstance(tool, McpTool) and tool.host.name == ref[0] and ref[1] in (None, name)
        ]
    return tuple(dict.fromkeys(out))
