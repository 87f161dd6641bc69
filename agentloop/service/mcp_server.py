"""agentloop as an MCP server (``agentloop mcp serve``): its runs and analysis as MCP tools.

Built with the official SDK's ``MCPServer``; over stdio, or streamable HTTP with ``--port`` (the
bearer-token rule of ``agentloop serve``: a token in ``AGENTLOOP_TOKEN``, required off loopback). The tools: ``list_tasks`` (the
shipped tasks), ``compare`` (``compare A B --json``), ``run_task`` (a task by name or path, on a tier, its trace written under the
server's trace folder; answers with its status, times and trace path), ``report`` (``report
--json`` of a trace) and ``whatif`` (``whatif --tier NAME --json``), ``route`` (``route --tiers A,B --within PCT --json``), the same documents the HTTP
service answers with (:mod:`agentloop.service.analysis`). A bad argument is an error result
naming it; nothing is printed to stdout, which is the protocol's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from agentloop.errors import AgentloopError
from agentloop.service.analysis import report_for, route_for, whatif_for


def build(trace_dir: Path) -> MCPServer[Any]:
    """The server, its tools bound to ``trace_dir`` (where run_task writes its traces)."""
    server: MCPServer[Any] = MCPServer(
        "agentloop",
        instructions=(
            "Runs agent tasks and explains where a run's time went: run_task, report, whatif, "
            "route, compare, list_tasks. Traces are JSONL files; pass a trace path to report, whatif and route."
        ),
    )

    _run_tools(server, trace_dir)
    _analysis_tools(server)
    return server


def _run_tools(server: MCPServer[Any], trace_dir: Path) -> None:
    """The tools that find and run tasks (their traces written to ``trace_dir``)."""

    @server.tool()
    async def list_tasks() -> list[dict[str, str]]:
        """The task files shipped with agentloop (run one by name with run_task)."""
        from agentloop.config.shipped import shipped_tasks

        return [
            {"name": t.name, "group": t.group, "path": str(t.path), "description": t.description}
            for t in shipped_tasks()
        ]

    @server.tool()
    async def run_task(task: str, tier: str | None = None) -> dict[str, Any]:
        """Run one task (a shipped task's name or a task file's path) to its end on a tier
        (default: the task's, else sim-standard); its status, times and trace path."""
        from agentloop.api import run_task as run

        try:
            r = await run(task, tier=tier, trace_dir=trace_dir)
        except AgentloopError as exc:
            raise _refused(exc.message) from None
        return {
            "run_id": r.run_id,
            "status": r.status,
            "reason": r.reason,
            "steps": r.steps,
            "elapsed_s": round(r.elapsed_s, 3),
            "success": r.success,
            "final_text": r.final_text,
            "trace": r.trace_path,
        }


def _analysis_tools(server: MCPServer[Any]) -> None:
    """The tools that explain recorded runs: report, whatif, route, compare."""

    @server.tool()
    async def report(trace: str) -> dict[str, Any]:
        """Where a recorded run's time went: per category, step and critical path (the JSON of
        `agentloop report TRACE --json`)."""
        return await asyncio.to_thread(_checked, report_for, Path(trace))

    @server.tool()
    async def whatif(trace: str, tier: str) -> dict[str, Any]:
        """What a recorded run would take on another tier: predicted time, speedup, ceiling
        (the JSON of `agentloop whatif TRACE --tier NAME --json`)."""
        return await asyncio.to_thread(_checked, whatif_for, Path(trace), tier)

    @server.tool()
    async def route(
        trace: str, tiers: str, within_pct: float | None = None, budget_usd: float | None = None
    ) -> dict[str, Any]:
        """Which tier each model call of a recorded run should use: the cheapest plan within
        within_pct percent of the all-fastest run, or the fastest within budget_usd dollars;
        tiers names the candidates, e.g. "sim-standard,sim-ultrafast" (the JSON of `agentloop
        route TRACE --tiers A,B --within PCT --json`: frontier, plan per call and its reason)."""
        return await asyncio.to_thread(
            _checked, route_for, Path(trace), tiers, within_pct, budget_usd
        )

    @server.tool()
    async def compare(baseline: str, candidate: str) -> dict[str, Any]:
        """Two recorded runs of one task side by side: the baseline's prediction on the
        candidate's tier against the candidate as measured (the JSON of `agentloop compare A B
        --json`: predicted and measured speedup, the prediction's error)."""
        return await asyncio.to_thread(_compare, Path(baseline), Path(candidate))


def _compare(a: Path, b: Path) -> dict[str, Any]:
    from agentloop.analysis.compare import compare, compare_json
    from agentloop.analysis.graph import build_graph
    from agentloop.trace.reader import load_trace

    for p in (a, b):
        if not p.is_file():
            raise _refused(f"no trace file at {p}")
    try:
        return compare_json(compare(build_graph(load_trace(a)), build_graph(load_trace(b))))
    except AgentloopError as exc:
        raise _refused(exc.message) from None


def _refused(message: str) -> Exception:
    """An error result the client reads (the SDK's ToolError: anything else is a crash to it,
    shown as 'Error executing tool NAME' without the message)."""
    return ToolError(message)


def _checked(fn: Any, path: Path, *args: Any) -> dict[str, Any]:
    if not path.is_file():
        raise _refused(f"no trace file at {path}")
    try:
        out: dict[str, Any] = fn(path, *args)
    except AgentloopError as exc:
        raise _refused(exc.message) from None
    return out


async def serve_stdio(trace_dir: Path) -> None:
    """Serve over stdin/stdout until the client closes them."""
    await build(trace_dir).run_stdio_async()


async def serve_http(trace_dir: Path, host: str, port: int, token: str | None) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until cancelled; with ``token``, every
    request must carry ``Authorization: Bearer TOKEN`` (the HTTP service's rule and middleware)."""
    import uvicorn

    from agentloop.redact import redactor
    from agentloop.service.http import BearerAuth

    app: Any = build(trace_dir).streamable_http_app(host=host)
    if token is not None:
        app = BearerAuth(app, token, redactor())
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
