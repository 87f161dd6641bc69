"""Browser tools: open, read, snapshot, click, fill, press, wait and screenshot one page.

The run's browser (:mod:`tools._chromium`) starts on first use through ``ctx.resource("browser",
...)``, and the run's exit stack closes it; it reaches loopback, ``file://`` inside the workspace
and the allowed hosts only (:func:`refusal`, enforced on every request). Each tool acts on the
page under the session's lock (:func:`_act`) and reports the requests the rule blocked meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentloop_tools import _fs
from agentloop_tools._chromium import Session, first_line, refusal, session, timeout_ms
from agentloop_tools._sandbox import cap_text, output_cap, relative, resolve_path, workspace

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.types import ToolResult


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
            raise ToolError(f"{what} failed: {first_line(exc)}{note}") from exc
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
    ms = timeout_ms(ctx, timeout_s)

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
