"""File tools: read, write and edit files inside the run's workspace (find.py lists, searches)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from agentloop_tools import _fs
from agentloop_tools._sandbox import output_cap, relative, resolve_path, workspace

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.types import ToolResult

MAX_READ_BYTES = 10_000_000  # beyond this read_file refuses: use search or a line range tool
MAX_LINE_CHARS = 500


def is_binary(head: bytes) -> bool:
    """Whether a file whose first bytes are ``head`` is binary (a NUL byte among them)."""
    return b"\x00" in head


def read_utf8(ws: Path, path: Path) -> str:
    """A UTF-8 file's content with its newlines as they are (CRLF kept); blocking, race-free."""
    raw = _fs.read_bytes(ws, path, MAX_READ_BYTES)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{path.name} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
            f"it cannot be edited as text"
        ) from None


def write_utf8(ws: Path, path: Path, text: str) -> bool:
    """Write ``text`` atomically (temp file + rename); True if the file existed. Blocking."""
    return _fs.write_bytes(ws, path, text.encode("utf-8"))


def _existing_file(ctx: ToolContext, path: str) -> Path:
    p = resolve_path(ctx, path)
    if not p.exists():
        raise ToolError(f"no such file: {path!r}")
    if p.is_dir():
        raise ToolError(f"{path!r} is a folder, not a file (use list_files)")
    return p


async def read_file(
    ctx: ToolContext, path: str, start_line: int = 1, end_line: int | None = None
) -> ToolResult:
    """Read a text file from the workspace, with line numbers.

    Long files are cut at the output cap; the result says which lines were shown and where to
    read on.

    Args:
        path: file path, relative to the workspace.
        start_line: first line to show (1-based).
        end_line: last line to show (inclusive); omit to read to the end.
    """
    p = _existing_file(ctx, path)
    raw = await asyncio.to_thread(_fs.read_bytes, workspace(ctx), p, MAX_READ_BYTES)
    size = len(raw)
    if is_binary(raw[:8192]):
        return ToolResult(
            ok=False,
            output=f"Error: {path!r} is a binary file ({size:,} bytes)",
            data={"path": relative(ctx, p), "bytes": size},
        )
    lines = raw.decode("utf-8", "replace").splitlines()
    total = len(lines)
    last = _last_line(path, start_line, end_line, total)
    cap = output_cap(ctx)
    out, shown_to, long_lines = _numbered(lines, start_line, last, cap - 200)  # room: footer
    rel = relative(ctx, p)
    truncated = shown_to < last
    if total == 0:
        return ToolResult(
            ok=True,
            output=f"[{rel}: empty file]",
            data={
                "path": rel,
                "start_line": 1,
                "end_line": 0,
                "total_lines": 0,
                "truncated": False,
            },
        )
    footer = _footer(rel, start_line, shown_to, last, total, cap, long_lines)
    body = "\n".join(out)
    return ToolResult(
        ok=True,
        output=(body + "\n" if body else "") + footer,
        data={
            "path": rel,
            "start_line": start_line,
            "end_line": shown_to,
            "total_lines": total,
            "truncated": truncated,
        },
    )


def _last_line(path: str, start_line: int, end_line: int | None, total: int) -> int:
    """The last line to show of a file of ``total`` lines; a range that cannot be shown is a
    ToolError saying why."""
    if start_line < 1:
        raise ToolError(f"start_line must be 1 or more, got {start_line}")
    last = total if end_line is None else min(end_line, total)
    if end_line is not None and end_line < start_line:
        raise ToolError(f"end_line ({end_line}) is before start_line ({start_line})")
    if start_line > max(total, 1):
        raise ToolError(f"{path!r} has {total} lines; start_line {start_line} is past the end")
    return last


