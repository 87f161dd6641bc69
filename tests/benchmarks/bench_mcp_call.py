"""Benchmark of an MCP tool call's transport: what a tool span adds around the server's work.

The protocol has no field for the server's own time (a ``CallToolResult``'s ``_meta`` is free
for the server to fill, and the reference servers leave it empty), so a span of an MCP call is
the server's work plus the round trip: the JSON-RPC request and answer through the SDK's
ClientSession and the transport. This measures that round trip with calls that do no work:

1. stdio, in the run's jail: ``echo`` of tests/data/mcp_fault/fault_server.py (raw JSON-RPC,
   no SDK on the server side: the span is our client, the pipes and one json round trip);
2. stdio, in the run's jail: ``get_current_time`` of mcp-server-time (the SDK's server; its
   work is a clock read and a JSON answer);
3. streamable HTTP on loopback: a no-op tool of the SDK's own ``MCPServer`` served here by
   uvicorn, whose time inside the tool function is measured too (so the transport is the span
   less that).

Each: N sequential calls in one scripted run on sim-ultrafast, the tool spans' durations read
from the trace; medians and p95 printed with the load average.
Run: ``python tests/benchmarks/bench_mcp_call.py`` (about a minute).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop import run_task  # noqa: E402
from agentloop.trace.reader import load_trace  # noqa: E402

N = 30
FAULT_WS = ROOT / "tests" / "data" / "mcp_fault"


def task(folder: Path, server: str, tool: str, args: str) -> Path:
    turns = "".join(
        f"  - tool_calls:\n      - {{name: {tool}, arguments: {args}}}\n" for _ in range(N)
    )
    path = folder / f"{tool}.yaml"
    path.write_text(
        f"name: bench-{tool}\nprompt: p\nworkspace: {FAULT_WS}\nmcp_servers:\n  s: {server}\n"
        f'tools: ["mcp:s/{tool}"]\nlimits: {{max_steps: {N + 2}, timeout_s: 300}}\n'
        f"script:\n{turns}  - tool_calls:\n      - {{name: finish, arguments: {{summary: ok}}}}\n"
    )
    return path


async def spans_of(path: Path, tool: str, out: Path) -> list[float]:
    result = await run_task(path, tier="sim-ultrafast", trace_dir=out)
    assert result.status == "ok", result.status
    trace = load_trace(result.trace_path or "")
    return [
        (s.t1 - s.t0) / 1e6
        for s in trace.of_kind("tool")
        if s.attrs.get("gen_ai.tool.name") == tool and s.t1 is not None and s.attrs.get("ok")
    ]


def show(label: str, ms: list[float], inside: list[float] | None = None) -> None:
    ms = sorted(ms)
    p95 = ms[max(0, round(0.95 * len(ms)) - 1)]
    line = f"{label:<44} median {statistics.median(ms):6.2f} ms  p95 {p95:6.2f} ms  (n={len(ms)})"
    if inside:
        line += f"; in the tool {statistics.median(inside) * 1e3:.3f} ms median"
    print(line)


async def http_case(folder: Path) -> tuple[list[float], list[float]]:
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench")
    logging.getLogger().setLevel(logging.WARNING)  # the SDK's server logs each request at INFO
    inside: list[float] = []

    @server.tool()
    def noop() -> str:
        """Does nothing."""
        t0 = time.perf_counter()
        out = "ok"
        inside.append(time.perf_counter() - t0)
        return out

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    http = uvicorn.Server(
        uvicorn.Config(
            server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    serving = asyncio.create_task(http.serve())
    try:
        while not http.started:
            await asyncio.sleep(0.02)
        path = task(folder, f"{{url: 'http://127.0.0.1:{port}/mcp'}}", "noop", "{}")
        return await spans_of(path, "noop", folder), inside
    finally:
        http.should_exit = True
        await serving


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
        echo = task(folder, "{command: python, args: [fault_server.py]}", "echo", "{text: hi}")
        show("stdio in the jail, raw JSON-RPC echo", await spans_of(echo, "echo", folder))
        now = task(folder, "{command: mcp-server-time}", "get_current_time", "{timezone: UTC}")
        show("stdio in the jail, mcp-server-time", await spans_of(now, "get_current_time", folder))
        ms, inside = await http_case(folder)
        show("streamable HTTP (SDK MCPServer), no-op tool", ms, inside)
        print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    asyncio.run(main())
