"""File tools that find: list a folder and search files' lines (RE2), noise folders skipped."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import stat
from pathlib import Path

import re2
from agentloop_tools import _fs
from agentloop_tools._sandbox import cap_text, output_cap, relative, resolve_path, workspace
from agentloop_tools.files import MAX_LINE_CHARS, is_binary

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
MAX_SEARCH_FILE_BYTES = 2_000_000


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
        if is_binary(raw[:8192]):
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
