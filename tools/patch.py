"""apply_patch: unified diffs applied in-process, all files or none, with clear hunk failures.

Parsing is lenient where models are sloppy (hunk line counts are ignored: a hunk runs to the next
``@@``/file header; blank lines inside a hunk are blank context; trailing blank context is
dropped) and strict where it matters: every context and removed line must match the file exactly
(a trailing ``\\r`` aside). A hunk that does not sit at its stated line is looked for nearby,
nearest first, after the previous hunk.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path

from agentloop_tools import _fs
from agentloop_tools._sandbox import relative, resolve_path, workspace
from agentloop_tools.files import read_utf8, write_utf8

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.types import ToolResult

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
DEV_NULL = "/dev/null"


@dataclass
class Hunk:
    """One ``@@`` block: where it claims to start and its lines as (op, text) pairs."""

    old_start: int
    header: str
    lines: list[tuple[str, str]] = field(default_factory=list)
    old_no_eol: bool = False  # "\ No newline at end of file" after an old-side line
    new_no_eol: bool = False

    @property
    def old(self) -> list[str]:
        return [t for op, t in self.lines if op in " -"]

    @property
    def new(self) -> list[str]:
        return [t for op, t in self.lines if op in " +"]


@dataclass
class FilePatch:
    """The hunks for one file; ``old``/``new`` are paths or /dev/null (create / delete)."""

    old: str
    new: str
    hunks: list[Hunk] = field(default_factory=list)


def _strip_prefix(name: str) -> str:
    name = name.split("\t")[0].strip()
    if name != DEV_NULL and len(name) > 2 and name[:2] in ("a/", "b/"):
        return name[2:]
    return name


_GIT_HEADERS = (
    "diff ",
    "index ",
    "new file mode",
    "deleted file mode",
    "similarity",
    "rename ",
    "old mode",
    "new mode",
)


def parse_patch(text: str) -> list[FilePatch]:
    """The file patches in a unified diff; raises ToolError naming the line that is wrong."""
    lines = text.splitlines()
    patches: list[FilePatch] = []
    current: FilePatch | None = None
    hunk: Hunk | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = FilePatch(_strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:]))
            patches.append(current)
            hunk = None
            i += 2
            continue
        m = _HUNK.match(line)
        if m:
            if current is None:
                raise ToolError(
                    f"patch line {i + 1}: hunk before any '--- a/file' / '+++ b/file' header"
                )
            hunk = Hunk(old_start=int(m.group(1)), header=line)
            current.hunks.append(hunk)
        else:
            hunk = _body_line(line, i, hunk, current)
        i += 1
    return _checked(patches)


def _body_line(line: str, i: int, hunk: Hunk | None, current: FilePatch | None) -> Hunk | None:
    """Line ``i`` (0-based), neither a file header nor a hunk's ``@@``: into ``hunk`` when it is
    one of its lines; the hunk the next line belongs to (None after git's extended headers)."""
    if hunk is not None and line.startswith("\\"):
        _no_eol(hunk)
    elif hunk is not None and (line == "" or line[0] in " +-"):
        hunk.lines.append((line[0], line[1:]) if line else (" ", ""))
    elif line.startswith(_GIT_HEADERS) or (hunk is None and current is None):
        return None  # git's extended headers and any preamble are not ours to check
    elif hunk is not None:  # (no hunk yet: text between a file header and its first hunk)
        raise ToolError(
            f"patch line {i + 1}: {line[:80]!r} is not part of a hunk (hunk lines "
            f"start with ' ', '+' or '-')"
        )
    return hunk


def _no_eol(hunk: Hunk) -> None:
    """A ``\\ No newline at end of file`` marks the side(s) of the hunk's last line."""
    if hunk.lines:
        op = hunk.lines[-1][0]
        if op in " -":
            hunk.old_no_eol = True
        if op in " +":
            hunk.new_no_eol = True


def _checked(patches: list[FilePatch]) -> list[FilePatch]:
    """The parsed patches, trailing blank context dropped; none, or a file without hunks, is a
    ToolError."""
    for p in patches:
        for h in p.hunks:
            while h.lines and h.lines[-1] == (" ", ""):
                h.lines.pop()
    if not patches:
        raise ToolError(
            "no file headers found: a unified diff needs '--- a/path' and "
            "'+++ b/path' lines before its '@@' hunks"
        )
    for p in patches:
        if not p.hunks:
            raise ToolError(f"the patch for {p.new if p.new != DEV_NULL else p.old} has no hunks")
    return patches


def _find(lines: list[str], want: list[str], expected: int, lowest: int) -> int | None:
    """Index where ``want`` matches ``lines`` (CR-insensitive), nearest ``expected`` first."""

    def at(pos: int) -> bool:
        return all(lines[pos + k].rstrip("\r") == w.rstrip("\r") for k, w in enumerate(want))

    top = len(lines) - len(want)
    expected = min(max(expected, lowest), max(top, lowest))
    for delta in range(0, max(top - lowest, 0) + 1):
        for pos in (expected - delta, expected + delta) if delta else (expected,):
            if lowest <= pos <= top and at(pos):
                return pos
    return None


def apply_hunks(content: str, hunks: list[Hunk], name: str) -> str:
    """``content`` with every hunk applied; ToolError says which hunk failed and why."""
    lines = content.split("\n")
    eol = content.endswith("\n")
    if eol or content == "":
        lines.pop()
    crlf = bool(lines) and lines[0].endswith("\r")
    offset = 0
    lowest = 0
    touches_end = False
    new_no_eol = False
    for n, h in enumerate(hunks, 1):
        old = h.old
        # "-l,0" means: insert after line l
        expected = (h.old_start - 1 if old else h.old_start) + offset
        pos = _find(lines, old, expected, lowest) if old else min(max(expected, lowest), len(lines))
        if pos is None:
            raise ToolError(_explain(lines, h, n, name, expected))
        new = [t + "\r" if crlf and not t.endswith("\r") else t for t in h.new]
        lines[pos : pos + len(old)] = new
        offset += len(new) - len(old)
        lowest = pos + len(new)
        if lowest == len(lines):
            touches_end, new_no_eol = True, h.new_no_eol
    if touches_end:
        eol = not new_no_eol
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if eol else "")


