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
constant time; never logged). Errors are ``{"error": {"message", "field"?}}``.
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
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.schemas import SchemaGenerator
from starlette.types import ASGIApp, Receive, Scope, Send

from agentloop.errors import AgentloopError, RequestError
from agentloop.service.analysis import report_for, whatif_for
from agentloop.service.requests import task_from_request
from agentloop.service.runs import Run, RunBook

OPENAPI_INFO = {
    "openapi": "3.0.3",
    "info": {
        "title": "agentloop service",
        "version": "1",
        "description": "Run, stream and explain agent runs over HTTP.",
    },
}


def error(status: int, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse({"error": body}, status_code=status)


class BearerAuth:
    """ASGI middleware: 401 unless the request carries the service's bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await error(401, "missing or wrong bearer token (Authorization: Bearer ...)")(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


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
    ) -> None:
        self.book, self.tasks_dir, self.known_tools = book, tasks_dir, known_tools
        self.tiers_file, self.check_tier = tiers_file, check_tier

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
        """
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return error(400, f"the body is not JSON: {exc}", field="")
        task, tier = task_from_request(body, tasks_dir=self.tasks_dir, known_tools=self.known_tools)
        self.check_tier(task, tier)
        run = self.book.submit(task, tier)
        return JSONResponse(
            {"id": run.id, "status": run.status},
            status_code=202,
            headers={"Location": f"/v1/runs/{run.id}"},
        )

    async def list_runs(self, request: Request) -> Response:
        """
        summary: List runs
        responses: {200: {description: "{runs: [summary, ...]}"}}
        """
        return JSONResponse({"runs": [r.summary() for r in self.book.runs.values()]})

    async def get_run(self, request: Request) -> Response:
        """
        summary: One run's summary
        responses: {200: {description: "status, steps, times, success"}, 404: {description: "no such run"}}
        """
        return JSONResponse(self._run(request).summary())

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
        return FileResponse(self._trace(self._run(request)), media_type="application/x-ndjson")

    async def report(self, request: Request) -> Response:
        """
        summary: Where the run's time went (agentloop report --json)
        responses: {200: {description: "the report"}, 409: {description: "no trace yet"}}
        """
        path = self._trace(self._run(request))
        return JSONResponse(await asyncio.to_thread(report_for, path))

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
        return JSONResponse(await asyncio.to_thread(whatif_for, path, tier, self.tiers_file))

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
        return JSONResponse(run.summary())


def build_app(service: Service, token: str | None) -> ASGIApp:
    """The ASGI app: routes, error mapping, OpenAPI document, and bearer auth when ``token``."""
    s = service
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
        return JSONResponse(schemas.get_schema(routes))

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AgentloopError)
        if isinstance(exc, RequestError):
            return error(exc.status, exc.message, exc.field)
        return error(400, exc.message)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, f"no run with id {exc.args[0]!r}" if exc.args else "not found", "id")

    app = Starlette(
        routes=[*routes, Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False)],
        exception_handlers={AgentloopError: bad_request, LookupError: not_found},
    )
    return BearerAuth(app, token) if token else app
