"""A stdio MCP server in the run's jail, its three pipes bridged to the SDK's session streams.

The server is started with :func:`agentloop.sandbox.start_piped` (it is code acting on the
workspace, so it runs where the run's commands run); its stdout lines are JSON-RPC messages for
the SDK's ``ClientSession``, the session's messages go to its stdin, newline-delimited, as the
SDK's own ``stdio_client`` speaks it (that client spawns on the host, so it cannot be used as
is). Closing the bridge is the spec's shutdown: stdin closed, :data:`STOP_S` of grace, the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agentloop_tools._sandbox import subprocess_env, workspace

from agentloop.config.mcp import McpServer
from agentloop.protocols import ToolContext
from agentloop.sandbox import Piped, start_piped

STDERR_KEEP = 4000  # bytes of a server's stderr kept for the error that names its end
STOP_S = 2.0  # a server's grace to leave after its stdin closes, before it is killed


class McpDown(Exception):
    """The server is not there to answer (did not start, exited, or its session ended)."""


class StderrTail:
    """The last :data:`STDERR_KEEP` bytes (about) a server wrote to its stderr."""

    def __init__(self) -> None:
        self.chunks: deque[bytes] = deque()
        self._n = 0

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self._n += len(chunk)
        while self._n > STDERR_KEEP and len(self.chunks) > 1:
            self._n -= len(self.chunks.popleft())

    def text(self) -> str:
        """What an error adds about the server's end ("" when it wrote nothing)."""
        text = b"".join(self.chunks).decode("utf-8", "replace").strip()
        return f"; its stderr ends: {text[-800:]}" if text else ""


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


async def spawn(server: McpServer, ctx: ToolContext[Any]) -> Piped:
    """``server`` started in the run's jail, with the run's environment and the variables its
    ``env`` names, in its ``cwd`` (relative to the workspace)."""
    jail = await ctx.the_jail()
    env = subprocess_env(ctx)
    for var in server.env:
        if var in os.environ:
            env[var] = os.environ[var]
    cwd = workspace(ctx) / (server.cwd or ".")
    if not cwd.is_dir():
        raise McpDown(f"its cwd {server.cwd!r} is not a folder in the workspace")
    program = resolve_command(server.command or "", env, jail.spec.path_prefix)
    return await start_piped(jail, [program, *server.args], cwd=cwd, env=env)


async def _read_messages(
    out: asyncio.StreamReader, to_session: Any, ended: Callable[[], Awaitable[None]]
) -> None:
    """Each stdout line as a message for the session (a malformed one: its error, which the
    session surfaces), until the server closes its stdout; then ``ended``, before the session
    hears the stream end."""
    import mcp.types as types
    from mcp.shared.message import SessionMessage

    async with to_session:
        while line := await out.readline():
            try:
                msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError as exc:
                await to_session.send(exc)
                continue
            await to_session.send(SessionMessage(msg))
        await ended()


async def _read_stderr(err: asyncio.StreamReader, tail: StderrTail) -> None:
    while chunk := await err.read(4096):
        tail.add(chunk)


async def _write_messages(from_session: Any, stdin: asyncio.WriteTransport) -> None:
    async with from_session:
        async for message in from_session:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            stdin.write(data.encode() + b"\n")


@contextlib.asynccontextmanager
async def bridge(
    piped: Piped, tail: StderrTail, down: Callable[[str], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """The session's (read, write) streams over ``piped``'s pipes; ``down`` hears the server's
    exit before the session hears its stream end (so its calls' errors name the exit)."""
    import anyio

    loop = asyncio.get_running_loop()
    out, err = asyncio.StreamReader(limit=1 << 24), asyncio.StreamReader()
    out_t, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(out), os.fdopen(piped.stdout, "rb", 0)
    )
    err_t, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(err), os.fdopen(piped.stderr, "rb", 0)
    )
    in_t, in_p = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(piped.stdin, "wb", 0))
    to_session, read = anyio.create_memory_object_stream[Any](0)
    write, from_session = anyio.create_memory_object_stream[Any](0)

    async def ended() -> None:
        down(f"exited (code {await piped.command.exited})")

    tasks = [
        asyncio.create_task(_read_messages(out, to_session, ended)),
        asyncio.create_task(_read_stderr(err, tail)),
        asyncio.create_task(_write_messages(from_session, in_t)),
    ]
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
