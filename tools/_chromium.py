"""The browser tools' Chromium: one per run, started on first use, reaching allowed hosts only.

The network rule (:func:`tools._sandbox.url_refusal`) is enforced twice:
``context.route`` aborts every request it refuses, and Chromium's proxy is a dead loopback port
that only loopback and ``allow_hosts`` bypass -- because Playwright's route handler sees only the
first URL of a redirect chain, a loopback page redirecting elsewhere would otherwise get through.

On top of that rule (:func:`refusal`), the loopback ports agentloop itself listens on
(:mod:`agentloop.loopback`: the service's) are refused, so a model cannot drive the service
that runs it. A redirect to such a port goes direct (loopback bypasses the proxy, and the proxy
rules cannot name ports to exclude); the service itself refuses it, as it refuses every
cross-site browser request (:mod:`agentloop.service.guard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentloop_tools._sandbox import allow_hosts, tool_timeout, url_refusal

from agentloop.errors import ToolError
from agentloop.loopback import is_loopback, own_ports
from agentloop.protocols import ToolContext

# WebRTC's UDP (STUN, ICE) bypasses the HTTP proxy rule: only proxied (TCP) WebRTC is left,
# and the proxy is the dead port, so WebRTC reaches nothing. (This Chromium reads
# --webrtc-ip-handling-policy; the --force-... spelling some guides give does nothing.)
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)
SYSTEM_CHROMIUM = "/usr/bin/chromium"
INSTALL_HINT = (
    "no Chromium found: install one with `apt-get install -y chromium` (Debian/Ubuntu) "
    "or `python -m playwright install chromium`"
)


@dataclass
class Session:
    """The run's browser: its context and single page, and the requests the rule blocked."""

    context: Any
    page: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    blocked: list[str] = field(default_factory=list)


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def refusal(ctx: ToolContext, url: str) -> str | None:
    """Why the browser may not load ``url``: the sandbox's network rule, then agentloop's own
    loopback ports (None when it may)."""
    why = url_refusal(ctx, url)
    if why is not None:
        return why
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not is_loopback(parts.hostname or ""):
        return None
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        return f"{url!r} has an invalid port"
    if port in own_ports():
        return (
            f"{url!r}: port {port} on loopback is agentloop's own (its service, simulator or "
            "local model server); the browser may not reach it"
        )
    return None


def _executable(ctx: ToolContext, pw: Any) -> str:
    wanted = ctx.settings.browser_executable
    if wanted:
        if not Path(wanted).exists():
            raise ToolError(f"browser_executable {wanted} does not exist; {INSTALL_HINT}")
        return str(wanted)
    own = pw.chromium.executable_path
    if own and Path(own).exists():
        return str(own)
    if Path(SYSTEM_CHROMIUM).exists():
        return SYSTEM_CHROMIUM
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    raise ToolError(INSTALL_HINT)


async def _start(ctx: ToolContext, stack: contextlib.AsyncExitStack) -> Session:
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import async_playwright  # lazy: importing tools stays cheap

    async with contextlib.AsyncExitStack() as local:
        pw = await local.enter_async_context(async_playwright())
        exe = _executable(ctx, pw)
        # a bound port nobody listens on: the proxy every non-bypassed request dies at
        dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        local.callback(dead.close)
        dead.bind(("127.0.0.1", 0))
        bypass = ["localhost", "*.localhost", "127.0.0.1/8", "[::1]", *allow_hosts(ctx)]
        extra = list(ctx.settings.browser_args)
        try:
            browser = await pw.chromium.launch(
                executable_path=exe,
                headless=True,
                args=[*CHROMIUM_ARGS, *extra],
                proxy={
                    "server": f"http://127.0.0.1:{dead.getsockname()[1]}",
                    "bypass": ",".join(bypass),
                },
            )
        except PlaywrightError as exc:
            raise ToolError(
                f"could not start Chromium ({exe}): {first_line(exc)}; {INSTALL_HINT}"
            ) from exc
        local.push_async_callback(browser.close)
        context = await browser.new_context(service_workers="block", accept_downloads=False)
        local.push_async_callback(context.close)
        session = Session(context=context, page=None)

        async def guard(route: Any) -> None:
            url = route.request.url
            try:
                if refusal(ctx, url) is None:
                    await route.continue_()
                else:
                    session.blocked.append(url)
                    await route.abort("blockedbyclient")
            except PlaywrightError:
                pass  # the page went away while the request was in flight

        await context.route("**/*", guard)
        if hasattr(context, "route_web_socket"):

            async def guard_ws(ws: Any) -> None:
                if refusal(ctx, ws.url) is None:
                    ws.connect_to_server()
                else:
                    session.blocked.append(ws.url)
                    await ws.close(code=1008, reason="blocked by agentloop")

            await context.route_web_socket("**/*", guard_ws)
        context.set_default_timeout(timeout_ms(ctx))
        session.page = await context.new_page()
        stack.push_async_callback(local.pop_all().aclose)
    return session


def timeout_ms(ctx: ToolContext, seconds: float | None = None) -> float:
    limit = min(30.0, tool_timeout(ctx) * 0.9)
    return 1000.0 * (min(seconds, limit) if seconds is not None else limit)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def session(ctx: ToolContext) -> Session:
    """The run's browser session, started on first use."""

    async def factory(stack: contextlib.AsyncExitStack) -> Session:
        return await _start(ctx, stack)

    result: Session = await ctx.resource("browser", factory)
    return result
