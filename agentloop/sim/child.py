"""A suite's simulator in a process of its own: routes opened over a pipe, served over loopback.

A suite of a thousand runs streams from one simulator. In the suite's own process, the
simulator's writes and the clients' reads share one event loop and one core, and a loop busy
reading some streams writes others late, so the tier's pace is lost on both sides at once. As
a child process (``python -m agentloop.sim.child``) it paces on a loop and a core of its own,
as a real model server does; the client's reads are all the suite's process carries.

Protocol, one JSON object per line: the parent writes the first line, ``{"profile": {...},
"write_budget": N}``; the child answers ``{"port": P}`` once it listens on 127.0.0.1. Then
``{"op": "open", "id": I, "profile": {...}, "script": [...] | null, "filler_tokens": N |
null}`` opens a route and is answered ``{"id": I, "key": K}``; ``{"op": "close", "key": K}``
closes one (no answer: requests to it get 404 ``unknown_route`` from then on); ``{"op":
"stats", "id": I}`` is answered ``{"id": I, "stats": {"connections": C, "routes": N}}`` (TCP connections
accepted so far, routes open now). End of input
(the parent closed the pipe, exited or was killed) stops the child, so it never outlives its
suite. Its environment is a helper's (:func:`agentloop.helper_procs.helper_env`: ``PATH``,
``LANG``, ``PYTHONPATH`` only): no key reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from typing import IO, Any

import orjson

from agentloop.errors import SimulatorError
from agentloop.helper_procs import helper_env
from agentloop.model.speed import SpeedProfile
from agentloop.protocols import Route
from agentloop.script import ScriptTurn
from agentloop.sim.server import SimServer

START_TIMEOUT_S = 30.0  # importing agentloop and listening: ~0.5 s on an idle machine
STOP_TIMEOUT_S = 5.0


def _profile(raw: dict[str, Any]) -> SpeedProfile:
    return SpeedProfile(**raw)


async def _serve(stdin: asyncio.StreamReader, out: IO[bytes]) -> None:
    first = orjson.loads(await stdin.readline())
    async with SimServer(
        profile=_profile(first["profile"]), write_budget=float(first["write_budget"])
    ) as sim:

        def say(obj: dict[str, Any]) -> None:
            out.write(orjson.dumps(obj) + b"\n")
            out.flush()

        say({"port": sim.port})
        while line := await stdin.readline():
            msg = orjson.loads(line)
            if msg["op"] == "open":
                script = msg.get("script")
                route = sim.open_route(
                    _profile(msg["profile"]),
                    None if script is None else [ScriptTurn.from_dict(t) for t in script],
                    msg.get("filler_tokens"),
                )
                say({"id": msg["id"], "key": route.key})
            elif msg["op"] == "close":
                sim.close_route(msg["key"])
            elif msg["op"] == "stats":
                stats = {"connections": sim.connections, "routes": sim.routes}
                say({"id": msg["id"], "stats": stats})


async def _main() -> None:
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=1 << 24)  # a route's script can be long
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    await _serve(stdin, sys.stdout.buffer)


class SimProcess:
    """The parent's side: ``async with SimProcess(profile, write_budget) as sim`` starts the
    child; ``sim.route(profile, script)`` is :meth:`SimServer.route` across the pipe."""

    def __init__(self, profile: SpeedProfile, write_budget: float) -> None:
        self.profile = profile
        self.write_budget = write_budget
        self.host = "127.0.0.1"
        self.port = 0
        self.pid = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._err: IO[bytes] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._seq = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _said(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        tail = self._err.read()[-2000:].decode(errors="replace").strip()
        return f": {tail}" if tail else ""

    async def start(self) -> None:
        # the child's stderr, kept for its life (read back when it fails)
        self._err = await asyncio.to_thread(tempfile.TemporaryFile)
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentloop.sim.child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._err,
            env=helper_env(),  # the child runs this agentloop, installed or not
            cwd="/",
            limit=1 << 20,
        )
        self.pid = self._proc.pid
        first = {"profile": dataclasses.asdict(self.profile), "write_budget": self.write_budget}
        self._send(first)
        assert self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if not line:
            said = self._said()
            await self.close()
            raise SimulatorError(f"the suite's simulator process did not start{said}")
        self.port = int(orjson.loads(line)["port"])
        self._reader = asyncio.create_task(self._read())

    def _send(self, obj: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(orjson.dumps(obj) + b"\n")

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            while line := await self._proc.stdout.readline():
                try:
                    msg = orjson.loads(line)
                    fut = self._waiting.pop(msg["id"], None)
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue  # not an answer (something in the child printed): not ours
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        finally:  # the child is gone: whoever still waits for an answer is told so
            gone = SimulatorError(f"the suite's simulator process ended{self._said()}")
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(gone)
            self._waiting.clear()

    async def _ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._reader is None or self._reader.done():
            raise SimulatorError(f"the suite's simulator process is not running{self._said()}")
        self._seq += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._seq] = fut
        self._send({**msg, "id": self._seq})
        return await fut

    @contextlib.asynccontextmanager
    async def route(
        self,
        profile: SpeedProfile,
        script: Sequence[ScriptTurn] | None = None,
        filler_tokens: int | None = None,
    ) -> AsyncIterator[Route]:
        """A base URL of the run's own on the child, closed when the context ends."""
        answer = await self._ask(
            {
                "op": "open",
                "profile": dataclasses.asdict(profile),
                "script": None if script is None else [t.to_dict() for t in script],
                "filler_tokens": filler_tokens,
            }
        )
        key = answer["key"]
        try:
            yield Route(f"http://{self.host}:{self.port}/r/{key}/v1", key)
        finally:
            if self._proc is not None and self._proc.returncode is None:
                with contextlib.suppress(ConnectionError):
                    self._send({"op": "close", "key": key})

    async def stats(self) -> dict[str, int]:
        """The child's counts: ``connections`` accepted so far, ``routes`` open now."""
        answer = await self._ask({"op": "stats"})
        return dict(answer["stats"])

    async def close(self) -> None:
        """End the child (end of input, then SIGKILL after ``STOP_TIMEOUT_S``) and reap it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._err is not None:
            self._err.close()
            self._err = None

    async def __aenter__(self) -> SimProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        asyncio.run(_main())
