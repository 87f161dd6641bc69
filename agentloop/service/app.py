"""The service's HTTP face: a Starlette app over a RunBook (runs, events as SSE, trace, analysis).

Routes (all JSON but the trace, the event stream and the metrics):

    POST   /v1/runs                 submit {task, tier?, limits?} -> 202 {id, status}
    GET    /v1/runs                 runs newest first (?status= &task= &limit= &cursor=)
    GET    /v1/runs/{id}            one run's summary: status, steps, times, success
    GET    /v1/runs/{id}/events     server-sent events of the run from its start to run_end
    GET    /v1/runs/{id}/trace      the trace file (JSONL) as written so far
    GET    /v1/runs/{id}/report     `agentloop report --json` of the trace
    GET    /v1/runs/{id}/whatif     `agentloop whatif --tier NAME --json` (?tier=NAME)
    DELETE /v1/runs/{id}            cancel; the trace closes with status cancelled
    GET    /healthz                 alive (no token needed)
    GET    /readyz                  the store is open and a run would start or queue
    GET    /metrics                 Prometheus' text format (agentloop.service.metrics)
    GET    /openapi.json            this API as an OpenAPI 3.1 document, with its schemas

A submission is checked whole at the door (:mod:`agentloop.service.requests`): what a run needs
before it starts is there, or a 4xx names the field; an ``Idempotency-Key`` header makes a
retried submission answer with the first one's run. Each server-sent event carries ``id:`` (its
number in the run), so a client that reconnects with ``Last-Event-ID`` gets the rest; a comment
line every ``heartbeat_s`` keeps a quiet stream (a queued run's) open through proxies.

With a token set, every request but ``/healthz`` must carry ``Authorization: Bearer <token>``
(compared in constant time; never logged). Before that, :mod:`agentloop.service.guard` refuses what a web page
or a rebinding host sends. Errors are ``{"error": {"message", "field"?}}``.

Every answer passes the one redactor (:mod:`agentloop.redact`), the one the trace pipeline
uses: JSON answers and errors, each server-sent event, and the trace file line by line. A run's
events come from the runner before its trace pipeline, so without this a secret a tool printed
would reach the event stream verbatim. A body is read in chunks and refused (413) once past
:data:`agentloop.service.http.MAX_BODY`, never held whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.schemas import SchemaGenerator
from starlette.types import ASGIApp

from agentloop.config.tasks import Task
from agentloop.errors import AgentloopError, RequestError
from agentloop.redact import Redactor, redactor
from agentloop.service.analysis import report_for, whatif_for
from agentloop.service.guard import BrowserGuard, HostNames
from agentloop.service.http import (
    BearerAuth,
    CountRefusals,
    answer,
    error,
    event_stream,
    int_param,
    read_body,
)
from agentloop.service.metrics import CONTENT_TYPE, Metrics
from agentloop.service.requests import check_runnable, shown, task_from_request
from agentloop.service.run import Run
from agentloop.service.runs import MAX_FOLLOWERS, RunBook
from agentloop.service.schema import OPENAPI_INFO, STATUSES, openapi_document

HEARTBEAT_S = 5.0  # seconds of silence on an event stream before a comment line is sent
MAX_KEY = 200  # characters of an Idempotency-Key
PAGE, MAX_PAGE = 50, 500  # runs a GET /v1/runs page holds by default, at most


class Service:
    """The request handlers, bound to one RunBook and the server's settings."""

    def __init__(
        self,
        book: RunBook,
        *,
        tasks_dir: Path,
        known_tools: set[str],
        tiers_file: Path | None,
        metrics: Metrics | None = None,
        redact: Redactor | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        max_followers: int = MAX_FOLLOWERS,
    ) -> None:
        self.book, self.tasks_dir, self.known_tools = book, tasks_dir, known_tools
        self.tiers_file = tiers_file
        self.metrics = metrics or Metrics()
        self.redact = redact or redactor()  # the server's secret-named environment values
        self.heartbeat_s, self.max_followers = heartbeat_s, max_followers

    def parse(self, body: Any) -> tuple[Task, str | None]:
        """A run request checked whole: the task with its limits, and a tier that can start."""
        task, tier = task_from_request(body, tasks_dir=self.tasks_dir, known_tools=self.known_tools)
        check_runnable(task, tier, self.tiers_file)
        return task, tier

    async def _run(self, request: Request) -> Run:
        run = await self.book.find(request.path_params["id"])
        if run is None:
            raise LookupError(request.path_params["id"])
        return run

    async def submit(self, request: Request) -> Response:
        """
        summary: Submit a run
        operationId: submitRun
        description: "Checked whole before it is accepted (task, tier and its key, limits): a
          run that is accepted starts. Written down before the answer; it waits for a slot when
          the server is at its concurrency. With an Idempotency-Key header, a retry of the same
          body answers with the first submission's run."
        parameters:
          - {name: Idempotency-Key, in: header, required: false, schema: {type: string, maxLength: 200}}
        body: RunRequest
        responses:
          202: {description: "accepted (or, for a known Idempotency-Key, the first run)", schema: RunAccepted}
          400: {description: "invalid request; error.field names the part at fault", schema: Error}
          409: {description: "the Idempotency-Key was used with another body", schema: Error}
          413: {description: "the body is larger than 1 MiB", schema: Error}
          415: {description: "the body is not sent as application/json", schema: Error}
          429: {description: "the queue is full; see Retry-After", schema: Error}
          503: {description: "the service is stopping; see Retry-After", schema: Error}
        """
        key = request.headers.get("idempotency-key")
        if key is not None and not (0 < len(key) <= MAX_KEY and key.isprintable()):
            raise RequestError(
                f"header 'Idempotency-Key': 1 to {MAX_KEY} printable characters",
                field="Idempotency-Key",
            )
        raw = await read_body(request)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:  # says where, never what: the body is not echoed
            return error(400, f"the body is not JSON: {exc}", self.redact, field="")
        # a task file's YAML and the tiers are parsed off the event loop the runs share
        task, tier = await asyncio.to_thread(self.parse, body)
        digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
        run, new = await self.book.submit(
            task, tier, body, key=key, digest=digest if key is not None else None
        )
        headers = {"Location": f"/v1/runs/{run.id}"}
        if not new:
            headers["Idempotent-Replayed"] = "true"
        return answer({"id": run.id, "status": run.status}, self.redact, 202, headers=headers)

    async def list_runs(self, request: Request) -> Response:
        """
        summary: List runs, newest first
        operationId: listRuns
        parameters:
          - {name: status, in: query, required: false, schema: {type: string}}
          - {name: task, in: query, required: false, schema: {type: string}}
          - {name: limit, in: query, required: false, schema: {type: integer, minimum: 1, maximum: 500}}
          - {name: cursor, in: query, required: false, schema: {type: string}}
        responses:
          200: {description: "a page of runs and the next page's cursor", schema: RunList}
          400: {description: "a bad filter, limit or cursor", schema: Error}
        """
        q = request.query_params
        status = q.get("status")
        if status is not None and status not in STATUSES:
            raise RequestError(
                f"query parameter 'status': one of {', '.join(STATUSES)}", field="status"
            )
        limit = int_param(q.get("limit"), "limit", PAGE, 1, MAX_PAGE)
        before = int_param(q.get("cursor"), "cursor", None, 1, None)
        runs, cursor = await self.book.page(
            status=status, task=q.get("task"), before=before, limit=limit
        )
        return answer(
            {"runs": runs, "next_cursor": str(cursor) if cursor is not None else None},
            self.redact,
        )

    async def get_run(self, request: Request) -> Response:
        """
        summary: One run's summary
        operationId: getRun
        responses:
          200: {description: "status, steps, times, success", schema: RunSummary}
          404: {description: "no such run", schema: Error}
        """
        return answer((await self._run(request)).summary(), self.redact)

    async def events(self, request: Request) -> Response:
        """
        summary: The run's events as server-sent events
        operationId: runEvents
        description: "Each event is id: N (its number in the run), event: KIND, data: JSON
          (RunEvent); from the run's start, or after the event a Last-Event-ID header names;
          always ending with run_end (a run that ended before a restart has only that). A
          comment line comes every few seconds while nothing else does."
        parameters:
          - {name: Last-Event-ID, in: header, required: false, schema: {type: string}}
        responses:
          200: {description: "text/event-stream of RunEvent", schema: RunEvent, content_type: text/event-stream}
          404: {description: "no such run", schema: Error}
          429: {description: "too many streams of this run are open", schema: Error}
        """
        run = await self._run(request)
        last = int_param(
            request.headers.get("last-event-id"), "Last-Event-ID", None, 0, None, header=True
        )
        if run.followers >= self.max_followers:
            raise RequestError(
                f"{run.followers} event streams of run {run.id} are open, the most this server "
                "allows: close one, or read the run's summary instead",
                field="id",
                status=429,
            )
        run.followers += 1
        return StreamingResponse(
            event_stream(run, self.redact, self.heartbeat_s, last),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
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
        operationId: getTrace
        responses:
          200: {description: "the trace's lines", content_type: application/x-ndjson}
          409: {description: "no trace yet", schema: Error}
        """
        path = self._trace(await self._run(request))
        # written through the same redactor; passed again so that no answer skips it
        text = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
        lines = await asyncio.to_thread(lambda: [self.redact.text(x) for x in text.splitlines()])
        body = "".join(x + "\n" for x in lines).encode()
        return Response(body, media_type="application/x-ndjson")

    async def report(self, request: Request) -> Response:
        """
        summary: Where the run's time went (agentloop report --json)
        operationId: getReport
        responses:
          200: {description: "the report", schema: Document}
          409: {description: "no trace yet", schema: Error}
        """
        path = self._trace(await self._run(request))
        return answer(await asyncio.to_thread(report_for, path), self.redact)

    async def whatif(self, request: Request) -> Response:
        """
        summary: The run predicted on another tier (agentloop whatif --json)
        operationId: getWhatif
        parameters: [{name: tier, in: query, required: true, schema: {type: string}}]
        responses:
          200: {description: "the prediction", schema: Document}
          400: {description: "no or unknown tier", schema: Error}
          409: {description: "no trace yet", schema: Error}
        """
        run = await self._run(request)
        tier = request.query_params.get("tier")
        if not tier:
            raise RequestError("query parameter 'tier' is required (?tier=NAME)", field="tier")
        path = self._trace(run)
        return answer(await asyncio.to_thread(whatif_for, path, tier, self.tiers_file), self.redact)

    async def cancel(self, request: Request) -> Response:
        """
        summary: Cancel a run
        operationId: cancelRun
        description: A queued run never starts; a running one ends with status cancelled.
        responses:
          200: {description: "the run's summary after the cancel", schema: RunSummary}
          404: {description: "no such run", schema: Error}
        """
        run = await self._run(request)
        self.book.cancel(run)
        with contextlib.suppress(TimeoutError):  # still ending: the summary says so
            await asyncio.wait_for(run.ended.wait(), timeout=15.0)
        return answer(run.summary(), self.redact)

    async def healthz(self, request: Request) -> Response:
        """
        summary: Alive
        operationId: healthz
        responses: {200: {description: "the process answers", schema: Health}}
        """
        return answer({"status": "alive"}, self.redact)

    async def readyz(self, request: Request) -> Response:
        """
        summary: Ready to take a run
        operationId: readyz
        responses:
          200: {description: "the store is open and a submission would start or queue", schema: Health}
          503: {description: "stopping, the store is closed, or the queue is full", schema: Health}
        """
        book = self.book
        why = (
            "stopping"
            if book.closing
            else "store closed"
            if not book.store.is_open
            else "queue full"
            if book.running >= book.concurrency and book.queued >= book.max_queued
            else None
        )
        if why is None:
            return answer({"status": "ready"}, self.redact)
        return answer(
            {"status": why},
            self.redact,
            503,
            headers={"Retry-After": str(book.retry_after())},
        )

    async def metrics_text(self, request: Request) -> Response:
        """
        summary: Prometheus metrics
        operationId: metrics
        responses: {200: {description: "Prometheus' text format", content_type: text/plain}}
        """
        return Response(self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})


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
        Route("/healthz", s.healthz, methods=["GET"]),
        Route("/readyz", s.readyz, methods=["GET"]),
        Route("/metrics", s.metrics_text, methods=["GET"]),
    ]
    document = openapi_document(SchemaGenerator(OPENAPI_INFO).get_schema(routes))

    async def openapi(request: Request) -> Response:
        return answer(document, redact)

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AgentloopError)
        if isinstance(exc, RequestError):
            headers = (
                {"Retry-After": str(s.book.retry_after())} if exc.status in (429, 503) else None
            )
            return error(exc.status, exc.message, redact, exc.field, headers)
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

    return CountRefusals(BrowserGuard(inner, hosts=hosts, port=port, refuse=refuse), s.metrics)
