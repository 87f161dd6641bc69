"""The service's HTTP face: a Starlette app over a RunBook (runs, events as SSE, trace, analysis).

Routes (all JSON but the trace and the event stream):

    POST   /v1/runs                 submit {task, tier?, limits?} -> 202 {id, status}
    GET    /v1/runs                 every run's summary
    GET    /v1/runs/{id}            one run's summary: status, steps, times, success
    GET    /v1/runs/{id}/events     server-sent events of the run from its start to run_end
    GET    /v1/runs/{id}/trace      the trace file (JSONL) as written so far
    GET    /v1/runs/{id}/report     `agentloop report --json` of the trace
    GET    /v1/runs/{id}/whatif     `agentloop whatif --tier NAME --json` (?tier=NAME)
    DELETE /v1/runs/{id}            cancel; the trace closes with status cancelled
    GET    /openapi.json            this API as an OpenAPI 3 document

With a token set, every request must carry ``Authorization: Bearer <token>`` (compared in
constant time; never logged). Before that, :mod:`agentloop.service.guard` refuses what a web page
or a rebinding host sends. Errors are ``{"error": {"message", "field"?}}``.

Every answer passes the one redactor (:mod:`agentloop.redact`), the one the trace pipeline
uses: JSON answers and errors, each server-sent event, and the trace file line by line. A run's
events come from the runner before its trace pipeline, so without this a secret a tool printed
would reach the event stream verbatim. A body is read in chunks and refused (413) once past
:data:`MAX_BODY`, never held whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.schemas import SchemaGenerator
from starlette.types import ASGIApp, Receive, Scope, Send

from agentloop.errors import AgentloopError, RequestError
from agentloop.redact import Redactor, redactor
from agentloop.service.analysis import report_for, whatif_for
from agentloop.service.guard import BrowserGuard, HostNames
from agentloop.service.requests import shown, task_from_request
from agentloop.service.runs import Run, RunBook

MAX_BODY = 1 << 20  # bytes of a request body (an inline task with a long script is ~50 KiB)

OPENAPI_INFO = {
    "openapi": "3.0.3",
    "info": {
        "title": "agentloop service",
        "version": "1",
        "description": "Run, stream and explain agent runs over HTTP.",
    },
}


def answer(
    content: Any, redact: Redactor, status: int = 200, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A JSON answer, every string in it through the redactor."""
    return JSONResponse(redact(content), status_code=status, headers=headers)


def error(status: int, message: str, redact: Redactor, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"message": message}
    if field is not None:
        body["field"] = field
    return answer({"error": body}, redact, status)


class BearerAuth:
    """ASGI middleware: 401 unless the request carries the service's bearer token."""

    def __init__(self, app: ASGIApp, token: str, redact: Redactor) -> None:
        self.app, self.redact = app, redact
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
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


