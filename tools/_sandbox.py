"""The sandbox rules every tool obeys, in one place: paths, subprocess env, output caps, URLs.

- Paths resolve inside the workspace: ``..``, absolute paths elsewhere and symlinks (files or
  folders, dangling or not) whose target lies outside are refused. Callers then use the resolved
  path, which contains no symlinks.
- Subprocesses get ``ctx.env`` only, minus anything named like a secret (the context already
  scrubbed it; this is the second lock).
- Text fed back to the model is capped at ``ctx.settings.output_cap`` characters
  (:class:`agentloop.sandbox.context.ToolSettings` owns the default) and says so, and what was cut.
- The browser may reach loopback, ``file://`` inside the workspace and ``allow_hosts`` only.
- Process groups a tool starts are killed when the run ends, so nothing outlives the run.

Paths are checked when a tool call starts; a command racing to swap a symlink in between could
still win. The shell is not a jail: a command can still read any file the user can. These rules keep the
agent's *tools* honest and keep secrets out of subprocesses, not a hostile program in.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from agentloop.errors import ToolError
from agentloop.loopback import is_loopback
from agentloop.protocols import ToolContext
from agentloop.redact import SECRET_NAME, clip

LOCAL_SCHEMES = ("about", "data", "blob")  # never touch the network or the disk


def workspace(ctx: ToolContext) -> Path:
    """The workspace folder, resolved (symlinks in its own path are fine)."""
    return Path(ctx.workspace).resolve()


def resolve_path(ctx: ToolContext, path: str, *, argument: str = "path") -> Path:
    """``path`` (relative to the workspace, or absolute inside it), resolved; refuses escapes."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError(f"argument '{argument}' must be a non-empty path")
    if "\x00" in path:
        raise ToolError(f"argument '{argument}' contains a NUL byte")
    ws = workspace(ctx)
    candidate = Path(os.path.expanduser(path)) if path.startswith("~") else Path(path)
    if not candidate.is_absolute():
        candidate = ws / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops, unreadable folders
        raise ToolError(f"cannot resolve {path!r}: {exc}") from None
    if not resolved.is_relative_to(ws):
        raise ToolError(
            f"{path!r} is outside the workspace ({ws}); only paths inside it "
            f"can be used (symlinks are followed before this check)"
        )
    return resolved


def relative(ctx: ToolContext, path: Path) -> str:
    """How a resolved path is shown to the model: relative to the workspace."""
    rel = path.relative_to(workspace(ctx)).as_posix()
    return rel if rel != "." else "."


def subprocess_env(ctx: ToolContext) -> dict[str, str]:
    """The environment a tool's subprocess gets: ``ctx.env`` minus secret-looking names."""
    return {k: v for k, v in dict(ctx.env).items() if not SECRET_NAME.search(k)}


def output_cap(ctx: ToolContext) -> int:
    """Characters of text a tool may feed back to the model."""
    return int(ctx.settings.output_cap)


def tool_timeout(ctx: ToolContext) -> float:
    """The run's ceiling on one tool call, in seconds."""
    return float(ctx.settings.tool_timeout_s)


def cap_text(text: str, cap: int, *, what: str = "output", head_share: float = 0.4) -> str:
    """``text`` cut to at most ``cap`` chars: head and tail kept, the cut stated in the middle
    (:func:`agentloop.redact.clip`, the one truncator)."""
    return clip(text, cap, what=what, head_share=head_share)


# -- network rule (browser) -------------------------------------------------------------------


def _host_allowed(host: str, allow_hosts: list[str]) -> bool:
    host = host.strip("[]").lower().rstrip(".")
    for entry in allow_hosts:
        entry = entry.strip().lower().rstrip(".")
        if entry.startswith("*."):
            if host.endswith(entry[1:]):
                return True
        elif entry and host == entry.strip("[]"):
            return True
    return False


def allow_hosts(ctx: ToolContext) -> list[str]:
    return list(ctx.settings.allow_hosts)


def url_refusal(ctx: ToolContext, url: str) -> str | None:
    """Why the browser may not load ``url`` (None when it may)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"{url!r} is not a valid URL ({exc})"
    scheme = parts.scheme.lower()
    if scheme in LOCAL_SCHEMES:
        return None
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            return f"{url!r}: file URLs must name a local path"
        try:
            resolve_path(ctx, unquote(parts.path) or "/", argument="url")
        except ToolError:
            return (
                f"{url!r} is outside the workspace; file:// URLs may only point inside "
                f"{workspace(ctx)}"
            )
        return None
    if scheme not in ("http", "https", "ws", "wss"):
        return f"{url!r}: the {scheme or 'missing'} scheme is not allowed"
    try:
        host = parts.hostname or ""
    except ValueError as exc:
        return f"{url!r} has an invalid host ({exc})"
    if not host:
        return f"{url!r} has no host"
    if is_loopback(host) or _host_allowed(host, allow_hosts(ctx)):
        return None
    return (
        f"{host!r} is not an allowed host: the browser may reach loopback (127.0.0.0/8, "
        f"localhost, [::1]), file:// inside the workspace, and the task's allow_hosts "
        f"({', '.join(allow_hosts(ctx)) or 'none'})"
    )
