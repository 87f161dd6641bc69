"""``agentloop mcp serve``: agentloop as an MCP server, stdio or HTTP (its runs and analysis as tools)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from agentloop.commands.serve import TOKEN_ENV
from agentloop.errors import ConfigError
from agentloop.loopback import is_loopback


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mcp",
        help="agentloop as an MCP server (stdio): run_task, report, whatif, route, compare, list_tasks",
        description=(
            "Serve agentloop's tools over the Model Context Protocol, so a coding assistant can "
            "run a task and ask where its time went and what a faster tier would buy."
        ),
    )
    how = p.add_subparsers(dest="mcp_command", required=True, metavar="SUBCOMMAND")
    serve = how.add_parser(
        "serve",
        help="serve over stdin/stdout (the client starts this), or streamable HTTP with --port",
    )
    serve.add_argument(
        "--trace-dir",
        type=Path,
        default=Path("traces"),
        help="where run_task writes its traces (default: traces)",
    )
    serve.add_argument(
        "--port",
        type=int,
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; requests carry "
        f"'Authorization: Bearer ${TOKEN_ENV}' when {TOKEN_ENV} is set",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="with --port: the address (default 127.0.0.1)"
    )
    serve.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    from agentloop.service.mcp_server import serve_http, serve_stdio

    if args.port is None:
        await serve_stdio(args.trace_dir)
        return 0
    token = os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(args.host):
        raise ConfigError(
            f"refusing to listen on {args.host} without a token: set {TOKEN_ENV} (clients then "
            "send 'Authorization: Bearer <token>'), or listen on 127.0.0.1"
        )
    await serve_http(args.trace_dir, args.host, args.port, token)
    return 0