class Service:
    """The request handlers, bound to one RunBook and the server's settings."""

    def __init__(
        self,
        book: RunBook,
        *,
        tasks_dir: Path,
        known_tools: set[str],
        tiers_file: Path | None,
        check_tier: Any,
        redact: Redactor | None = None,
    ) -> None:
        self.book, self.tasks_dir, self.known_tools = book, tasks_dir, known_tools
        self.tiers_file, self.check_tier = tiers_file, check_tier
        self.redact = redact or redactor()  # the server's secret-named environment values

    def _run(self, request: Request) -> Run:
        run = self.book.runs.get(request.path_params["id"])
        if run is None:
            raise LookupError(request.path_params["id"])
        return run

    async def submit(self, request: Request) -> Response:
        """
        summary: Submit a run
        description: "Body: {task: PATH | NAME | {inline task}, tier?: NAME, limits?: {...}}.
          Answers at once; the run waits for a slot when the server is at its concurrency."
        responses:
          202: {description: "accepted: {id, status}"}
          400: {description: "invalid request; error.field names the part at fault"}
          413: {description: "the body is larger than 1 MiB"}
          415: {description: "the body is not sent as application/json"}
          429: {description: "the queue is full"}
        """
        raw = await read_body(request)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:  # says where, never what: the body is not echoed
            return error(400, f"the body is not JSON: {exc}", self.redact, field="")
        task, tier = task_from_request(body, tasks_dir=self.tasks_dir, known_tools=self.known_tools)
        self.check_tier(task, tier)
        run = self.book.submit(task, tier)
        return answer(
            {"id": run.id, "status": run.status},
            self.redact,
            202,
            headers={"Location": f"/v1/runs/{run.id}"},
        )

    async def list_runs(self, request: Request) -> Response:
        """
        summary: List runs
        responses: {200: {description: "{runs: [summary, ...]}"}}
        """
        return answer({"runs": [r.summary() for r in self.book.runs.values()]}, self.redact)

    async def get_run(self, request: Request) -> Response:
        """
        summary: One run's summary
        responses: {200: {description: "status, steps, times, success"}, 404: {description: "no such run"}}
        """
        return answer(self._run(request).summary(), self.redact)

    async def events(self, request: Request) -> Response:
        """
        summary: The run's events as server-sent events
        description: "event: NAME, data: JSON; from the run's start (a late subscriber gets
          the events so far first), ending with run_end."
        responses: {200: {description: "text/event-stream"}}
        """
        run = self._run(request)

        async def stream() -> AsyncIterator[bytes]:
            async for name, data in self.book.events(run):
                # plain JSON first: the redactor walks dicts, lists and strings, and an
                # event's data holds dataclasses too (a model_end's tool calls)
                data = self.redact(orjson.loads(orjson.dumps(data)))
                yield b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    def _trace(self, run: Run) -> Path:
        if run.trace_path is None or not run.trace_path.is_file():
            raise RequestError(
                f"run {run.id} has no trace yet (status {run.status})", field="id", status=409
            )
        return run.trace_path

    async def trace(self, request: Request) -> Response:
        """
        summary: The run's trace (JSONL)
        responses: {200: {description: "application/x-ndjson"}, 409: {description: "no trace yet"}}
        """
        path = self._trace(self._run(request))
        # written through the same redactor; passed again so that no answer skips it
        text = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
        lines = await asyncio.to_thread(lambda: [self.redact.text(x) for x in text.splitlines()])
        body = "".join(x + "\n" for x in lines).encode()
        return Response(body, media_type="application/x-ndjson")

    async def report(self, request: Request) -> Response:
        """
        summary: Where the run's time went (agentloop report --json)
        responses: {200: {description: "the report"}, 409: {description: "no trace yet"}}
        """
        path = self._trace(self._run(request))
        return answer(await asyncio.to_thread(report_for, path), self.redact)

    async def whatif(self, request: Request) -> Response:
        """
        summary: The run predicted on another tier (agentloop whatif --json)
        parameters: [{name: tier, in: query, required: true, schema: {type: string}}]
        responses: {200: {description: "the prediction"}, 400: {description: "no or unknown tier"}}
        """
        run = self._run(request)
        tier = request.query_params.get("tier")
        if not tier:
            raise RequestError("query parameter 'tier' is required (?tier=NAME)", field="tier")
        path = self._trace(run)
        return answer(await asyncio.to_thread(whatif_for, path, tier, self.tiers_file), self.redact)

    async def cancel(self, request: Request) -> Response:
        """
        summary: Cancel a run
        description: A queued run never starts; a running one ends with status cancelled.
        responses: {200: {description: "the run's summary after the cancel"}}
        """
        run = self._run(request)
        self.book.cancel(run)
        with contextlib.suppress(TimeoutError):  # still ending: the summary says so
            await asyncio.wait_for(run.ended.wait(), timeout=15.0)
        return answer(run.summary(), self.redact)


def build_app(service: Service, token: str | None, *, hosts: HostNames, port: int) -> ASGIApp:
    """The ASGI app: the browser guard (``hosts``: the names a request may give in Host,
    ``port``: the server's, for its own Origin), bearer auth when ``token``, routes, error
    mapping, the OpenAPI document."""
    s = service
    redact = s.redact
    routes: list[BaseRoute] = [
        Route("/v1/runs", s.submit, methods=["POST"]),
        Route("/v1/runs", s.list_runs, methods=["GET"]),
        Route("/v1/runs/{id}", s.get_run, methods=["GET"]),
        Route("/v1/runs/{id}", s.cancel, methods=["DELETE"]),
        Route("/v1/runs/{id}/events", s.events, methods=["GET"]),
        Route("/v1/runs/{id}/trace", s.trace, methods=["GET"]),
        Route("/v1/runs/{id}/report", s.report, methods=["GET"]),
        Route("/v1/runs/{id}/whatif", s.whatif, methods=["GET"]),
    ]
    schemas = SchemaGenerator(OPENAPI_INFO)

    async def openapi(request: Request) -> Response:
        return answer(schemas.get_schema(routes), redact)

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AgentloopError)
        if isinstance(exc, RequestError):
            return error(exc.status, exc.message, redact, exc.field)
        return error(400, exc.message, redact)

    async def not_found(request: Request, exc: Exception) -> Response:
        what = f"no run with id {shown(str(exc.args[0]))}" if exc.args else "not found"
        return error(404, what, redact, "id")

    app = Starlette(
        routes=[*routes, Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False)],
        exception_handlers={AgentloopError: bad_request, LookupError: not_found},
    )
    inner: ASGIApp = BearerAuth(app, token, redact) if token else app

    def refuse(status: int, message: str) -> ASGIApp:
        return error(status, message, redact)

    return BrowserGuard(inner, hosts=hosts, port=port, refuse=refuse)
