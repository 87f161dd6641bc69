"""One MCP server for one run: its session in a task of its own, its tools, its calls, its end.

The SDK's task groups must be left by the task that entered them, so each server's session
lives in a task of its own (:meth:`ServerHost._serve`); tool calls from the loop's tasks are
requests on that session, raced against the server's end. A stdio server is reached through
:mod:`agentloop_tools._mcp_stdio` (in the run's jail), a URL server with the SDK's
``streamable_http_client``. A failure to start, an exit or a hang is kept in
:attr:`ServerHost.failure`, never raised into the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from agentloop_tools._mcp_stdio import STOP_S, McpDown, StderrTail, bridge, spawn

from agentloop.config.mcp import McpServer
from agentloop.protocols import ToolContext
from agentloop.sandbox import Piped


class ServerHost:
    """One MCP server for one run: its session in a task of its own, its tools, its end."""

    def __init__(self, server: McpServer, ctx: ToolContext[Any]) -> None:
        self.server, self.ctx = server, ctx
        self.name = server.name
        self.session: Any = None
        self.tools: list[Any] = []
        self.failure: str | None = None
        self.stderr = StderrTail()
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
                self.session, self.tools = session, await _list_tools(session)
                if not self._ready.done():
                    self._ready.set_result(None)
                await self._stop.wait()
        except asyncio.CancelledError:
            self._down("stopped with the run")
            raise
        except BaseException as exc:
            self._down(describe(exc))
        else:
            self._down("stopped with the run")

    def _down(self, why: str) -> None:
        if self.failure is None:
            self.failure = why + self.stderr.text()
        self.session = None
        if not self._ready.done():
            self._ready.set_exception(McpDown(self.failure))
            self._ready.exception()  # retrieved: start() may be gone already

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

    @contextlib.asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        """The session's streams: over HTTP for a URL, else over a stdio server's pipes."""
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
        self._piped = piped = await spawn(self.server, self.ctx)
        async with bridge(piped, self.stderr, self._down) as streams:
            yield streams

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


async def _list_tools(session: Any) -> list[Any]:
    """Every tool the server lists, page after page."""
    from mcp.types import PaginatedRequestParams

    tools: list[Any] = []
    cursor: str | None = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        listed = await session.list_tools(params=params)
        tools.extend(listed.tools)
        cursor = listed.next_cursor
        if not cursor:
            return tools


def describe(exc: BaseException) -> str:
    """A failure in one line (an exception group: its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
