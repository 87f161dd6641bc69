"""File tools: read, list, search, write and edit files inside the run's workspace."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import stat
from pathlib import Path

import re2
from agentloop_tools import _fs
from agentloop_tools._sandbox import cap_text, output_cap, relative, resolve_path, workspace

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.types import ToolResult

# folders nobody wants listed or searched; named in the output when skipped
NOISE_DIRS = frozenset(
    {
        ".git",
        "__pycache__",
        "node_modules",
        ".venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)
MAX_READ_BYTES = 10_000_000  # beyond this read_file refuses: use search or a line range tool
MAX_SEARCH_FILE_BYTES = 2_000_000
MAX_LINE_CHARS = 500


def _is_binary(head: bytes) -> bool:
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
    if _is_binary(raw[:8192]):
        return ToolResult(
            ok=False,
            output=f"Error: {path!r} is a binary file ({size:,} bytes)",
            data={"path": relative(ctx, p), "bytes": size},
        )
    lines = raw.decode("utf-8", "replace").splitlines()
    total = len(lines)
    if start_line < 1:
        raise ToolError(f"start_line must be 1 or more, got {start_line}")
    last = total if end_line is None else min(end_line, total)
    if end_line is not None and end_line < start_line:
        raise ToolError(f"end_line ({end_line}) is before start_line ({start_line})")
    if start_line > max(total, 1):
        raise ToolError(f"{path!r} has {total} lines; start_line {start_line} is past the end")
    cap = output_cap(ctx)
    budget = cap - 200  # room for the footer
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
    footer = f"[{rel}: lines {start_line}-{shown_to} of {total}"
    if truncated:
        footer += (
            f"; output capped at {cap:,} chars, lines {shown_to + 1}-{last} not shown; "
            f"read on with start_line={shown_to + 1}"
        )
    if long_lines:
        footer += f"; {long_lines} over-long line(s) cut"
    footer += "]"
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


async def list_files(
    ctx: ToolContext,
    path: str = ".",
    pattern: str | None = None,
    recursive: bool = False,
    max_entries: int = 500,
) -> ToolResult:
    """List a folder of the workspace: folders end with '/', symlinks show their target.

    Args:
        path: folder to list, relative to the workspace.
        pattern: glob that names must match, e.g. '*.py' (matched against the name and the
            path relative to the workspace).
        recursive: list sub-folders too (skips .git, __pycache__, node_modules, .venv ...).
        max_entries: stop after this many entries.
    """
    root = resolve_path(ctx, path)
    if not root.is_dir():
        raise ToolError(
            f"{path!r} is not a folder" if root.exists() else f"no such folder: {path!r}"
        )
    ws = workspace(ctx)
    found = await asyncio.to_thread(_fs.walk, ws, root, recursive=recursive, skip_dirs=NOISE_DIRS)
    rows: list[str] = []
    matched = 0
    for e, kind in found.entries:
        rel = e.relative_to(ws).as_posix()
        if pattern and not (fnmatch.fnmatch(e.name, pattern) or fnmatch.fnmatch(rel, pattern)):
            continue
        matched += 1
        if len(rows) >= max_entries:
            continue
        if kind == "link":
            try:
                rows.append(f"{rel} -> {os.readlink(e)}")
            except OSError:
                rows.append(rel + " -> ?")  # gone or swapped since the listing
        else:
            rows.append(rel + "/" if kind == "dir" else rel)
    notes = []
    if matched > len(rows):
        notes.append(f"{matched - len(rows)} more entries not shown (max_entries={max_entries})")
    if found.skipped_dirs:
        notes.append("skipped folders: " + ", ".join(sorted(found.skipped_dirs)))
    if found.special:
        notes.append(f"{found.special} FIFO(s), socket(s) or device(s) not listed")
    if not rows:
        notes.insert(0, "no entries" + (f" match {pattern!r}" if pattern else ""))
    text = "\n".join(rows) + ("\n[" + "; ".join(notes) + "]" if notes else "")
    return ToolResult(
        ok=True,
        output=cap_text(text.lstrip("\n"), output_cap(ctx), what="the listing", head_share=0.9),
        data={"path": relative(ctx, root), "entries": matched},
    )


def compile_pattern(pattern: str, ignore_case: bool) -> re2._Regexp:
    """``pattern`` for RE2: linear time in the text, so no pattern can hang a search."""
    opts = re2.Options()
    opts.log_errors = False  # a bad pattern is the model's error, reported in the result
    opts.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, opts)
    except re2.error as exc:
        why = (
            exc.args[0].decode("utf-8", "replace")
            if exc.args and isinstance(exc.args[0], bytes)
            else str(exc)
        )
        raise ToolError(
            f"pattern {pattern!r} is not a valid regular expression for the "
            f"linear-time engine (RE2: no backreferences or lookaround): "
            f"{why}"
        ) from None


def _search(
    ctx: ToolContext, rx: re2._Regexp, root: Path, glob: str | None, max_results: int
) -> tuple[list[str], int, int, int]:
    ws = workspace(ctx)
    top = _fs.entry_stat(ws, root)  # an lstat: a special file is never opened
    if top is not None and not stat.S_ISDIR(top.st_mode):
        if not stat.S_ISREG(top.st_mode):  # says "'p' is a FIFO; file tools only use ..."
            _fs.check_regular(top, root.relative_to(ws).as_posix())
        files = [root]
    else:
        listing = _fs.walk(ws, root, recursive=True, skip_dirs=NOISE_DIRS)
        files = [p for p, kind in listing.entries if kind != "dir"]
    hits: list[str] = []
    total = 0
    scanned = too_big = 0
    for f in files:
        rel = f.relative_to(ws).as_posix()
        if glob and not (fnmatch.fnmatch(f.name, glob) or fnmatch.fnmatch(rel, glob)):
            continue
        try:
            real = f.resolve()
            if not real.is_relative_to(ws):
                continue  # a symlink out of the workspace is never read
            st = _fs.entry_stat(ws, real)
            if st is None or not stat.S_ISREG(st.st_mode):
                continue  # a folder, or a link to a FIFO, socket or device: never opened
            if st.st_size > MAX_SEARCH_FILE_BYTES:
                too_big += 1
                continue
            raw = _fs.read_bytes(ws, real, MAX_SEARCH_FILE_BYTES)
        except (OSError, ToolError):
            continue  # gone, special, multiply linked or swapped meanwhile: never read
        if _is_binary(raw[:8192]):
            continue
        scanned += 1
        for n, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
            if rx.search(line):
                total += 1
                if len(hits) < max_results:
                    text = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " [...]"
                    hits.append(f"{rel}:{n}: {text}")
    return hits, total, scanned, too_big


async def search(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    ignore_case: bool = False,
    max_results: int = 100,
) -> ToolResult:
    """Search workspace files for a regular expression; prints file:line: text for each match.

    Args:
        pattern: regular expression (RE2 syntax: Python's without backreferences or
            lookaround), matched against each line.
        path: file or folder to search, relative to the workspace.
        glob: only search files whose name or relative path matches this glob, e.g. '*.py'.
        ignore_case: match case-insensitively.
        max_results: stop listing after this many matches (all are still counted).
    """
    rx = compile_pattern(pattern, ignore_case)
    root = resolve_path(ctx, path)
    if not root.exists():
        raise ToolError(f"no such file or folder: {path!r}")
    hits, total, scanned, too_big = await asyncio.to_thread(
        _search, ctx, rx, root, glob, max_results
    )
    lines = list(hits)
    if total > len(hits):
        lines.append(f"[{total - len(hits)} more matches not shown (max_results={max_results})]")
    if not hits:
        lines.append(f"[no matches for {pattern!r} in {scanned} file(s)]")
    if too_big:
        lines.append(
            f"[{too_big} file(s) over {MAX_SEARCH_FILE_BYTES:,} bytes not searched; "
            f"use run with grep for those]"
        )
    return ToolResult(
        ok=True,
        output=cap_text("\n".join(lines), output_cap(ctx), what="the matches", head_share=0.9),
        data={"matches": total, "files_scanned": scanned},
    )


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
