"""Browser tools driving a real Chromium against a page served by a loopback HTTP server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import agentloop_tools as tools
import pytest
from agentloop_tools.browser import _DOM_WALK, session

from agentloop.sandbox.context import RunContext
from agentloop.types import ToolResult

# the tests here drive a real Chromium
pytestmark = pytest.mark.external

PAGE = """<!doctype html>
<html><head><title>Greeter</title></head><body>
<h1>Service status</h1>
<p id="state">All good</p>
<label for="name">Name</label><input id="name">
<button id="go" onclick="greet()">Go</button>
<div id="out"></div>
<script>
function greet() {
  const n = document.getElementById('name').value;
  setTimeout(() => { document.getElementById('out').textContent = 'Hello, ' + n + '!'; }, 300);
}
document.getElementById('name').addEventListener('keydown', e => {
  if (e.key === 'Enter') { document.getElementById('out').textContent = 'Entered ' + e.target.value; }
});
</script></body></html>"""


@dataclass
class Site:
    """A loopback HTTP server's address and the (host, path) of every request it served."""

    port: int
    hits: list[tuple[str, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    """Serve PAGE on a free loopback port with asyncio (closed cleanly after the test)."""
    state = Site(port=0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        path = head.split()[1]
        host = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in head.splitlines()
                if ln.lower().startswith("host:")
            ),
            "",
        )
        state.hits.append((host, path))
        body = PAGE.encode() if path == "/" else b"not found"
        status = b"200 OK" if path == "/" else b"404 Not Found"
        writer.write(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: text/html\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[RunContext]:
    """A run context whose browser maps good.test and bad.test to loopback; closed after."""
    ws = tmp_path / "ws"
    ws.mkdir()
    c = RunContext(
        workspace=ws.resolve(),
        settings={
            "tool_timeout_s": 10,
            "output_cap": 4000,
            "allow_hosts": ["good.test"],
            "browser_args": [
                "--host-resolver-rules=MAP good.test 127.0.0.1, MAP bad.test 127.0.0.1"
            ],
        },
    )
    yield c
    await c.aclose()


async def call(ctx: RunContext, name: str, **args: Any) -> ToolResult:
    return await tools.registry()[name](ctx, args)


async def test_open_text_and_snapshot(ctx: RunContext, site: Site) -> None:
    """browser_open loads a loopback page; text and snapshot show what a user would see."""
    r = await call(ctx, "browser_open", url=site.url)
    assert r.ok
    assert r.output == f"Opened {site.url} (title: 'Greeter'): HTTP 200."
    assert r.data == {"url": site.url, "status": 200}
    r = await call(ctx, "browser_text")
    assert r.ok and r.output == "Service status\n\nAll good\n\nName Go"
    r = await call(ctx, "browser_snapshot")
    assert '- heading "Service status" [level=1]' in r.output
    assert '- button "Go"' in r.output
    assert '- textbox "Name"' in r.output


async def test_fill_click_and_wait(ctx: RunContext, site: Site) -> None:
    """Filling a field, clicking a button and waiting for delayed text all work on a live page."""
    await call(ctx, "browser_open", url=site.url)
    assert (await call(ctx, "browser_fill", selector="#name", text="Ada")).ok
    r = await call(ctx, "browser_click", selector="role=button[name='Go']")
    assert r.ok and r.output.startswith("Clicked")
    r = await call(ctx, "browser_wait_for_text", text="Hello, Ada!", timeout_s=5)
    assert r.ok, r.output
    r = await call(ctx, "browser_wait_for_text", text="Goodbye", timeout_s=0.3)
    assert r.ok is False and "did not appear" in r.output


async def test_press_key(ctx: RunContext, site: Site) -> None:
    """browser_press sends a key to the focused element."""
    await call(ctx, "browser_open", url=site.url)
    await call(ctx, "browser_fill", selector="#name", text="Bo")
    r = await call(ctx, "browser_press", key="Enter", selector="#name")
    assert r.ok
    assert "Entered Bo" in (await call(ctx, "browser_text")).output


async def test_screenshot_lands_in_workspace(ctx: RunContext, site: Site) -> None:
    """browser_screenshot writes a PNG inside the workspace."""
    await call(ctx, "browser_open", url=site.url)
    r = await call(ctx, "browser_screenshot", path="shots/page.png")
    assert r.ok and r.data["path"] == "shots/page.png"
    png = (Path(ctx.workspace) / "shots" / "page.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) == r.data["bytes"]


async def test_file_url_inside_workspace(ctx: RunContext) -> None:
    """A file:// URL inside the workspace opens."""
    page = Path(ctx.workspace) / "local.html"
    page.write_text("<title>Local</title><p>from disk</p>")
    r = await call(ctx, "browser_open", url=page.as_uri())
    assert r.ok, r.output
    assert (await call(ctx, "browser_text")).output == "from disk"


async def test_allow_hosts(ctx: RunContext, site: Site) -> None:
    """A host in allow_hosts is reachable; another host, even resolving to loopback, is not."""
    r = await call(ctx, "browser_open", url=f"http://good.test:{site.port}/")
    assert r.ok, r.output
    r = await call(ctx, "browser_open", url=f"http://bad.test:{site.port}/")
    assert r.ok is False and "'bad.test' is not an allowed host" in r.output
    assert [h for h, _ in site.hits] == [f"good.test:{site.port}"]


async def test_missing_element_fails_clearly(tmp_path: Path, site: Site) -> None:
    """Clicking an element that never appears fails with Playwright's reason, within the timeout."""
    c = RunContext(workspace=tmp_path, settings={"tool_timeout_s": 2})
    try:
        await tools.registry()["browser_open"](c, {"url": site.url})
        r = await tools.registry()["browser_click"](c, {"selector": "#nope"})
    finally:
        await c.aclose()
    assert r.ok is False
    assert r.output.startswith("Error: clicking '#nope' failed:") and "Timeout" in r.output


async def test_browser_closes_at_run_end(tmp_path: Path, site: Site) -> None:
    """The run's exit stack closes the browser: its page is closed afterwards."""
    c = RunContext(workspace=tmp_path)
    await tools.registry()["browser_open"](c, {"url": site.url})
    s = await session(c)
    assert not s.page.is_closed()
    await c.aclose()
    assert s.page.is_closed()


async def test_no_browser_says_how_to_install(tmp_path: Path) -> None:
    """Without a usable Chromium the result says how to install one."""
    c = RunContext(workspace=tmp_path, settings={"browser_executable": "/nonexistent/chromium"})
    try:
        r = await tools.registry()["browser_open"](c, {"url": "about:blank"})
    finally:
        await c.aclose()
    assert r.ok is False and "apt-get install -y chromium" in r.output


async def test_dom_walk_fallback_outlines_the_page(ctx: RunContext, site: Site) -> None:
    """The DOM-walk snapshot (for Playwright without aria_snapshot) lists roles and text."""
    await call(ctx, "browser_open", url=site.url)
    outline = await (await session(ctx)).page.evaluate(_DOM_WALK)
    assert "- h1: Service status" in outline
    assert "- button: Go" in outline
    assert "- input" in outline