def _numbered(
    lines: list[str], start_line: int, last: int, budget: int
) -> tuple[list[str], int, int]:
    """Lines ``start_line``..``last`` numbered, over-long ones cut, until ``budget`` chars (at
    least one line): the rows, the last line shown, how many lines were cut."""
    out: list[str] = []
    used = 0
    shown_to = start_line - 1
    long_lines = 0
    for n in range(start_line, last + 1):
        text = lines[n - 1]
        if len(text) > MAX_LINE_CHARS * 4:
            text = text[: MAX_LINE_CHARS * 4] + f" [... line cut, {len(lines[n - 1]):,} chars]"
            long_lines += 1
        row = f"{n:>6}\t{text}"
        if used + len(row) + 1 > budget and out:
            break
        out.append(row)
        used += len(row) + 1
        shown_to = n
    return out, shown_to, long_lines


def _footer(
    rel: str, start_line: int, shown_to: int, last: int, total: int, cap: int, long_lines: int
) -> str:
    """The line under a read: which lines were shown, where to read on, how many were cut."""
    footer = f"[{rel}: lines {start_line}-{shown_to} of {total}"
    if shown_to < last:
        footer += (
            f"; output capped at {cap:,} chars, lines {shown_to + 1}-{last} not shown; "
            f"read on with start_line={shown_to + 1}"
        )
    if long_lines:
        footer += f"; {long_lines} over-long line(s) cut"
    return footer + "]"


async def write_file(ctx: ToolContext, path: str, content: str) -> ToolResult:
    """Create or overwrite a file in the workspace with the given content (folders are made).

    Args:
        path: file path, relative to the workspace.
        content: the whole new content of the file.
    """
    p = resolve_path(ctx, path)
    if p.is_dir():
        raise ToolError(f"{path!r} is a folder")
    existed = await asyncio.to_thread(write_utf8, workspace(ctx), p, content)
    n_bytes = len(content.encode("utf-8"))
    n_lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    rel = relative(ctx, p)
    return ToolResult(
        ok=True,
        output=f"{'Overwrote' if existed else 'Created'} {rel} "
        f"({n_bytes:,} bytes, {n_lines} lines).",
        data={"path": rel, "bytes": n_bytes, "created": not existed},
    )


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


async def edit_file(
    ctx: ToolContext, path: str, old_text: str, new_text: str, replace_all: bool = False
) -> ToolResult:
    """Replace an exact piece of text in a file with new text.

    The old text must occur exactly once (include surrounding lines to make it unique), or set
    replace_all to replace every occurrence.

    Args:
        path: file path, relative to the workspace.
        old_text: the exact text to replace, whitespace included.
        new_text: the replacement text.
        replace_all: replace every occurrence instead of requiring exactly one.
    """
    p = _existing_file(ctx, path)
    if not old_text:
        raise ToolError("old_text is empty; to create or overwrite a file use write_file")
    if old_text == new_text:
        raise ToolError("old_text and new_text are the same; nothing to change")
    text = await asyncio.to_thread(read_utf8, workspace(ctx), p)
    if "\r\n" in text and "\r\n" not in old_text:  # models write LF; the file keeps CRLF
        old_text = old_text.replace("\n", "\r\n")
        new_text = new_text.replace("\n", "\r\n")
    rel = relative(ctx, p)
    count = text.count(old_text)
    if count == 0:
        hint = ""
        stripped = old_text.strip()
        if stripped and stripped in text:
            hint = (
                f" (the text without its leading/trailing whitespace does occur, at line "
                f"{_line_of(text, text.index(stripped))}: check indentation and newlines)"
            )
        raise ToolError(
            f"old_text not found in {rel}: 0 matches{hint}; read the file and copy the text exactly"
        )
    if count > 1 and not replace_all:
        starts = [m.start() for m in re.finditer(re.escape(old_text), text)]
        where = ", ".join(str(_line_of(text, s)) for s in starts[:10])
        raise ToolError(
            f"old_text is not unique in {rel}: {count} matches (at lines {where}); "
            f"include more surrounding text, or set replace_all=true"
        )
    first_line = _line_of(text, text.index(old_text))
    updated = (
        text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
    )
    await asyncio.to_thread(write_utf8, workspace(ctx), p, updated)
    n = count if replace_all else 1
    return ToolResult(
        ok=True,
        output=f"Edited {rel}: replaced {n} occurrence{'s' if n > 1 else ''}"
        f" (first at line {first_line}).",
        data={"path": rel, "replacements": n, "line": first_line},
    )
