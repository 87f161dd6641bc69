"""SimServer: the paced OpenAI-compatible HTTP server on loopback, and its fault injection.

One asyncio task per connection (``asyncio.start_server``), HTTP/1.1 keep-alive, chunked SSE
streams. ``POST /v1/responses`` and ``POST /v1/chat/completions`` answer with the scripted turn
that fits the conversation (or ``filler_tokens`` of filler text), streamed or not; ``GET
/v1/models`` lists the model names. Pacing, per request, from the profile named by the request's
``model`` in ``profiles`` (else ``profile``): headers at once (with ``headers_after_prefill``
only once base latency and prefill have passed, a silent start, as llama-server did until
ggml-org/llama.cpp#23884); the first visible token at ``base_latency + input_tokens /
prefill_tps + reasoning_tokens / output_tps`` after the request arrived; visible token ``i`` at
``first + i / output_tps`` (see ``_stream``). A non-streamed answer is sent whole when its last
token is due. Requests to the model endpoints are numbered from 1 (``requests``); a
:class:`Fault` fires on the request numbers it names.

Many runs, one server: :meth:`SimServer.route` gives a run a base URL of its own
(``/r/<key>/v1``) serving that run's script at that run's tier profile, so a suite of a
thousand runs shares one listening socket and one write budget; :data:`SHARED` (set by
``agentloop.suite`` for its runs) makes ``agentloop.api.model_client`` take a route on it
instead of starting a simulator per run. A suite's simulator runs in a process of its own
(:mod:`agentloop.sim.child`), so its pacing and the runs' reads do not share one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import orjson

from agentloop import loopback
from agentloop.config.tiers import SpeedProfile
from agentloop.errors import ConfigError, SimulatorError
from agentloop.model.tokens import TokenCache, chat_item_tokens, responses_item_tokens
from agentloop.script import ScriptTurn
from agentloop.sim import _chat, _http, _responses
from agentloop.sim._stream import Schedule, StreamCut, StreamFault, emit, make_schedule
from agentloop.sim.cache import PrefixCache, request_items
from agentloop.sim.conversation import (
    Call,
    ScriptMismatch,
    TurnPlan,
    chat_priors,
    filler_turn,
    pick_turn,
    plan_turn,
    responses_priors,
    truncate,
)

FAULT_KINDS = ("429", "500", "503", "reset", "cut", "stall", "malformed", "endless", "badgzip")
_STATUS_FAULTS = {
    "429": (429, "rate_limit_exceeded", "Rate limit reached (simulated)."),
    "500": (500, "server_error", "The server had an error (simulated)."),
    "503": (503, "server_error", "The engine is overloaded (simulated)."),
}
DEFAULT_MODEL = "sim"
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
DEFAULT_FILLER = 16  # tokens per answer when neither a script nor filler_tokens is given


@dataclass(frozen=True, slots=True)
class Route:
    """One run's share of a simulator (:meth:`SimServer.route`)."""

    base_url: str
    key: str


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault on the ``on_request``-th model request (1-based), or on ``every`` request.

    ``429`` (with Retry-After), ``500``, ``503``: an error reply at once. ``reset``: the TCP
    connection is reset before any header. In a stream, after ``after_tokens`` visible tokens:
    ``cut`` closes the connection with no terminal event, ``stall`` sends nothing for
    ``stall_s`` seconds then goes on (the rest keeps its pace), ``malformed`` sends an SSE event
    whose data is not JSON, ``endless`` never ends the stream (filler deltas at pace until the
    client hangs up). ``badgzip``: the body says ``Content-Encoding: gzip`` but is not gzip.
    ``retry_after_date``: a 429's Retry-After is an HTTP date (RFC 9110), without retry-after-ms.
    """

    kind: str
    on_request: int | None = None
    every: bool = False
    retry_after_s: float = 1.0
    after_tokens: int = 0
    stall_s: float = 5.0
    retry_after_date: bool = False

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ConfigError(f"unknown fault kind {self.kind!r} (known: {', '.join(FAULT_KINDS)})")
        if self.on_request is None and not self.every:
            raise ConfigError(f"fault {self.kind!r} needs on_request=N or every=True")

    def fires_on(self, number: int) -> bool:
        return self.every or self.on_request == number


class SimServer:
    """The simulator; ``async with SimServer(...) as sim`` serves at ``sim.base_url``."""

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
        if profile.output_tps <= 0:
            raise ConfigError("simulator profile: output_tps must be > 0")
        self.profile = profile
        self.profiles = dict(profiles or {})
        self.script = None if script is None else list(script)
        self._plans = None if script is None else [plan_turn(i, t) for i, t in enumerate(script)]
        self._filler = (
            None
            if script is not None
            else plan_turn(
                0, filler_turn(DEFAULT_FILLER if filler_tokens is None else filler_tokens, seed)
            )
        )
        self.faults = tuple(faults)
        self.tokens_per_chunk = max(1, int(tokens_per_chunk))
        self.jitter = float(jitter)
        self.min_chunk_interval_s = float(min_chunk_interval_s)
        self.write_budget = float(write_budget)
        # a stream sends nothing, headers included, until base latency and prefill have passed
        self.headers_after_prefill = headers_after_prefill
        self.seed = seed
        self.host, self.port = host, port
        self.models = tuple(models)  # extra names for GET /v1/models (any name is served)
        self._server: asyncio.Server | None = None
        self._registry = contextlib.ExitStack()  # the port's entry in agentloop.loopback
        self._conns: set[asyncio.Task[None]] = set()
        self._requests = 0
        self.connections = 0  # TCP connections accepted so far (kept alive, one serves many calls)
        self._streaming = 0  # streams being written now
        self._tokens = TokenCache()
        self._prefixes = PrefixCache()  # cached_tokens of repeated conversation prefixes
        self.dialect = _chat.parse_dialect(dialect)  # Chat quirks of real servers (see _chat)
        self.require_reasoning = require_reasoning  # strict: 400 when reasoning is not passed back
        self.reasoning_received = 0  # reasoning items clients passed back (and we recognised)
        self.reasoning_missing = 0  # requests that dropped an earlier turn's reasoning item
        self._routes: dict[str, _Routed] = {}  # route key -> that run's view (route())
        self._route_seq = 0

    def _chunk_interval(self) -> float:
        return max(self.min_chunk_interval_s, self._streaming / self.write_budget)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> int:
        """Model requests received so far (their 1-based numbers are what faults name)."""
        return self._requests

    @property
    def active_streams(self) -> int:
        """Streams being written right now."""
        return self._streaming

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
        """:meth:`route` without the context: open until :meth:`close_route` (the sim child)."""
        self._route_seq += 1
        key = f"{self._route_seq:x}"
        self._routes[key] = _Routed(self, profile, script, filler_tokens)
        return Route(f"http://{self.host}:{self.port}/r/{key}/v1", key)

    def close_route(self, key: str) -> None:
        self._routes.pop(key, None)

    @property
    def routes(self) -> int:
        """Routes open now."""
        return len(self._routes)

    async def _routed(self, req: _http.Request, writer: asyncio.StreamWriter, path: str) -> bool:
        """``/r/<key>/...``: the route's own view of the simulator answers the rest."""
        key, _, rest = path[3:].partition("/")
        view = self._routes.get(key)
        if view is None:
            writer.write(
                _http.json_response(
                    404,
                    _http.error_body(
                        f"Unknown simulator route '{key}' in {req.path} (its run has ended)",
                        "invalid_request_error",
                        "unknown_route",
                    ),
                    req.keep_alive,
                )
            )
            return True
        return await view._dispatch(dataclasses.replace(req, path="/" + rest), writer)

    # ---- connections -------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        self.connections += 1
        try:
            keep = True
            while keep:
                try:
                    req = await _http.read_request(reader, writer)
                except _http.BadRequest as exc:
                    writer.write(
                        _http.json_response(
                            400,
                            _http.error_body(str(exc), "invalid_request_error", "bad_http"),
                            False,
                        )
                    )
                    break
                if req is None:
                    break
                try:
                    keep = await self._dispatch(req, writer) and req.keep_alive
                except (ConnectionError, asyncio.CancelledError):
                    raise
                except Exception as exc:  # a simulator bug: say so to the client, drop the line
                    if not writer.transport.is_closing():
                        writer.write(
                            _http.json_response(
                                500,
                                _http.error_body(
                                    f"agentloop sim failed on {req.method} {req.path}: "
                                    f"{type(exc).__name__}: {exc}",
                                    "server_error",
                                    "sim_bug",
                                ),
                                False,
                            )
                        )
                    break
                await writer.drain()
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

    async def _dispatch(self, req: _http.Request, writer: asyncio.StreamWriter) -> bool:
        path = req.path.rstrip("/")
        if path.startswith("/r/"):
            return await self._routed(req, writer, path)
        if path.startswith("/v1"):
            path = path[3:]
        if req.method == "POST" and path == "/responses":
            return await self._model_call(req, writer, "responses")
        if req.method == "POST" and path == "/chat/completions":
            return await self._model_call(req, writer, "chat")
        if req.method == "GET" and path == "/models":
            names = dict.fromkeys([DEFAULT_MODEL, *self.models, *self.profiles])
            body = orjson.dumps(
                {
                    "object": "list",
                    "data": [
                        {"id": n, "object": "model", "created": 0, "owned_by": "agentloop-sim"}
                        for n in names
                    ],
                }
            )
            writer.write(_http.json_response(200, body, req.keep_alive))
            return True
        if req.method == "GET" and path.startswith("/models/"):
            body = orjson.dumps(
                {
                    "id": path[len("/models/") :],
                    "object": "model",
                    "created": 0,
                    "owned_by": "agentloop-sim",
                }
            )  # any model name is served
            writer.write(_http.json_response(200, body, req.keep_alive))
            return True
        known = path in ("/responses", "/chat/completions", "/models")
        status = 405 if known else 404
        msg = (
            f"Method {req.method} not allowed on {req.path}"
            if known
            else f"Unknown request URL: {req.method} {req.path}. The simulator serves POST "
            f"/v1/responses, POST /v1/chat/completions and GET /v1/models."
        )
        writer.write(
            _http.json_response(
                status,
                _http.error_body(msg, "invalid_request_error", "unknown_url"),
                req.keep_alive,
            )
        )
        return True

    def _error(
        self,
        writer: asyncio.StreamWriter,
        req: _http.Request,
        status: int,
        message: str,
        code: str,
        type_: str = "invalid_request_error",
        extra: list[tuple[str, str]] | None = None,
    ) -> bool:
        writer.write(
            _http.json_response(
                status, _http.error_body(message, type_, code), req.keep_alive, extra or []
            )
        )
        return True

    # ---- model calls -------------------------------------------------------------------------

    def _check_reasoning(self, body: dict[str, Any]) -> tuple[int, str, str | None] | None:
        """Count the reasoning items a Responses request passed back; the refusal, if any."""
        items = body.get("input")
        if not isinstance(items, list):
            return None
        try:
            priors = responses_priors(items)
        except (AttributeError, TypeError):
            return None  # _turn_for answers a malformed body
        check = _responses.check_reasoning(
            priors, body.get("store", True), self._plans, self.require_reasoning
        )
        self.reasoning_received += check.received
        if check.missing:
            self.reasoning_missing += 1
        return check.error

    def _turn_for(self, api: str, body: dict[str, Any]) -> tuple[TurnPlan, int, list[int]]:
        """The turn answering ``body``, the request's input tokens and each item's tokens."""
        if api == "chat":
            messages = body.get("messages") or []
            priors = chat_priors(messages)
            per_item = chat_item_tokens(messages, self._tokens.count)
        else:
            items = body.get("input") or []
            priors = responses_priors(items)
            per_item = responses_item_tokens(body.get("instructions"), items, self._tokens.count)
        tokens = sum(per_item)
        if self._plans is None:
            assert self._filler is not None
            return self._filler, tokens, per_item
        return pick_turn(self._plans, priors), tokens, per_item

    async def _model_call(self, req: _http.Request, writer: asyncio.StreamWriter, api: str) -> bool:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self._requests += 1
        number = self._requests
        faults = [f for f in self.faults if f.fires_on(number)]
        rid = [("x-request-id", f"req_sim{number:06d}")]
        for f in faults:
            if f.kind == "reset":
                _http.reset(writer)
                return False
            if f.kind in _STATUS_FAULTS:
                status, code, msg = _STATUS_FAULTS[f.kind]
                extra = rid.copy()
                if f.kind == "429" and f.retry_after_date:
                    extra.append(
                        (
                            "retry-after",
                            email.utils.formatdate(time.time() + f.retry_after_s, usegmt=True),
                        )
                    )
                elif f.kind == "429":
                    extra += [
                        ("retry-after", f"{f.retry_after_s:g}"),
                        ("retry-after-ms", f"{f.retry_after_s * 1000:g}"),
                    ]
                kind = "requests" if status == 429 else "server_error"
                return self._error(writer, req, status, msg, code, kind, extra)
        try:
            body = orjson.loads(req.body)
            if not isinstance(body, dict):
                raise TypeError
        except (orjson.JSONDecodeError, TypeError):
            return self._error(
                writer,
                req,
                400,
                "The request body is not a JSON object.",
                "invalid_json",
                extra=rid,
            )
        if body.get("previous_response_id"):
            return self._error(
                writer,
                req,
                400,
                (
                    "agentloop sim is stateless: it cannot follow previous_response_id; send the "
                    "whole conversation in 'input'"
                ),
                "unsupported_parameter",
                extra=rid,
            )
        if api == "responses":
            error = self._check_reasoning(body)
            if error is not None:
                refusal, message, why = error
                return self._error(writer, req, refusal, message, why or "", extra=rid)
        try:
            plan, input_tokens, per_item = self._turn_for(api, body)
        except ScriptMismatch as exc:
            return self._error(
                writer, req, 400, f"agentloop sim: {exc}", "script_mismatch", extra=rid
            )
        except (AttributeError, TypeError) as exc:
            return self._error(
                writer,
                req,
                400,
                f"Malformed {api} request body: {exc}",
                "invalid_request",
                extra=rid,
            )
        limit = (
            body.get("max_output_tokens")
            if api == "responses"
            else body.get("max_completion_tokens") or body.get("max_tokens")
        )
        plan = truncate(plan, limit if isinstance(limit, int) else None)
        model = str(body.get("model") or DEFAULT_MODEL)
        profile = self.profiles.get(model, self.profile)
        tier = body.get("service_tier") or "default"
        cached = self._prefixes.lookup_and_store(model, request_items(api, body), per_item)
        call = Call(number, model, tier, plan, input_tokens, int(time.time()), cached)
        # THE speed model paces the stream: base + prefill (cached prefix at its own rate),
        # reasoning, then the visible tokens at the call's mean context-dependent interval
        parts = profile.parts(input_tokens, plan.turn.reasoning_tokens, plan.visible_tokens, cached)
        v = plan.visible_tokens
        inv = (
            parts.decode_s / (v - 1)
            if v > 1
            else profile.tpot_s(input_tokens + plan.turn.reasoning_tokens)
        )
        rng = random.Random(self.seed * 1_000_003 + number) if self.jitter > 0 else None
        sched = make_schedule(
            t0, parts.base_s, parts.reasoning_s, inv, plan.visible_tokens, self.jitter, rng
        )
        in_stream = [
            StreamFault(f.after_tokens, f.kind, f.stall_s)
            for f in faults
            if f.kind in ("cut", "stall", "malformed", "endless")
        ]
        mod = _chat if api == "chat" else _responses
        if any(f.kind == "badgzip" for f in faults):
            return self._bad_gzip(writer, req, bool(body.get("stream")), rid)
        if not body.get("stream"):
            return await self._whole(
                writer, req, mod.final_json(call, body), sched, plan.visible_tokens, in_stream, rid
            )
        if self.headers_after_prefill:
            delay = sched.t_reason - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if writer.transport.is_closing():
                return False
        writer.write(_http.sse_head(req.keep_alive, rid))
        write = writer.write
        chunk = _http.chunk

        def send(data: bytes) -> None:
            if data:  # an empty chunk would end the chunked body
                write(chunk(data))

        self._streaming += 1
        try:
            timings = (
                _chat.llama_timings(
                    input_tokens,
                    cached,
                    parts.base_s,
                    plan.turn.reasoning_tokens + v,
                    parts.reasoning_s + parts.decode_s,
                )
                if "timings" in self.dialect
                else None
            )
            plan_ = (
                _chat.stream_plan(call, body, self.dialect, timings)
                if api == "chat"
                else _responses.stream_plan(call, body)
            )
            await emit(
                send,
                plan_,
                sched,
                self.tokens_per_chunk,
                in_stream,
                writer.transport.is_closing,
                self._chunk_interval,
            )
        except StreamCut:
            return False
        finally:
            self._streaming -= 1
        if writer.transport.is_closing():
            return False
        writer.write(_http.LAST_CHUNK)
        return True

    def _bad_gzip(
        self,
        writer: asyncio.StreamWriter,
        req: _http.Request,
        stream: bool,
        extra: list[tuple[str, str]],
    ) -> bool:
        """A reply whose body claims gzip but is not: the client's decoder must fail cleanly."""
        junk = b"this is not gzip data \x00\x01\x02" * 4
        gz = [("Content-Encoding", "gzip")]
        if stream:
            writer.write(
                _http.sse_head(req.keep_alive, [*extra, *gz]) + _http.chunk(junk) + _http.LAST_CHUNK
            )
        else:
            writer.write(_http.json_response(200, junk, req.keep_alive, [*extra, *gz]))
        return False

    async def _whole(
        self,
        writer: asyncio.StreamWriter,
        req: _http.Request,
        body: bytes,
        sched: Schedule,
        visible: int,
        faults: list[StreamFault],
        extra: list[tuple[str, str]],
    ) -> bool:
        """A non-streamed answer: sent whole when its last token is due, faults applied."""
        for f in faults:
            if f.kind == "stall":
                sched.shift(f.stall_s)
        loop = asyncio.get_running_loop()
        delay = sched.due(visible - 1) - loop.time() if visible else sched.t_first - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        kinds = {f.kind for f in faults}
        if "malformed" in kinds:
            body = body[: len(body) // 2]
            writer.write(_http.json_response(200, body, req.keep_alive, extra))
            return True
        data = _http.json_response(200, body, req.keep_alive, extra)
        if "cut" in kinds:
            writer.write(data[: len(data) - len(body) // 2])
            return False
        writer.write(data)
        return True


class _Routed(SimServer):
    """A route's view of its simulator: its own script, profile and request count; the shared
    server's stream count (so the write budget spans every route), tokenizer and chunking."""

    def __init__(
        self,
        parent: SimServer,
        profile: SpeedProfile,
        script: Sequence[ScriptTurn] | None,
        filler_tokens: int | None,
    ) -> None:
        self._parent = parent
        streaming = parent._streaming
        super().__init__(
            profile,
            script=script,
            filler_tokens=filler_tokens,
            tokens_per_chunk=parent.tokens_per_chunk,
            min_chunk_interval_s=parent.min_chunk_interval_s,
            write_budget=parent.write_budget,
            headers_after_prefill=parent.headers_after_prefill,
            seed=parent.seed,
            host=parent.host,
            port=parent.port,
        )
        parent._streaming = streaming  # __init__ zeroed the shared counter through the setter
        self._tokens = parent._tokens

    @property
    def _streaming(self) -> int:
        return self._parent._streaming

    @_streaming.setter
    def _streaming(self, value: int) -> None:
        self._parent._streaming = value


class Routes(Protocol):
    """What hands a run a route: a :class:`SimServer`, or the suite's simulator process
    (:class:`agentloop.sim.child.SimProcess`)."""

    def route(
        self,
        profile: SpeedProfile,
        script: Sequence[ScriptTurn] | None = None,
        filler_tokens: int | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Route]: ...


# The simulator a suite shares among its runs (agentloop.suite sets it around them); unset,
# every simulated run starts its own (the single-run path).
@dataclass(frozen=True, slots=True)
class Shared:
    """A suite's one simulator, the SDK client its runs' clients are copies of, the maker of
    each run's own connection pool (:meth:`pool`), and the start gate a run waits at once it is
    set up (given the run's pool and base URL, so that it can connect before it waits)."""

    sim: Routes
    sdk: Any  # an openai.AsyncOpenAI, made by agentloop.suite: the simulator never imports openai
    # an async context manager of one run's httpx2.AsyncClient (made by agentloop.suite)
    pool: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
    gate: Callable[[Any, str], Awaitable[None]] | None = None


SHARED: ContextVar[Shared | None] = ContextVar("agentloop_shared_sim", default=None)
