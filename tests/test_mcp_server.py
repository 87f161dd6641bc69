"""``agentloop mcp serve``: a real MCP client session (the SDK's stdio_client) lists and calls
agentloop's own tools: list_tasks, run_task on the simulator, report, whatif and route of its trace."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.conftest import INSTANT_TOML, ROOT, run_cli

STEADY = ROOT / "tests" / "data" / "steady.yaml"


def _json(result) -> object:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        sc = result.structured_content
        return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc
    return json.loads(result.content[0].text)


async def test_a_client_lists_and_calls_agentloop_tools(tmp_path: Path) -> None:
    (tmp_path / "tiers.toml").write_text(INSTANT_TOML)  # the server's folder's own tiers
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentloop", "mcp", "serve", "--trace-dir", str(tmp_path)],
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PATH": os.environ["PATH"]},
        cwd=str(tmp_path),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"list_tasks", "run_task", "report", "whatif", "compare", "route"} <= names
        tasks = _json(await session.call_tool("list_tasks", {}))
        assert "checkout-timeouts" in {t["name"] for t in tasks}
        # on sim-fast: the task's default, sim-standard, would wait ~5 s on 60 tok/s for nothing
        run = _json(await session.call_tool("run_task", {"task": str(STEADY), "tier": "sim-fast"}))
        assert "ok" == run["status"] and Path(run["trace"]).is_file()
        report = _json(await session.call_tool("report", {"trace": run["trace"]}))
        assert 3 == len(report["steps"])
        what = _json(
            await session.call_tool("whatif", {"trace": run["trace"], "tier": "sim-ultrafast"})
        )
        assert what["speedup"] > 1 and what["predicted_s"] < report["measured_s"]
        plan = _json(
            await session.call_tool(
                "route",
                {"trace": run["trace"], "tiers": "sim-standard,sim-ultrafast", "within_pct": 0},
            )
        )  # within 0% of the all-fastest run: every call on sim-ultrafast, as the CLI plans it
        assert {"sim-ultrafast": 3, "sim-standard": 0} == plan["calls_per_tier"]
        two = "sim-standard,sim-ultrafast"
        assert plan["predicted_s"] <= plan["fastest_s"] + 1e-3 < report["measured_s"]
        cli = await asyncio.to_thread(
            run_cli, "route", run["trace"], "--json", "--tiers", two, "--within", "0"
        )
        assert 0 == cli.returncode
        assert json.loads(cli.stdout)["plan"] == plan["plan"]
        for args, said in [
            ({"tiers": "sim-standard", "within_pct": 5}, "at least two different tiers"),
            ({"tiers": "sim-standard,no-such-tier", "within_pct": 5}, "no-such-tier"),
            ({"tiers": two}, "one of within_pct or budget_usd"),
            ({"tiers": two, "within_pct": -1}, "must be a number >= 0"),
            ({"tiers": two, "within_pct": 5, "trace": str(tmp_path / "x")}, "no trace file at"),
        ]:
            bad = await session.call_tool("route", {"trace": run["trace"], **args})
            assert bad.is_error and said in bad.content[0].text, (args, bad.content)
        again = _json(  # the folder's tiers.toml's
            await session.call_tool("run_task", {"task": str(STEADY), "tier": "sim-instant"})
        )
        c = _json(
            await session.call_tool(
                "compare", {"baseline": run["trace"], "candidate": again["trace"]}
            )
        )
        assert c["measured_speedup"] > 1 and "error_pct" in c
        bad = await session.call_tool("report", {"trace": str(tmp_path / "none.jsonl")})
        assert bad.is_error and "no trace file at" in bad.content[0].text


async def test_streamable_http_with_the_bearer_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--port`: the SDK's streamable-HTTP client with the token lists and calls the tools; a
    request without it is 401; off loopback without a token the command refuses (exit 2)."""

    import socket
    import uuid

    import httpx
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = uuid.uuid4().hex
    env = {**os.environ, "AGENTLOOP_TOKEN": token}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentloop",
        "mcp",
        "serve",
        "--port",
        str(port),
        "--trace-dir",
        str(tmp_path),
        env=env,
        cwd=str(ROOT),
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient() as raw, asyncio.timeout(30):
            while True:
                try:
                    refused = await raw.post(url, json={})
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.1)
        assert 401 == refused.status_code
        auth = {"Authorization": f"Bearer {token}"}
        async with (
            create_mcp_http_client(headers=auth) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            assert {"run_task", "report", "whatif", "compare", "list_tasks"} <= names
            tasks = _json(await session.call_tool("list_tasks", {}))
            assert "checkout-timeouts" in {t["name"] for t in tasks}
    finally:
        proc.terminate()
        await proc.wait()
    monkeypatch.delenv("AGENTLOOP_TOKEN", raising=False)  # refused before it serves: in-process
    off = await asyncio.to_thread(run_cli, "mcp", "serve", "--port", str(port), "--host", "0.0.0.0")
    assert 2 == off.returncode and "without a token" in off.stderr
