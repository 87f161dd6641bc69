"""Browser tools: one real Chromium per run (Playwright), one page, reaching allowed hosts only.

The browser starts on first use through ``ctx.resource("browser", ...)``, and the run's exit
stack closes it. The network rule (:func:`tools._sandbox.url_refusal`) is enforced twice:
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

from agentloop_tools import _fs
from agentloop_tools._sandbox import (
    allow_hosts,
    cap_text,
    output_cap,
    relative,
    resolve_path,
    tool_timeout,
    url_refusal,
    workspace,
)

from agentloop.errors import ToolError
from agentloop.loopback import is_loopback, own_ports
from agentloop.protocols import ToolContext
from agentloop.types import ToolResult

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
                f"could not start Chromium ({exe}): {_first_line(exc)}; {INSTALL_HINT}"
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
        context.set_default_timeout(_timeout_ms(ctx))
        session.page = await context.new_page()
        stack.push_async_callback(local.pop_all().aclose)
    return session


def _timeout_ms(ctx: ToolContext, seconds: float | None = None) -> float:
    limit = min(30.0, tool_timeout(ctx) * 0.9)
    return 1000.0 * (min(seconds, limit) if seconds is not None else limit)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def session(ctx: ToolContext) -> Session:
    """The run's browser session, started on first use."""

    async def factory(stack: contextlib.AsyncExitStack) -> Session:
        return await _start(ctx, stack)

    result: Session = await ctx.resource("browser", factory)
    return result


async def _act(ctx: ToolContext, what: str, action: Any) -> tuple[Session, Any, str]:
    """Run ``action(page)`` under the session lock; Playwright errors become ToolError."""
    from playwright.async_api import Error as PlaywrightError

    s = await session(ctx)
    async with s.lock:
        before = len(s.blocked)
        try:
            value = await action(s.page)
        except PlaywrightError as exc:
            note = _blocked_note(s, before)
            raise ToolError(f"{what} failed: {_first_line(exc)}{note}") from exc
        return s, value, _blocked_note(s, before)


def _blocked_note(s: Session, before: int) -> str:
    new = s.blocked[before:]
    if not new:
        return ""
    shown = ", ".join(new[:3]) + (f" and {len(new) - 3} more" if len(new) > 3 else "")
    return f"\n[blocked {len(new)} request(s) to non-allowed destinations: {shown}]"


async def _where(page: Any) -> str:
    try:
        title = await page.title()
    except Exception:  # a page mid-navigation has no title yet
        title = ""
    return f"{page.url}" + (f" (title: {title!r})" if title else "")


async def browser_open(ctx: ToolContext, url: str) -> ToolResult:
    """Open a URL in the browser (loopback, file:// inside the workspace, or allowed hosts).

    Args:
        url: the address to open, e.g. http://127.0.0.1:8000/ or file:///path/in/workspace.html.
    """
    reason = refusal(ctx, url)
    if reason is not None:
        raise ToolError(f"browser_open refused: {reason}")

    from playwright.async_api import Error as PlaywrightError

    async def go(page: Any) -> Any:
        for attempt in range(2):
            try:
                return await page.goto(url, wait_until="load")
            except PlaywrightError as exc:
                # a failed load swaps in Chromium's error page a moment later; that swap
                # must not cut short the next navigation
                with contextlib.suppress(PlaywrightError):
                    await page.wait_for_url("chrome-error://**", timeout=1000)
                if attempt or "interrupted by another navigation" not in str(exc):
                    raise
        return None

    s, response, note = await _act(ctx, f"opening {url}", go)
    status = f"HTTP {response.status}" if response is not None and response.status else "loaded"
    ok = response is None or response.status < 400
    return ToolResult(
        ok=ok,
        output=f"Opened {await _where(s.page)}: {status}.{note}",
        data={"url": s.page.url, "status": response.status if response else None},
    )


async def browser_text(ctx: ToolContext) -> ToolResult:
    """The visible text of the current page."""

    async def text(page: Any) -> str:
        return str(await page.locator("body").inner_text()) if page.url != "about:blank" else ""

    s, body, note = await _act(ctx, "reading the page text", text)
    if not body.strip():
        return ToolResult(
            ok=True,
            output=f"[{await _where(s.page)}: no visible text]{note}",
            data={"url": s.page.url, "chars": 0},
        )
    cap = output_cap(ctx)
    return ToolResult(
        ok=True,
        output=cap_text(body.strip(), cap - 300, what="the page text", head_share=0.8) + note,
        data={"url": s.page.url, "chars": len(body)},
    )


_DOM_WALK = """() => {
  const out = [];
  const walk = (el, depth) => {
    if (out.length > 2000) return;
    const style = window.getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') return;
    const tag = el.tagName.toLowerCase();
    const role = el.getAttribute('role') || tag;
    const own = Array.from(el.childNodes).filter(n => n.nodeType === 3)
      .map(n => n.textContent.trim()).join(' ').trim();
    const label = el.getAttribute('aria-label') || el.getAttribute('alt') || el.value || '';
    if (own || label || ['a','button','input','select','textarea','h1','h2','h3'].includes(tag))
      out.push('  '.repeat(depth) + '- ' + role + (label ? ' "' + label + '"' : '')
               + (own ? ': ' + own.slice(0, 200) : ''));
    for (const c of el.children) walk(c, depth + 1);
  };
  walk(document.body, 0);
  return out.join('\\n');
}"""


