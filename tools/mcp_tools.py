"""MCP servers' tools for a run, through the official ``mcp`` SDK's ClientSession.

:func:`open_servers` starts every server a task's ``tools:`` names (``mcp:NAME`` or
``mcp:NAME/TOOL``), once per run, lists their tools and returns them as :class:`McpTool`\\ s
(each meets the Tool protocol, under the server's own name and schema). A stdio server is
started in the run's jail (:func:`agentloop.sandbox.start_piped`: it is code acting on the
workspace) and its three pipes are bridged here to the SDK's session streams, newline-delimited
JSON-RPC as the SDK's own ``stdio_client`` speaks it (that client spawns on the host, so it
cannot be used as is); a URL server is reached with the SDK's ``streamable_http_client``.

Each server's session lives in a task of its own (the SDK's task groups must be left by the
task that entered them); tool calls from the loop's tasks are requests on that session, raced
against the server's end. A server that fails to start, dies, hangs past the tool timeout or
answers with an error or malformed content gives the model an error result, never an exception;
the run goes on. Closing the run's stack stops every server (and the jail kills what is left).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson
from agentloop_tools._sandbox import cap_text, output_cap, subprocess_env, workspace

from agentloop.config import mcp as mcp_config
from agentloop.config.mcp import McpServer
from agentloop.errors import ConfigError
from agentloop.protocols import Tool, ToolContext
from agentloop.sandbox import Piped, start_piped
from agentloop.trace import attrs as A
from agentloop.types import ToolResult, ToolSpec

STDERR_KEEP = 4000  # bytes of a server's stderr kept for the error that names its end
START_MIN_S = 15.0  # the least a server is given to start and list its tools
STOP_S = 2.0  # a server's grace to leave after its stdin closes, before it is killed


class McpDown(Exception):
    """The server is not there to answer (did not start, exited, or its session ended)."""


class ServerHost:
    """One MCP server for one run: its session in a task of its own, its tools, its end."""

    def __init__(self, server: McpServer, ctx: ToolContext[Any]) -> None:
        self.server, self.ctx = server, ctx
        self.name = server.name
        self.session: Any = None
        self.tools: list[Any] = []
        self.failure: str | None = None
        self.stderr: deque[bytes] = deque()
        self._stderr_n = 0
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._piped: Piped | None = None
        self.setup_s = 0.0

    # -- life ------------------------------------------------------------------------------

    async def start(self, timeout_s: float) -> None:
        """Start the server, initialize the session and list its tools, within ``timeout_s``;
        a failure is kept in :attr:`failure` (the run goes on without its tools)."""
        t0 = time.perf_counter()
        self._task = asyncio.create_task(self._serve(), name=f"mcp {self.name}")
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._ready)
        except TimeoutError:
            self.failure = f"did not answer initialize and tools/list within {timeout_s:g} s"
            await self.aclose()
        except McpDown:
            pass  # self.failure says why
        self.setup_s = time.perf_counter() - t0

    async def _serve(self) -> None:
        from mcp import ClientSession

        try:
            async with self._streams() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                from mcp.types import PaginatedRequestParams

                tools: list[Any] = []
                cursor: str | None = None
                while True:
                    params = PaginatedRequestParams(cursor=cursor) if cursor else None
                    listed = await session.list_tools(params=params)
                    tools.extend(listed.tools)
                    cursor = listed.next_cursor
                    if not cursor:
                        break
                self.session, self.tools = session, tools
                if not self._ready.done():
                    self._ready.set_result(None)
                await self._stop.wait()
        except asyncio.CancelledError:
            self._down("stopped with the run")
            raise
        except BaseException as exc:
            self._down(_describe(exc))
        else:
            self._down("stopped with the run")

    def _down(self, why: str) -> None:
        if self.failure is None:
            self.failure = why + self.stderr_tail()
        self.session = None
        if not self._ready.done():
            self._ready.set_exception(McpDown(self.failure))
            self._ready.exception()  # retrieved: start() may be gone already

    def stderr_tail(self) -> str:
        text = b"".join(self.stderr).decode("utf-8", "replace").strip()
        return f"; its stderr ends: {text[-800:]}" if text else ""

    async def aclose(self) -> None:
        """Stop the server (stdin closed, then killed after :data:`STOP_S`), and its task."""
        self._stop.set()
        if self._task is not None and not self._task.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_S + 1.0):
                    await asyncio.shield(asyncio.wait({self._task}))
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        if self._piped is not None:
            await self._piped.command.kill()

    # -- the transports ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        if self.server.command is None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            assert self.server.url is not None
            headers = self.server.header_values()
            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(self.server.url, http_client=http) as streams,
            ):
                yield streams[0], streams[1]
            return
        async with self._jail_stdio() as streams:
            yield streams

    @contextlib.asynccontextmanager
    async def _jail_stdio(self) -> AsyncIterator[tuple[Any, Any]]:
        """The server started in the run's jail; its stdout lines in, our messages to its stdin."""
        import anyio
        import mcp.types as types
        from mcp.shared.message import SessionMessage

        jail = await self.ctx.the_jail()
        env = subprocess_env(self.ctx)
        for var in self.server.env:
            if var in os.environ:
                env[var] = os.environ[var]
        cwd = workspace(self.ctx) / (self.server.cwd or ".")
        if not cwd.is_dir():
            raise McpDown(f"its cwd {self.server.cwd!r} is not a folder in the workspace")
        program = resolve_command(self.server.command or "", env, jail.spec.path_prefix)
        argv = [program, *self.server.args]
        self._piped = piped = await start_piped(jail, argv, cwd=cwd, env=env)
        loop = asyncio.get_running_loop()
        out, err = asyncio.StreamReader(limit=1 << 24), asyncio.StreamReader()
        out_t, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(out), os.fdopen(piped.stdout, "rb", 0)
        )
        err_t, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(err), os.fdopen(piped.stderr, "rb", 0)
        )
        in_t, in_p = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(piped.stdin, "wb", 0)
        )
        to_session, read = anyio.create_memory_object_stream[Any](0)
        write, from_session = anyio.create_memory_object_stream[Any](0)

        async def reader() -> None:
            async with to_session:
                while line := await out.readline():
                    try:
                        msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError as exc:
                        await to_session.send(exc)  # malformed: the session surfaces it
                        continue
                    await to_session.send(SessionMessage(msg))
                # before the session hears the stream end: its calls' errors name the exit
                self._down(f"exited (code {await piped.command.exited})")

        async def errors() -> None:
            while chunk := await err.read(4096):
                self.stderr.append(chunk)
                self._stderr_n += len(chunk)
                while self._stderr_n > STDERR_KEEP and len(self.stderr) > 1:
                    self._stderr_n -= len(self.stderr.popleft())

        async def writer() -> None:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    in_t.write(data.encode() + b"\n")

        tasks = [asyncio.create_task(f()) for f in (reader, errors, writer)]
        try:
            yield read, write
        finally:
            in_t.close()  # the spec's shutdown: stdin closed, a grace, then the kill
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_S):
                    await asyncio.shield(piped.command.exited)
            await piped.command.kill()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            out_t.close()
            err_t.close()
            del in_p

    # -- calls -----------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        """``tools/call`` on the session, raced against the server's end; raises McpDown or
        TimeoutError (the SDK's own errors pass through)."""
        session = self.session
        if session is None or self._task is None or self._task.done():
            raise McpDown(self.failure or "not running")
        call = asyncio.ensure_future(session.call_tool(tool, arguments))
        try:
            async with asyncio.timeout(timeout_s):
                done, _ = await asyncio.wait({call, self._task}, return_when="FIRST_COMPLETED")
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        if call in done and (call.exception() is None or self.failure is None):
            return call.result()
        raise McpDown(self.failure or "its session ended")


def _describe(exc: BaseException) -> str:
    """A failure in one line (an exception group: its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def resolve_command(command: str, env: dict[str, str], first: tuple[str, ...] = ()) -> str:
    """The server's program: a path as given, else in ``first`` (the task venv's bin/), else
    beside the Python agentloop runs on (where ``pip install mcp-server-git`` puts it, which
    the jail shows), else on the command's PATH."""
    if "/" in command:
        return command
    for path in (os.pathsep.join(first), os.path.dirname(sys.executable), env.get("PATH")):
        found = shutil.which(command, path=path) if path else None
        if found:
            return found
    return command


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
            return _failed(server, f"MCP server '{server}' failed: {_describe(exc)}", "protocol")
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
    or between servers, is a :class:`ConfigError` naming both. ``start``
    starts one server within a timeout (default :meth:`ServerHost.start`; a run's set-up
    times each as a part of its own)."""
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
    owner: dict[str, str] = {}
    names: list[str] = []
    for entry, ref in refs:
        if ref is None:
            names.append(entry)
            continue
        host = hosts[ref[0]]
        listed = {t.name: t for t in host.tools}
        if ref[1] is None:
            picked = [(n, listed[n]) for n in listed]
        elif ref[1] in listed or host.failure is not None:
            picked = [(ref[1], listed.get(ref[1]))]
        else:
            raise ConfigError(
                f"'{entry}': MCP server '{host.name}' has no tool '{ref[1]}' "
                f"(it has: {', '.join(sorted(listed)) or 'none'})"
            )
        for name, tool in picked:
            if name in owner and owner[name] != host.name:
                raise ConfigError(
                    f"tool name clash: '{name}' of MCP server '{host.name}' and of MCP server "
                    f"'{owner[name]}'; name only one of them in tools:"
                )
            if name in offered:
                raise ConfigError(
                    f"tool name clash: '{name}' of MCP server '{host.name}' and "
                    f"{offered[name]} '{name}'; drop one of them from tools:"
                )
            if name not in owner:
                owner[name] = host.name
                registry[name] = McpTool(host, tool, name)
                names.append(name)
    records = [
        {
            "name": h.name,
            **h.server.record(),
            "setup_s": round(h.setup_s, 4),
            "tools": [t.name for t in h.tools],
            "error": h.failure,
        }
        for h in hosts.values()
    ]
    return registry, tuple(names), records


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
