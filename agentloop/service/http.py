"""The service's HTTP pieces under its handlers: answers, auth, bounded input, SSE, refusals counted.

JSON answers and errors pass the one redactor; :class:`BearerAuth` compares the token in
constant time; a body is read in chunks and refused (413) once past :data:`MAX_BODY`; a numeric
parameter is bounded or a 400 names it; a run's events go out as server-sent events with
heartbeats and ``Last-Event-ID`` resume; :class:`CountRefusals` counts every 4xx/5xx answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agentloop.errors import RequestError
from agentloop.redact import Redactor
from agentloop.service.metrics import Metrics
from agentloop.service.run import Run

MAX_BODY = 1 << 20  # bytes of a request body (an inline task with a long script is ~50 KiB)


def answer(
    content: Any, redact: Redactor, status: int = 200, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A JSON answer, every string in it through the redactor."""
    return JSONResponse(redact(content), status_code=status, headers=headers)


def error(
    status: int,
    message: str,
    redact: Redactor,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"message": message}
    if field is not None:
        body["field"] = field
    return answer({"error": body}, redact, status, headers)


class BearerAuth:
    """ASGI middleware: 401 unless the request carries the service's bearer token (``/healthz``
    answers without one: a liveness probe holds no secret)."""

    def __init__(self, app: ASGIApp, token: str, redact: Redactor) -> None:
        self.app, self.redact = app, redact
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/healthz":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await error(
                    401, "missing or wrong bearer token (Authorization: Bearer ...)", self.redact
                )(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request's body, read chunk by chunk; 413 as soon as it is past ``limit`` bytes."""
    too_big = RequestError(f"the body is larger than {limit} bytes", field="", status=413)
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise too_big
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_big
    return bytes(body)


def int_param(
    value: str | None,
    name: str,
    default: int | None,
    least: int,
    most: int | None,
    *,
    header: bool = False,
) -> Any:
    """An integer query parameter (or header) within bounds, or a 400 naming it."""
    if value is None:
        return default
    what = f"header '{name}'" if header else f"query parameter '{name}'"
    bound = f"from {least} to {most}" if most is not None else f"of at least {least}"
    if not (value.isdigit() and len(value) <= 18) or int(value) < least:
        raise RequestError(f"{what}: a whole number {bound}", field=name)
    return min(int(value), most) if most is not None else int(value)


async def event_stream(
    run: Run, redact: Redactor, heartbeat: float, last: int | None
) -> AsyncIterator[bytes]:
    """``run``'s events as server-sent events, each through the redactor: ``id:`` its number,
    those up to ``last`` (a reconnect's ``Last-Event-ID``) skipped but ``run_end``, a comment
    line after every ``heartbeat`` seconds of silence; the run's follower count given back at
    the end."""

    queue: asyncio.Queue[tuple[int, str, dict[str, Any]] | None] = asyncio.Queue(256)

    async def pump() -> None:
        async for item in run.events():
            await queue.put(item)
        await queue.put(None)

    pumping = asyncio.create_task(pump())
    try:
        yield b"retry: 2000\n\n"
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), heartbeat)
            except TimeoutError:
                yield b": still " + (run.status.encode()) + b"\n\n"
                continue
            if item is None:
                return
            seq, name, data = item
            if last is not None and seq <= last and name != "run_end":
                continue  # seen before the reconnect (every stream ends with run_end)
            # plain JSON first: the redactor walks dicts, lists and strings
            data = redact(orjson.loads(orjson.dumps(data)))
            yield (b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, name.encode(), orjson.dumps(data)))
    finally:
        run.followers -= 1
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping


class CountRefusals:
    """ASGI middleware: every answer of 400 or more counted by status in the metrics."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.metrics.refused.labels(str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting)