async def browser_snapshot(ctx: ToolContext) -> ToolResult:
    """An accessibility snapshot of the current page: roles, names and text, as an outline."""

    async def snap(page: Any) -> str:
        body = page.locator("body")
        if hasattr(body, "aria_snapshot"):
            return str(await body.aria_snapshot())
        return str(await page.evaluate(_DOM_WALK))

    s, tree, note = await _act(ctx, "taking a snapshot", snap)
    return ToolResult(
        ok=True,
        output=cap_text(
            tree or "(empty page)", output_cap(ctx) - 300, what="the snapshot", head_share=0.8
        )
        + note,
        data={"url": s.page.url},
    )


async def browser_click(ctx: ToolContext, selector: str) -> ToolResult:
    """Click an element of the current page.

    Args:
        selector: Playwright selector: CSS ('#submit'), text ('text=Save') or role
            ('role=button[name="Save"]').
    """
    s, _, note = await _act(ctx, f"clicking {selector!r}", lambda page: page.click(selector))
    return ToolResult(
        ok=True,
        output=f"Clicked {selector!r}; now at {await _where(s.page)}.{note}",
        data={"url": s.page.url},
    )


async def browser_fill(ctx: ToolContext, selector: str, text: str) -> ToolResult:
    """Type text into an input field of the current page (replacing what it held).

    Args:
        selector: Playwright selector of the input, e.g. '#name' or 'role=textbox[name="Name"]'.
        text: the text to put in the field.
    """
    s, _, note = await _act(ctx, f"filling {selector!r}", lambda page: page.fill(selector, text))
    return ToolResult(
        ok=True,
        output=f"Filled {selector!r} with {len(text)} chars.{note}",
        data={"url": s.page.url},
    )


async def browser_press(ctx: ToolContext, key: str, selector: str | None = None) -> ToolResult:
    """Press a key (e.g. 'Enter', 'Tab', 'Control+A') on the page or on one element.

    Args:
        key: key name as Playwright spells it: 'Enter', 'ArrowDown', 'a', 'Shift+Tab' ...
        selector: element to focus first; omit to press on whatever has focus.
    """

    async def press(page: Any) -> None:
        if selector:
            await page.press(selector, key)
        else:
            await page.keyboard.press(key)

    s, _, note = await _act(ctx, f"pressing {key!r}", press)
    return ToolResult(
        ok=True,
        output=f"Pressed {key!r}; now at {await _where(s.page)}.{note}",
        data={"url": s.page.url},
    )


async def browser_wait_for_text(ctx: ToolContext, text: str, timeout_s: float = 10.0) -> ToolResult:
    """Wait until the given text is visible on the current page.

    Args:
        text: text to wait for (a substring of an element's text).
        timeout_s: seconds to wait before giving up.
    """
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    if timeout_s <= 0:
        raise ToolError(f"timeout_s must be positive, got {timeout_s:g}")
    ms = _timeout_ms(ctx, timeout_s)

    async def wait(page: Any) -> bool:
        try:
            await page.get_by_text(text).first.wait_for(state="visible", timeout=ms)
        except PlaywrightTimeout:
            return False
        return True

    s, seen, note = await _act(ctx, f"waiting for {text!r}", wait)
    if not seen:
        return ToolResult(
            ok=False,
            output=f"{text!r} did not appear on {await _where(s.page)} "
            f"within {ms / 1000:g} s.{note}",
            data={"url": s.page.url},
        )
    return ToolResult(
        ok=True,
        output=f"{text!r} is visible on {await _where(s.page)}.{note}",
        data={"url": s.page.url},
    )


async def browser_screenshot(
    ctx: ToolContext, path: str = "screenshot.png", full_page: bool = False
) -> ToolResult:
    """Save a PNG screenshot of the current page into the workspace.

    Args:
        path: where to save it, relative to the workspace.
        full_page: capture the whole scrollable page, not just the viewport.
    """
    target = resolve_path(ctx, path)
    if target.is_dir():
        raise ToolError(f"{path!r} is a folder")

    async def shoot(page: Any) -> bytes:  # bytes back, written by us: race-free like write_file
        return bytes(await page.screenshot(full_page=full_page))

    s, png, note = await _act(ctx, "taking a screenshot", shoot)
    await asyncio.to_thread(_fs.write_bytes, workspace(ctx), target, png)
    rel = relative(ctx, target)
    return ToolResult(
        ok=True,
        output=f"Saved a screenshot of {await _where(s.page)} to {rel} ({len(png):,} bytes).{note}",
        data={"path": rel, "bytes": len(png)},
    )
