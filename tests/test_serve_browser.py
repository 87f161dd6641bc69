"""The agent's own browser (a real Chromium) against a real `agentloop serve` on loopback: it may
not reach the service's port directly, and what it sends through a redirect the service refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agentloop_tools as tools
import pytest
from agentloop_tools.browser import refusal, session
from test_serve import QUICK, Server, _start, _stop

from agentloop.config.tiers import SpeedProfile
from agentloop.loopback import own_ports
from agentloop.sandbox.context import RunContext
from agentloop.sim import SimServer
from agentloop.types import ToolResult
from tests.conftest import html_response

# the tests here drive a real Chromium
pytestmark = pytest.mark.external


@pytest.fixture
async def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Server]:
    """A server without a token, its port registered in a registry private to this test."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "quick.yaml").write_text(QUICK)
    s = _start(tmp_path, token=None)
    s.client.headers.pop("Authorization")
    try:
        yield s
    finally:
        await s.client.aclose()
        _stop(s)


def _port(s: Server) -> int:
    return int(s.base.rsplit(":", 1)[1])


async def _attacker(service_port: int) -> tuple[asyncio.Server, int]:
    """A loopback site whose pages try to reach the service: directly, and through redirects."""
    target = f"http://127.0.0.1:{service_port}/v1/runs"
    form = (
        '<form id=f method=POST enctype="text/plain" action="{action}">'
        '<input name=\'{{"task": "tasks/quick.yaml", "x": "\' value=\'"}}\'></form>'
        "<script>document.getElementById('f').submit()</script>"
    )
    pages = {
        "/form-direct": form.format(action=target),
        "/form-bounce": form.format(action="/bounce"),
        "/fetch": (
            f"<script>fetch('{target}', {{method: 'POST', headers: "
            "{'Content-Type': 'application/json'}, body: '{\"task\": \"tasks/quick.yaml\"}'})"
            ".then(() => document.title = 'sent', () => document.title = 'failed')</script>"
        ),
    }

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            length = next(
                (
                    int(x.split(":")[1])
                    for x in head.splitlines()
                    if x.lower().startswith("content-length:")
                ),
                0,
            )
            if length:
                await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        path = head.split()[1]
        if path in ("/redirect", "/bounce"):  # 307 keeps a POST a POST, body and all
            writer.write(
                f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
        else:
            body = f"<!doctype html><title>attacker</title>{pages.get(path, '')}".encode()
            writer.write(html_response(body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.fixture
async def attacker(service: Server) -> AsyncIterator[int]:
    server, port = await _attacker(_port(service))
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[RunContext]:
    """A run context whose browser allows good.test, which resolves to loopback."""
    ws = tmp_path / "ws"
    ws.mkdir()
    c = RunContext(
        workspace=ws.resolve(),
        settings={
            "tool_timeout_s": 10,
            "allow_hosts": ["good.test"],
            "browser_args": ["--host-resolver-rules=MAP good.test 127.0.0.1"],
        },
    )
    yield c
    await c.aclose()


async def call(ctx: RunContext, name: str, **args: Any) -> ToolResult:
    return await tools.registry()[name](ctx, args)


async def _no_runs(s: Server) -> bool:
    return [] == (await s.client.get("/v1/runs")).json()["runs"]


async def test_the_browser_cannot_open_the_services_port(ctx: RunContext, service: Server) -> None:
    """browser_open of the service on loopback, by any loopback name, is refused before any
    request is sent; a name in allow_hosts that resolves to loopback gets the service's 421."""
    port = _port(service)
    assert port in own_ports()
    for url in (
        f"http://127.0.0.1:{port}/v1/runs",
        f"http://localhost:{port}/openapi.json",
        f"http://[::1]:{port}/v1/runs",
    ):
        r = await call(ctx, "browser_open", url=url)
        assert (False, True) == (r.ok, "agentloop's own" in r.output), r.output
    r = await call(ctx, "browser_open", url=f"http://good.test:{port}/v1/runs")
    assert (False, 421) == (r.ok, r.data["status"])
    assert "DNS rebinding" in (await call(ctx, "browser_text")).output
    assert await _no_runs(service)


async def test_a_page_cannot_post_to_the_service(
    ctx: RunContext, service: Server, attacker: int
) -> None:
    """A page's form or fetch aimed at the service is blocked by the browser's rule; a form
    bounced through a 307 redirect (which the rule cannot see) is refused by the service; a
    redirected navigation too. No run is submitted."""
    port = _port(service)
    base = f"http://127.0.0.1:{attacker}"
    for page in ("/form-direct", "/fetch"):
        assert (await call(ctx, "browser_open", url=base + page)).ok
        await asyncio.sleep(1.0)
        assert any(f":{port}/" in u for u in (await session(ctx)).blocked), page
    await call(ctx, "browser_open", url=base + "/form-bounce")
    r = await call(ctx, "browser_wait_for_text", text="refused", timeout_s=5)
    assert r.ok, (await call(ctx, "browser_text")).output
    r = await call(ctx, "browser_open", url=base + "/redirect")
    assert (False, 403) == (r.ok, r.data["status"])
    assert "Sec-Fetch-Site" in (await call(ctx, "browser_text")).output
    assert await _no_runs(service)


async def test_the_browser_refuses_the_simulators_port_while_it_serves(tmp_path: Path) -> None:
    """A running simulator's port is agentloop's own: the browser's rule refuses it on every
    loopback name, and no longer once the simulator has stopped."""
    ctx = RunContext(workspace=tmp_path.resolve())
    async with SimServer(profile=SpeedProfile(0.0, 0, 200)) as sim:
        refused = [
            refusal(ctx, f"http://{h}:{sim.port}/v1/models") for h in ("127.0.0.1", "localhost")
        ]
        port = sim.port
    assert [True, True] == ["agentloop's own" in (why or "") for why in refused]
    assert refusal(ctx, f"http://127.0.0.1:{port}/v1/models") is None
