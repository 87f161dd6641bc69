"""The sandbox rules every tool obeys, in one place: paths, subprocess env, output caps, URLs.

- Paths resolve inside the workspace: ``..``, absolute paths elsewhere and symlinks (files or
  folders, dangling or not) whose target lies outside are refused. Callers then use the resolved
  path, which contains no symlinks.
- Subprocesses get ``ctx.env`` only, minus anything named like a secret (the context already
  scrubbed it; this is the second lock).
- Text fed back to the model is capped at ``ctx.settings["output_cap"]`` characters (16,000 by
  default) and says so, and what was cut.
- The browser may reach loopback, ``file://`` inside the workspace and ``allow_hosts`` only.
- Process groups a tool starts are killed when the run ends, so nothing outlives the run.

Paths are checked when a tool call starts; a command racing to swap a symlink in between could
still win. The shell is not a jail: a command can still read any file the user can. These rules keep the
agent's *tools* honest and keep secrets out of subprocesses, not a hostile program in.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
from pathlib import Path
from urllib.parse import unquote, urlsplit

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.trace.redact import SECRET_NAME

DEFAULT_OUTPUT_CAP = 16_000
DEFAULT_TOOL_TIMEOUT_S = 120.0
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
        raise ToolError(f"{path!r} is outside the workspace ({ws}); only paths inside it "
                        f"can be used (symlinks are followed before this check)")
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
    try:
        return max(200, int(ctx.settings.get("output_cap") or DEFAULT_OUTPUT_CAP))
    except (TypeError, ValueError):
        return DEFAULT_OUTPUT_CAP


def tool_timeout(ctx: ToolContext) -> float:
    """The run's ceiling on one tool call, in seconds."""
    try:
        return float(ctx.settings.get("tool_timeout_s") or DEFAULT_TOOL_TIMEOUT_S)
    except (TypeError, ValueError):
        return DEFAULT_TOOL_TIMEOUT_S


def cap_text(text: str, cap: int, *, what: str = "output", head_share: float = 0.4) -> str:
    """``text`` cut to at most ``cap`` chars: head and tail kept, the cut stated in the middle."""
    if len(text) <= cap:
        return text
    note_len = 160
    keep = max(0, cap - note_len)
    head = int(keep * head_share)
    tail = keep - head
    cut = len(text) - head - tail
    note = (f"\n[... {cut:,} chars cut from the middle of {what} ({len(text):,} chars in all); "
            f"output capped at {cap:,} chars ...]\n")
    return text[:head] + note + (text[len(text) - tail:] if tail else "")


# -- network rule (browser) -------------------------------------------------------------------

def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    hosts = ctx.settings.get("allow_hosts") or []
    return [hosts] if isinstance(hosts, str) else [str(h) for h in hosts]


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
            return (f"{url!r} is outside the workspace; file:// URLs may only point inside "
                    f"{workspace(ctx)}")
        return None
    if scheme not in ("http", "https", "ws", "wss"):
        return f"{url!r}: the {scheme or 'missing'} scheme is not allowed"
    try:
        host = parts.hostname or ""
    except ValueError as exc:
        return f"{url!r} has an invalid host ({exc})"
    if not host:
        return f"{url!r} has no host"
    if _is_loopback(host) or _host_allowed(host, allow_hosts(ctx)):
        return None
    return (f"{host!r} is not an allowed host: the browser may reach loopback (127.0.0.0/8, "
            f"localhost, [::1]), file:// inside the workspace, and the task's allow_hosts "
            f"({', '.join(allow_hosts(ctx)) or 'none'})")


# -- processes (shell) ------------------------------------------------------------------------
#
# Each command starts a new session (so its leader's pid is both its group and session id) and
# carries a mark in its environment, which every descendant inherits. Killing a command kills
# its group, its session, its leader's descendants, and every process bearing its mark: the
# last catches a ``setsid`` child orphaned when its parent exited. Only a process that also
# wipes its environment (``env -i setsid ...``) after its parent died can slip out; the shell is
# not a jail.

MARK_VAR = "AGENTLOOP_TOOL_RUN"


def _proc_table() -> list[tuple[int, int, int, int]]:
    """(pid, ppid, pgrp, session) of every live (not zombie) process, from /proc."""
    rows: list[tuple[int, int, int, int]] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return rows
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
        except OSError:
            continue  # gone meanwhile
        fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ')'
        if len(fields) >= 4 and fields[0] != "Z":
            rows.append((int(name), int(fields[1]), int(fields[2]), int(fields[3])))
    return rows


def _marked(pids: list[int], mark: str) -> set[int]:
    """The pids among ``pids`` whose environment carries ``MARK_VAR=mark...`` (prefix match)."""
    needle = f"\0{MARK_VAR}={mark}".encode()
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in b"\0" + fh.read():
                    found.add(pid)
        except OSError:
            continue  # gone, or not ours to read
    return found


def _members(pgid: int, mark: str | None, leader_alive: bool) -> set[int]:
    """Live processes of a command: its group and session, its leader's descendants, its mark.

    Once the leader has been reaped its pid number may be reused (pid_max can be as low as
    32768): if another process now holds that number, the group and session ids no longer name
    ours, so only the mark is trusted.
    """
    table = _proc_table()
    found = set()
    reused = not leader_alive and os.path.exists(f"/proc/{pgid}")
    if not reused:
        children: dict[int, list[int]] = {}
        for pid, ppid, pgrp, session in table:
            children.setdefault(ppid, []).append(pid)
            if pgrp == pgid or session == pgid:
                found.add(pid)
        todo = [pgid] if leader_alive else []  # an orphan's parent is no longer its leader
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    if mark:
        found |= _marked([pid for pid, *_ in table], mark)
    found.discard(os.getpid())
    return found


class ProcessJail:
    """The run's commands: makes their marks, kills them, and kills what is left at run end."""

    def __init__(self) -> None:
        self.run_mark = os.urandom(6).hex()
        self.live: dict[int, str] = {}  # pgid -> the command's mark
        self._n = 0

    def new_mark(self) -> str:
        self._n += 1
        return f"{self.run_mark}.{self._n}."  # trailing dot: '.1.' never prefixes '.12.'

    def kill(self, pgid: int, mark: str | None = None, *, leader_alive: bool = False) -> None:
        """SIGKILL every process of the command led by ``pgid``."""
        members = _members(pgid, mark, leader_alive)
        if leader_alive or not os.path.exists(f"/proc/{pgid}"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def alive(self, pgid: int, mark: str | None = None) -> bool:
        """Whether any process of the command is still alive (zombies do not count)."""
        return bool(_members(pgid, mark, leader_alive=False))

    def kill_all(self) -> None:
        """Run end: kill every command still alive, and anything bearing the run's mark."""
        for pgid, mark in list(self.live.items()):
            self.kill(pgid, mark)
        table = _proc_table()
        for pid in _marked([pid for pid, *_ in table], self.run_mark + "."):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.live.clear()


async def process_jail(ctx: ToolContext) -> ProcessJail:
    """The run's :class:`ProcessJail`; the run's exit stack kills what it still holds."""

    async def factory(stack: contextlib.AsyncExitStack) -> ProcessJail:
        jail = ProcessJail()
        stack.callback(jail.kill_all)
        return jail

    result: ProcessJail = await ctx.resource("process_jail", factory)
    return result