def _explain(lines: list[str], h: Hunk, n: int, name: str, expected: int) -> str:
    """Why hunk ``n`` failed: at the place matching most of its leading lines, the first mismatch."""
    old = [w.rstrip("\r") for w in h.old]
    have = [ln.rstrip("\r") for ln in lines]

    def prefix(pos: int) -> int:
        k = 0
        while k < len(old) and pos + k < len(have) and have[pos + k] == old[k]:
            k += 1
        return k

    best = max(range(max(len(have), 1)), key=lambda pos: (prefix(pos), -abs(pos - expected)))
    k = prefix(best)
    if k == 0:
        best = min(max(expected, 0), max(len(have) - 1, 0))
    msg = (
        f"hunk {n} ({h.header}) does not apply to {name}: its {len(old)} context/removed "
        f"line(s) were not found together anywhere after the previous hunk"
    )
    at = best + k
    if k == len(old):
        msg += (
            f". They do occur at line {best + 1}, but that is before the end of the previous "
            f"hunk: hunks must come in file order and must not overlap"
        )
    elif at < len(have):
        msg += f". At line {at + 1} the hunk expects {old[k]!r} but the file has {have[at]!r}"
    else:
        msg += (
            f". The hunk expects {old[k]!r} at line {at + 1}, past the end of the file "
            f"({len(have)} lines)"
        )
    return msg + ". Re-read the file and make the patch from its current text."


async def apply_patch(ctx: ToolContext, patch: str) -> ToolResult:
    """Apply a unified diff (as made by `diff -u` or `git diff`) to files in the workspace.

    Paths are relative to the workspace (a/ and b/ prefixes are dropped); /dev/null creates or
    deletes a file. Either every file is patched or none is.

    Args:
        patch: the unified diff text, with '--- a/path', '+++ b/path' and '@@' hunk lines.
    """
    patches = parse_patch(patch)
    writes: dict[Path, str | None] = {}  # None: delete
    report = []
    for fp in patches:
        report.append(await _stage(ctx, fp, writes))
    await asyncio.to_thread(_commit, workspace(ctx), writes)
    return ToolResult(
        ok=True,
        output="Applied the patch: " + "; ".join(report) + ".",
        data={"files": [relative(ctx, p) for p in writes]},
    )


async def _stage(ctx: ToolContext, fp: FilePatch, writes: dict[Path, str | None]) -> str:
    """One file's patch applied in memory, its outcome put in ``writes`` (the new text, or None:
    delete); the report's words for it."""
    creating, deleting = fp.old == DEV_NULL, fp.new == DEV_NULL
    src = None if creating else resolve_path(ctx, fp.old, argument="patch")
    dst = None if deleting else resolve_path(ctx, fp.new, argument="patch")
    if dst is not None and dst.is_dir():
        raise ToolError(f"cannot write {fp.new}: it is a folder")
    current = _text_before(fp, src, dst, writes)
    if current is None:
        assert src is not None
        current = await asyncio.to_thread(read_utf8, workspace(ctx), src)
    updated = apply_hunks(current, fp.hunks, fp.old if src is not None else fp.new)
    plus = sum(op == "+" for h in fp.hunks for op, _ in h.lines)
    minus = sum(op == "-" for h in fp.hunks for op, _ in h.lines)
    if deleting:
        if updated.strip():
            raise ToolError(f"the patch deletes {fp.old} but does not remove all of its lines")
        assert src is not None
        writes[src] = None
        return f"deleted {relative(ctx, src)}"
    assert dst is not None
    writes[dst] = updated
    if src is not None and src != dst:
        writes[src] = None
    verb = (
        "created"
        if creating
        else (
            "renamed " + relative(ctx, src) + " ->" if src is not None and src != dst else "patched"
        )
    )
    return (
        f"{verb} {relative(ctx, dst)} ({len(fp.hunks)} hunk"
        f"{'s' if len(fp.hunks) > 1 else ''}, +{plus} -{minus})"
    )


def _text_before(
    fp: FilePatch, src: Path | None, dst: Path | None, writes: dict[Path, str | None]
) -> str | None:
    """The text ``fp``'s hunks apply to when it is known without reading: the source as an
    earlier file of the patch left it, "" for a file the patch creates (which must not exist
    yet); None: the source as it is on disk."""
    if src is None:
        if dst is not None and dst.exists() and dst not in writes:
            raise ToolError(f"cannot create {fp.new}: it exists already")
        return ""
    if src in writes:
        current = writes[src]
        if current is None:
            raise ToolError(f"{fp.old} is deleted earlier in the same patch")
        return current
    if not src.is_file():
        raise ToolError(f"cannot patch {fp.old}: no such file")
    return None


def _commit(ws: Path, writes: dict[Path, str | None]) -> None:
    """Every staged write (in a thread): the new texts written, the deleted files unlinked."""
    for path, text in writes.items():
        if text is None:
            _fs.unlink(ws, path)
        else:
            write_utf8(ws, path, text)
