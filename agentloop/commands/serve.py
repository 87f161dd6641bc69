"""``agentloop serve``: agentloop as an HTTP service that runs, streams and explains agent runs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from agentloop.errors import ConfigError
from agentloop.loopback import is_loopback
from agentloop.service.runs import (
    KEEP_DAYS,
    KEEP_ENDED,
    KEEP_RUNS,
    MAX_FOLLOWERS,
    MAX_QUEUED,
    PRUNE_EVERY_S,
)

TOKEN_ENV = "AGENTLOOP_TOKEN"  # the bearer token's variable; the token itself is never printed


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run agentloop as an HTTP service",
        description=(
            "Serve the run API over HTTP: submit runs (POST /v1/runs), follow their events as "
            "server-sent events, fetch traces, reports and what-if predictions, cancel runs. "
            f"Requests must carry 'Authorization: Bearer $${TOKEN_ENV}' when {TOKEN_ENV} is set; "
            "without it the server only listens on a loopback address. The API is described at "
            "/openapi.json."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument(
        "--trace-dir",
        type=Path,
        default=Path("traces"),
        help="folder for the runs' traces (default ./traces)",
    )
    p.add_argument(
        "--concurrency", type=int, default=4, help="runs at once; more wait in a queue (default 4)"
    )
    p.add_argument(
        "--tasks-dir",
        type=Path,
        default=Path("tasks"),
        help="task paths in requests must lie inside this folder (default ./tasks)",
    )
    p.add_argument(
        "--tiers", type=Path, metavar="FILE", help="tiers file layered on the built-in one"
    )
    _state_args(p)
    _bound_args(p)
    _reach_args(p)
    p.set_defaults(func=main)


def _state_args(p: Any) -> None:
    """Where the run store lives, and what a restart or a stop does with its runs."""
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path("agentloop-state"),
        help="folder of the run store (SQLite): queued and ended runs outlive a restart "
        "(default ./agentloop-state)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="on start, run again (once, as new runs) the runs a crash interrupted",
    )
    p.add_argument(
        "--drain-s",
        type=float,
        metavar="S",
        default=0.0,
        help="on SIGTERM, seconds runs in flight may still finish before they are cancelled "
        "(default 0); queued runs stay queued for the next start",
    )


def _bound_args(p: Any) -> None:
    """The bounds on what the server holds: queued runs, ended runs, the store, event streams."""
    p.add_argument(
        "--max-queue",
        "--max-queued",
        dest="max_queued",
        type=int,
        metavar="N",
        default=MAX_QUEUED,
        help=f"runs that may wait for a slot; more are refused with 429 and a Retry-After "
        f"(default {MAX_QUEUED})",
    )
    p.add_argument(
        "--keep-ended",
        type=int,
        metavar="N",
        default=KEEP_ENDED,
        help=f"ended runs held in memory with their events; older ones are answered from the "
        f"store (default {KEEP_ENDED})",
    )
    p.add_argument(
        "--keep-days",
        type=float,
        metavar="D",
        default=KEEP_DAYS,
        help=f"ended runs older than this many days are deleted from the run store, at start and "
        f"every --prune-every-s; their trace files stay (default {KEEP_DAYS:g})",
    )
    p.add_argument(
        "--keep-runs",
        type=int,
        metavar="N",
        default=KEEP_RUNS,
        help=f"the run store keeps the newest N ended runs; older ones are deleted, their trace "
        f"files stay; queued and running runs are never deleted (default {KEEP_RUNS})",
    )
    p.add_argument(
        "--prune-every-s",
        type=float,
        metavar="S",
        default=PRUNE_EVERY_S,
        help=f"seconds between two prunings of the run store (default {PRUNE_EVERY_S:g})",
    )
    p.add_argument(
        "--max-followers",
        type=int,
        metavar="N",
        default=MAX_FOLLOWERS,
        help=f"event streams of one run at once; more are refused with 429 "
        f"(default {MAX_FOLLOWERS})",
    )
    p.add_argument(
        "--heartbeat-s",
        type=float,
        metavar="S",
        default=5.0,
        help="seconds of silence on an event stream before a comment line keeps it open "
        "(default 5)",
    )


def _reach_args(p: Any) -> None:
    """Where runs run (a Ray cluster) and which names may reach the server."""
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run each run as a Ray task on this cluster (HOST:PORT, ray://HOST:PORT, auto, or "
        "'local' for a one-machine cluster in this process); the API, the run store, the event "
        "streams, the traces and their analysis stay on this server (pip install "
        "'agentloop[ray]')",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another name clients may give in the Host header (a reverse proxy's); by default "
        "only loopback's names and the --host value",
    )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _checked(args: argparse.Namespace) -> str | None:
    """The flags' bounds checked (exit 2 naming the flag), and the bearer token, which a
    non-loopback address requires."""
    for flag, value, least in (
        ("--concurrency", args.concurrency, 1),
        ("--max-queue", args.max_queued, 0),
        ("--keep-ended", args.keep_ended, 0),
        ("--max-followers", args.max_followers, 1),
        ("--keep-runs", args.keep_runs, 1),
    ):
        if value < least:
            raise ConfigError(f"{flag} must be at least {least}")
    for flag, seconds in (
        ("--drain-s", args.drain_s),
        ("--heartbeat-s", args.heartbeat_s),
        ("--prune-every-s", args.prune_every_s),
    ):
        if not 0 <= seconds < 86400 or (flag != "--drain-s" and seconds == 0):
            raise ConfigError(f"{flag} must be more than 0 and less than a day")
    if not args.keep_days > 0:
        raise ConfigError("--keep-days must be more than 0")
    token = os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(args.host):
        raise ConfigError(
            f"refusing to listen on {args.host} without a token: set {TOKEN_ENV} "
            "(clients then send 'Authorization: Bearer <token>'), or listen on "
            "127.0.0.1"
        )
    return token


def _service(args: argparse.Namespace, store: Any, backend: Any) -> tuple[Any, Any]:
    """The run book over ``store`` (runs started here, or on ``backend``'s Ray cluster) and the
    request handlers over it, with the metrics watching both."""
    from agentloop import api, start_run
    from agentloop.service.app import Service
    from agentloop.service.metrics import Metrics
    from agentloop.service.runs import RunBook

    metrics = Metrics()
    book = RunBook(
        backend.start_run if backend is not None else start_run,
        store=store,
        trace_dir=args.trace_dir,
        concurrency=args.concurrency,
        tiers_file=args.tiers,
        max_queued=args.max_queued,
        keep_ended=args.keep_ended,
        on_end=metrics.run_ended,
    )
    metrics.watch(book)
    service = Service(
        book,
        tasks_dir=args.tasks_dir,
        known_tools=set(api.tool_registry()),
        tiers_file=args.tiers,
        metrics=metrics,
        heartbeat_s=args.heartbeat_s,
        max_followers=args.max_followers,
    )
    return book, service


def _listening(
    args: argparse.Namespace,
    host: str,
    port: int,
    token: str | None,
    picked: dict[str, int],
    pruned: int,
) -> str:
    """The line saying the server listens, and what it picked up from the store."""
    return (
        f"agentloop serve: listening on http://{host}:{port} ({args.concurrency} runs at "
        f"once, tasks from {args.tasks_dir}, traces to {args.trace_dir}, run store in "
        f"{args.state_dir}, {'bearer token required' if token else 'no token: loopback only'}"
        f"{f', runs on the Ray cluster at {args.ray}' if args.ray is not None else ''}"
        f"; {picked['queued']} queued run(s) picked up, {picked['resumed']} resumed, "
        f"{pruned} ended run(s) past --keep-days/--keep-runs pruned from the store)"
    )


async def main(args: argparse.Namespace) -> int:
    import uvicorn

    from agentloop.log import configure
    from agentloop.loopback import registered
    from agentloop.service.app import build_app
    from agentloop.service.guard import HostNames
    from agentloop.service.runs import prune_forever
    from agentloop.service.store import RunStore

    configure()
    token = _checked(args)
    backend = None
    if args.ray is not None:  # before the store opens: a cluster that cannot be reached is exit 2
        from agentloop.suite.ray_backend import RayBackend

        backend = RayBackend(args.ray)
    store = RunStore(args.state_dir)
    await store.open()
    book, service = _service(args, store, backend)
    sock = _bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    hosts = HostNames(args.host, extra=tuple(args.allow_host))
    app = build_app(service, token, hosts=hosts, port=port)
    server = _Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"),
        book,
        args.drain_s,
    )
    try:
        with registered(port):  # the runs' browsers refuse this port (agentloop.loopback)
            picked = await book.recover(service.parse, resume=args.resume)
            pruned = await book.prune(args.keep_days, args.keep_runs)
            pruning = asyncio.create_task(
                prune_forever(book, args.keep_days, args.keep_runs, args.prune_every_s)
            )
            print(_listening(args, host, port, token, picked, pruned), flush=True)
            try:
                await server.serve(sockets=[sock])
            finally:
                pruning.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pruning
    finally:
        await store.close()
        if backend is not None:
            backend.close()
    if server.stopped_runs is not None:
        print(
            f"agentloop serve: stopped; {server.stopped_runs} run(s) cancelled with their "
            "traces closed",
            file=sys.stderr,
            flush=True,
        )
    return 0


class _Server:
    """uvicorn's server, stopping gracefully: on SIGTERM/SIGINT submissions get 503, runs in
    flight may finish for ``drain_s``, then the rest are cancelled (their traces closed as
    ``cancelled``, their event streams ended) before the server exits; queued runs stay queued
    in the store for the next start."""

    def __init__(self, config: Any, book: Any, drain_s: float) -> None:
        import uvicorn

        self._book, self._drain_s = book, drain_s
        self.stopped_runs: int | None = None
        self._stopping: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        outer = self

        class Server(uvicorn.Server):
            # called by uvicorn's own signal capture; not recording the signal keeps uvicorn
            # from raising it again once serving ends: this exit is the graceful one
            def handle_exit(self, sig: int, frame: Any) -> None:
                if outer._stopping is not None and sig == signal.SIGINT:
                    self.force_exit = True  # a second Ctrl-C: stop waiting for the runs
                loop.call_soon_threadsafe(outer._stop)

        self._server = Server(config)

    def _stop(self) -> None:
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        self.stopped_runs = await self._book.close(self._drain_s)
        self._server.should_exit = True

    async def serve(self, sockets: list[socket.socket]) -> None:
        try:
            await self._server.serve(sockets=sockets)
        finally:
            if self._stopping is not None:
                await self._stopping
            else:  # the server ended on its own: still close every run
                await self._book.close()
