"""``agentloop mcp serve``: agentloop as an MCP server over stdio (its runs and analysis as tools)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mcp",
        help="agentloop as an MCP server (stdio): run_task, report, whatif, list_tasks",
        description=(
            "Serve agentloop's tools over the Model Context Protocol, so a coding assistant can "
            "run a task and ask where its time went and what a faster tier would buy."
        ),
    )
    how = p.add_subparsers(dest="mcp_command", required=True, metavar="SUBCOMMAND")
    serve = how.add_parser("serve", help="serve over stdin/stdout (the client starts this)")
    serve.add_argument(
        "--trace-dir",
        type=Path,
        default=Path("traces"),
        help="where run_task writes its traces (default: traces)",
    )
    serve.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    from agentloop.service.mcp_server import serve_stdio

    await serve_stdio(args.trace_dir)
    return 0
