"""SimServer: the simulator's HTTP serving on loopback, and its routes (many runs, one server).

One asyncio task per connection (``asyncio.start_server``), HTTP/1.1 keep-alive, chunked SSE
streams. ``POST /v1/responses`` and ``POST /v1/chat/completions`` are answered by the server's
:class:`~agentloop.sim.answer.Answers` (the scripted turn that fits the conversation, or
``filler_tokens`` of filler text, streamed or not, paced by the profile named by the request's
``model`` in ``profiles``, else ``profile``; faults on the request numbers they name: see
``answer``, ``pacer`` and ``faults``); ``GET /v1/models`` lists the model names. Pacing, per
request: headers at once (with ``headers_after_prefill`` only once base latency and prefill have
passed, a silent start, as llama-server did until ggml-org/llama.cpp#23884); the first visible
token at ``base_latency + input_tokens / prefill_tps + reasoning_tokens / output_tps`` after the
request arrived; visible token ``i`` at ``first + i / output_tps`` (see ``_stream``). A
non-streamed answer is sent whole when its last token is due. Requests to the model endpoints are
numbered from 1 (``requests``).

Many runs, one server: :meth:`SimServer.route` gives a run a base URL of its own
(``/r/<key>/v1``) answered by an :class:`~agentloop.sim.answer.Answers` of its own (that run's
script at that run's tier profile), written by the server's one
:class:`~agentloop.sim.pacer.Pacer`, so a suite of a thousand runs shares one listening socket
and one write budget (``agentloop.suite.shared`` gives each of a suite's runs a route instead of
a simulator of its own). A suite's simulator runs in a process of its own
(:mod:`agentloop.sim.child`), so its pacing and the runs' reads do not share one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Any

import orjson

from agentloop import loopback
from agentloop.errors import ConfigError, SimulatorError
from agentloop.model.speed import SpeedProfile
from agentloop.model.tokens import TokenCache
from agentloop.protocols import Route
from agentloop.script import ScriptTurn
from agentloop.sim import _http
from agentloop.sim.answer import DEFAULT_MODEL, Answers
from agentloop.sim.faults import Fault
from agentloop.sim.pacer import Pacer

# Chunk pacing floor: a stream is written at most once per MIN_CHUNK_INTERVAL_S (asyncio's timer
# granularity anyway), and all streams together at most about WRITE_BUDGET times per second (what
# one Python process writes on loopback with room to spare): past that, chunks carry more tokens
# instead of arriving late, so the rate holds under many concurrent fast streams.
MIN_CHUNK_INTERVAL_S = 0.001
WRITE_BUDGET = 20_000.0
# A suite's shared simulator serves runs whose clients parse every chunk in the same process
# (or on the same cores): its budget counts both sides, so it is far lower; a stream's first
# and last visible token still leave when due (see _stream), only the chunks between get fatter
SUITE_WRITE_BUDGET = 500.0
# pending connections the kernel queues: asyncio's 100 drops (and resets) some when a suite's
# thousand runs connect at once, and their clients retry on a ReadError
BACKLOG = 4096
_URLS = "The simulator serves POST /v1/responses, POST /v1/chat/completions and GET /v1/models."


class SimServer:
    """The simulator; ``async with SimServer(...) as sim`` serves at ``sim.base_url``.

    The arguments are split at once: what is answered (``profile``, ``script``,
    ``filler_tokens``, ``profiles``, ``faults``, ``jitter``, ``seed``, ``dialect``,
    ``require_reasoning``) makes the server's own :class:`Answers`; how it is written
    (``tokens_per_chunk``, ``min_chunk_interval_s``, ``write_budget``,
    ``headers_after_prefill``) its one :class:`Pacer`, which its routes share.
    """

    def __init__(
        self,
        profile: SpeedProfile,
        script: Sequence[ScriptTurn] | None = None,
        filler_tokens: int | None = None,
        profiles: dict[str, SpeedProfile] | None = None,
        faults: Iterable[Fault] = (),
        tokens_per_chunk: int = 1,
        jitter: float = 0.0,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Sequence[str] = (),
        min_chunk_interval_s: float = MIN_CHUNK_INTERVAL_S,
        dialect: str | Iterable[str] = (),
        require_reasoning: bool = False,
        write_budget: float = WRITE_BUDGET,
        headers_after_prefill: bool = False,
    ) -> None:
        self.answers = Answers(
            profile,
            script,
            filler_tokens,
            profiles=profiles,
            faults=faults,
            jitter=jitter,
            seed=seed,
            dialect=dialect,
            require_reasoning=require_reasoning,
        )
        self.pacer = Pacer(
            tokens_per_chunk, min_chunk_interval_s, write_budget, headers_after_prefill
        )
        self.host, self.port = host, port
        self.models = tuple(models)  # extra names for GET /v1/models (any name is served)
        self._server: asyncio.Server | None = None
        self._registry = contextlib.ExitStack()  # the port's entry in agentloop.loopback
        self._conns: set[asyncio.Task[None]] = set()
        self.connections = 0  # TCP connections accepted so far (kept alive, one serves many calls)
        self._tokens = TokenCache()  # one tokenizer cache for the server and its routes
        self._routes: dict[str, Answers] = {}  # route key -> what that run's base URL answers
        self._route_seq = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> int:
        """Model requests received so far (their 1-based numbers are what faults name)."""
        return self.answers.requests

    @property
    def active_streams(self) -> int:
        """Streams being written right now (the routes' included)."""
        return self.pacer.streaming

    @property
    def reasoning_received(self) -> int:
        """Reasoning items clients passed back (and the simulator recognised)."""
        return self.answers.reasoning_received

    @property
    def reasoning_missing(self) -> int:
        """Requests that dropped an earlier turn's reasoning item."""
        return self.answers.reasoning_missing

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._connection, self.host, self.port, limit=1 << 20, backlog=BACKLOG
            )
        except OSError as exc:
            raise SimulatorError(
                f"simulator cannot listen on {self.host}:{self.port}: {exc.strerror}"
            ) from exc
        self.port = self._server.sockets[0].getsockname()[1]
        # the runs' browsers refuse this port (agentloop.loopback); best effort: a registry
        # folder that is not ours leaves the simulator serving, the service refuses to start
        with contextlib.suppress(ConfigError):
            self._registry.enter_context(loopback.registered(self.port))

    async def close(self) -> None:
        """Stop listening, end every connection, wait for their tasks."""
        if self._server is None:
            return
        self._registry.close()
        self._server.close()
        tasks = list(self._conns)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def serve_forever(self) -> None:
        """Serve until cancelled (the CLI)."""
        assert self._server is not None
        await self._server.serve_forever()

    # ---- routes ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def route(
        self,
        profile: SpeedProfile,
        script: Sequence[ScriptTurn] | None = None,
        filler_tokens: int | None = None,
    ) -> AsyncIterator[Route]:
        """A base URL of its own (``route.base_url``) serving ``script`` paced by ``profile``
        while the context lasts; afterwards requests to it get a 404 ``unknown_route``."""
        route = self.open_route(profile, script, filler_tokens)
        try:
            yield route
        finally:
            self.close_route(route.key)

    def open_route(
        self,
        profile: SpeedProfile,
        script: Sequence[ScriptTurn] | None = None,
        filler_tokens: int | None = None,
    ) -> Route:
        """:meth:`route` without the context: open until :meth:`close_route` (the sim child).
        The route answers with its own script, profile and request count (no faults, jitter or
        dialect), seeded as the server is; the server's pacer and tokenizer write it."""
        self._route_seq += 1
        key = f"{self._route_seq:x}"
        self._routes[key] = Answers(profile, script, filler_tokens, seed=self.answers.seed)
        return Route(f"http://{self.host}:{self.port}/r/{key}/v1", key)

    def close_route(self, key: str) -> None:
        self._routes.pop(key, None)

    @property
    def routes(self) -> int:
        """Routes open now."""
        return len(self._routes)

    # ---- connections -------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        self.connections += 1
        try:
            await self._requests_on(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() cancels us; ending normally keeps Python 3.11's start_server callback from
            # logging the cancellation as an error
            pass
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _requests_on(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve one connection's requests, one after another, while it is kept alive."""
        keep = True
        while keep:
            try:
                req = await _http.read_request(reader, writer)
            except _http.BadRequest as exc:
                _reply(writer, 400, str(exc), "bad_http", False)
                break
            if req is None:
                break
            try:
                keep = (
                    await self._dispatch(req, writer, self.answers, self.models) and req.keep_alive
                )
            except (ConnectionError, asyncio.CancelledError):
                raise
            except Exception as exc:  # a simulator bug: say so to the client, drop the line
                if not writer.transport.is_closing():
                    what = f"{req.method} {req.path}: {type(exc).__name__}: {exc}"
                    _reply(
                        writer,
                        500,
                        f"agentloop sim failed on {what}",
                        "sim_bug",
                        False,
                        "server_error",
                    )
                break
            await writer.drain()

    async def _dispatch(
        self,
        req: _http.Request,
        writer: asyncio.StreamWriter,
        answers: Answers,
        models: Sequence[str],
        routes: bool = True,
    ) -> bool:
        """Answer one request with ``answers`` (``/r/<key>/...``: with that route's, once)."""
        path = req.path.rstrip("/")
        if path.startswith("/r/"):
            key, _, rest = path[3:].partition("/")
            inner = self._routes.get(key) if routes else None
            if inner is None:
                why = f"Unknown simulator route '{key}' in {req.path} (its run has ended)"
                return _reply(writer, 404, why, "unknown_route", req.keep_alive)
            routed = dataclasses.replace(req, path="/" + rest)
            return await self._dispatch(routed, writer, inner, (), routes=False)
        if path.startswith("/v1"):
            path = path[3:]
        if req.method == "POST" and path == "/responses":
            return await answers.answer(req, writer, "responses", self.pacer, self._tokens)
        if req.method == "POST" and path == "/chat/completions":
            return await answers.answer(req, writer, "chat", self.pacer, self._tokens)
        if req.method == "GET" and path == "/models":
            names = dict.fromkeys([DEFAULT_MODEL, *models, *answers.profiles])
            body = orjson.dumps({"object": "list", "data": [_model(n) for n in names]})
            writer.write(_http.json_response(200, body, req.keep_alive))
            return True
        if req.method == "GET" and path.startswith("/models/"):
            body = orjson.dumps(_model(path[len("/models/") :]))  # any model name is served
            writer.write(_http.json_response(200, body, req.keep_alive))
            return True
        if path in ("/responses", "/chat/completions", "/models"):
            return _reply(
                writer,
                405,
                f"Method {req.method} not allowed on {req.path}",
                "unknown_url",
                req.keep_alive,
            )
        why = f"Unknown request URL: {req.method} {req.path}. {_URLS}"
        return _reply(writer, 404, why, "unknown_url", req.keep_alive)


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "agentloop-sim"}


def _reply(
    writer: asyncio.StreamWriter,
    status: int,
    message: str,
    code: str,
    keep_alive: bool,
    type_: str = "invalid_request_error",
) -> bool:
    """An error reply in OpenAI's shape; True (the connection may serve another request)."""
    writer.write(_http.json_response(status, _http.error_body(message, type_, code), keep_alive))
    return True
