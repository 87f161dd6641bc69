"""File tools against real files: read, list, search, write, edit, apply_patch."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agentloop_tools as tools
import pytest

from agentloop.sandbox.context import RunContext
from agentloop.types import ToolResult


@pytest.fixture
async def ctx(tmp_path: Path):
    """A run context over a fresh workspace folder, closed after the test."""
    ws = tmp_path / "ws"
    ws.mkdir()
    c = RunContext(workspace=ws.resolve(), settings={"output_cap": 2000})
    yield c
    await c.aclose()


async def call(ctx: RunContext, name: str, **args: Any) -> ToolResult:
    return await tools.registry()[name](ctx, args)


def put(ctx: RunContext, rel: str, text: str) -> Path:
    p = Path(ctx.workspace) / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


async def test_read_file_numbers_lines_and_ranges(ctx: RunContext) -> None:
    """read_file shows numbered lines and honours start_line/end_line."""
    put(ctx, "a.txt", "one\ntwo\nthree\nfour\n")
    r = await call(ctx, "read_file", path="a.txt", start_line=2, end_line=3)
    assert r.ok
    assert r.output == "     2\ttwo\n     3\tthree\n[a.txt: lines 2-3 of 4]"
    assert r.data == {
        "path": "a.txt",
        "start_line": 2,
        "end_line": 3,
        "total_lines": 4,
        "truncated": False,
    }


async def test_read_file_cap_says_where_to_read_on(ctx: RunContext) -> None:
    """A file longer than the cap is cut at a line, and the result says where to go on."""
    put(ctx, "big.txt", "".join(f"line number {i}\n" for i in range(1, 1001)))
    r = await call(ctx, "read_file", path="big.txt")
    assert r.ok and r.data["truncated"] is True
    assert len(r.output) <= 2000
    shown = r.data["end_line"]
    assert f"read on with start_line={shown + 1}" in r.output
    assert "output capped at 2,000 chars" in r.output
    more = await call(ctx, "read_file", path="big.txt", start_line=shown + 1)
    assert more.output.startswith(f"{shown + 1:>6}\tline number {shown + 1}\n")


async def test_read_file_failures(ctx: RunContext) -> None:
    """Missing files, folders, binaries and bad ranges give clear ok=False results."""
    (Path(ctx.workspace) / "bin.dat").write_bytes(b"\x00\x01\x02")
    put(ctx, "a.txt", "x\n")
    assert "no such file: 'nope.txt'" in (await call(ctx, "read_file", path="nope.txt")).output
    assert "is a folder" in (await call(ctx, "read_file", path=".")).output
    assert "binary file" in (await call(ctx, "read_file", path="bin.dat")).output
    r = await call(ctx, "read_file", path="a.txt", start_line=5)
    assert r.ok is False and "past the end" in r.output
    put(ctx, "empty.txt", "")
    assert (await call(ctx, "read_file", path="empty.txt")).output == "[empty.txt: empty file]"


async def test_list_files_plain_recursive_and_glob(ctx: RunContext) -> None:
    """list_files lists a folder, recurses on request skipping noise, and filters by glob."""
    put(ctx, "a.py", "")
    put(ctx, "pkg/b.py", "")
    put(ctx, "pkg/c.txt", "")
    put(ctx, ".git/HEAD", "")
    r = await call(ctx, "list_files")
    assert r.output.splitlines() == [".git/", "a.py", "pkg/"]
    r = await call(ctx, "list_files", recursive=True, pattern="*.py")
    assert r.output.splitlines() == ["a.py", "pkg/b.py", "[skipped folders: .git]"]
    r = await call(ctx, "list_files", path="pkg", max_entries=1)
    assert r.output.splitlines() == ["pkg/b.py", "[1 more entries not shown (max_entries=1)]"]


async def test_search_reports_file_line_text(ctx: RunContext) -> None:
    """search prints file:line: text for regex matches and counts what it did not show."""
    put(ctx, "a.py", "def f():\n    return 1\n")
    put(ctx, "sub/b.py", "def g():\n    return f()\n")
    put(ctx, "notes.md", "def nothing\n")
    r = await call(ctx, "search", pattern=r"def \w+\(", glob="*.py")
    assert r.output.splitlines() == ["a.py:1: def f():", "sub/b.py:1: def g():"]
    assert r.data == {"matches": 2, "files_scanned": 2}
    r = await call(ctx, "search", pattern="RETURN", ignore_case=True, max_results=1)
    assert r.output.splitlines() == [
        "a.py:2:     return 1",
        "[1 more matches not shown (max_results=1)]",
    ]
    r = await call(ctx, "search", pattern="(unclosed")
    assert r.ok is False and "not a valid regular expression" in r.output


@contextlib.contextmanager
def specials(ws: Path) -> Iterator[list[str]]:
    """A FIFO (no writer: opening it for reading would wait forever) and a listening Unix socket
    planted in the workspace and in a subfolder; a character device too where mknod is allowed."""
    (ws / "sub").mkdir(exist_ok=True)
    names = ["fifo", "sub/fifo"]
    for name in names:
        os.mkfifo(ws / name)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(ws / "sub" / "sock"))
        sock.listen()
        names.append("sub/sock")
        with contextlib.suppress(PermissionError):
            os.mknod(ws / "null", 0o666 | 0o020000, os.makedev(1, 3))  # like /dev/null
            names.append("null")
        yield names


HANG_S = 10  # about hangs, not speed: a walk of five entries takes milliseconds


async def test_search_and_list_files_skip_fifos_sockets_and_devices(ctx: RunContext) -> None:
    """search and list_files return at once with FIFOs, sockets and devices skipped, unopened."""
    ws = Path(ctx.workspace)
    put(ctx, "sub/notes.txt", "x marks the spot\n")
    with specials(ws) as names:
        async with asyncio.timeout(HANG_S):
            flat = await call(ctx, "list_files")
            deep = await call(ctx, "list_files", recursive=True)
            found = await call(ctx, "search", pattern="x")
            inside = await call(ctx, "search", pattern="x", path="sub")
            aimed = await call(ctx, "search", pattern="x", path="sub/fifo")
    top_level = len([n for n in names if "/" not in n])
    assert ["sub/", f"[{top_level} FIFO(s), socket(s) or device(s) not listed]"] == (
        flat.output.splitlines()
    )
    assert [
        "sub/",
        "sub/notes.txt",
        f"[{len(names)} FIFO(s), socket(s) or device(s) not listed]",
    ] == (deep.output.splitlines())
    assert ["sub/notes.txt:1: x marks the spot"] == found.output.splitlines()
    assert found.output == inside.output
    assert (False, "Error: 'sub/fifo' is a FIFO; file tools only use regular files") == (
        aimed.ok,
        aimed.output,
    )


async def test_write_file_creates_folders(ctx: RunContext) -> None:
    """write_file creates missing folders and reports created vs overwritten."""
    r = await call(ctx, "write_file", path="new/dir/x.txt", content="hello\nworld")
    assert r.output == "Created new/dir/x.txt (11 bytes, 2 lines)."
    assert (Path(ctx.workspace) / "new/dir/x.txt").read_text() == "hello\nworld"
    r = await call(ctx, "write_file", path="new/dir/x.txt", content="")
    assert r.ok and r.output.startswith("Overwrote") and r.data["created"] is False


async def test_edit_file_replaces_exactly_once(ctx: RunContext) -> None:
    """edit_file replaces a unique match and says on which line."""
    p = put(ctx, "m.py", "a = 1\nb = 2\nc = 3\n")
    r = await call(ctx, "edit_file", path="m.py", old_text="b = 2", new_text="b = 20")
    assert r.output == "Edited m.py: replaced 1 occurrence (first at line 2)."
    assert p.read_text() == "a = 1\nb = 20\nc = 3\n"


async def test_edit_file_absent_or_ambiguous(ctx: RunContext) -> None:
    """edit_file fails clearly when old_text is absent (0 matches) or not unique (N matches)."""
    p = put(ctx, "m.py", "x = 1\nx = 1\n    y = 2\n")
    r = await call(ctx, "edit_file", path="m.py", old_text="z = 9", new_text="z = 0")
    assert r.ok is False and "0 matches" in r.output
    r = await call(ctx, "edit_file", path="m.py", old_text="y = 2\n\n", new_text="y = 3")
    assert "check indentation and newlines" in r.output and "line 3" in r.output
    r = await call(ctx, "edit_file", path="m.py", old_text="x = 1", new_text="x = 2")
    assert r.ok is False and "2 matches (at lines 1, 2)" in r.output
    assert p.read_text() == "x = 1\nx = 1\n    y = 2\n"
    r = await call(
        ctx, "edit_file", path="m.py", old_text="x = 1", new_text="x = 2", replace_all=True
    )
    assert r.ok and r.data["replacements"] == 2
    assert p.read_text() == "x = 2\nx = 2\n    y = 2\n"


async def test_edit_file_keeps_crlf(ctx: RunContext) -> None:
    """A CRLF file edited with LF text keeps its CRLF line endings."""
    p = Path(ctx.workspace) / "w.txt"
    p.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    r = await call(ctx, "edit_file", path="w.txt", old_text="one\ntwo", new_text="1\n2")
    assert r.ok
    assert p.read_bytes() == b"1\r\n2\r\nthree\r\n"


PATCH = """\
diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,4 +1,4 @@
 def add(a, b):
-    return a - b
+    return a + b

 def sub(a, b):
@@ -8,3 +8,4 @@ def mul(a, b):
 def div(a, b):
     return a / b
+# end
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,2 @@
+fresh
+file
"""

CALC = (
    "def add(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a - b\n\n"
    "def mul(a, b):\n    return a * b\ndef div(a, b):\n    return a / b\n"
)


async def test_apply_patch_modifies_and_creates(ctx: RunContext) -> None:
    """A two-file unified diff modifies one file (hunk found despite an offset) and creates one."""
    p = put(ctx, "calc.py", CALC)
    r = await call(ctx, "apply_patch", patch=PATCH)
    assert r.ok, r.output
    assert r.output == (
        "Applied the patch: patched calc.py (2 hunks, +2 -1); created new.txt (1 hunk, +2 -0)."
    )
    assert p.read_text() == CALC.replace("return a - b", "return a + b", 1) + "# end\n"
    assert (Path(ctx.workspace) / "new.txt").read_text() == "fresh\nfile\n"


async def test_apply_patch_failure_is_atomic_and_clear(ctx: RunContext) -> None:
    """A hunk that does not match fails naming the hunk and line, and no file is changed."""
    p = put(ctx, "calc.py", CALC.replace("return a / b", "return a // b"))
    r = await call(ctx, "apply_patch", patch=PATCH)
    assert r.ok is False
    assert "hunk 2 (@@ -8,3 +8,4 @@ def mul(a, b):) does not apply to calc.py" in r.output
    assert "expects '    return a / b' but the file has '    return a // b'" in r.output
    assert p.read_text() == CALC.replace("return a / b", "return a // b")
    assert not (Path(ctx.workspace) / "new.txt").exists()


async def test_apply_patch_delete_rename_and_no_newline(ctx: RunContext) -> None:
    """Deletion, rename and '\\ No newline at end of file' markers are honoured."""
    put(ctx, "gone.txt", "bye\n")
    put(ctx, "old.txt", "keep\nlast\n")
    patch = (
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "--- a/old.txt\n+++ b/new/name.txt\n@@ -1,2 +1,2 @@\n keep\n-last\n+LAST\n"
        "\\ No newline at end of file\n"
    )
    r = await call(ctx, "apply_patch", patch=patch)
    assert r.ok, r.output
    ws = Path(ctx.workspace)
    assert not (ws / "gone.txt").exists() and not (ws / "old.txt").exists()
    assert (ws / "new/name.txt").read_text() == "keep\nLAST"


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ("just words\n", "no file headers found"),
        ("@@ -1 +1 @@\n-a\n+b\n", "hunk before any"),
        ("--- a/x.txt\n+++ b/x.txt\n", "has no hunks"),
        ("--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-a\n+b\n", "no such file"),
        ("--- /dev/null\n+++ b/x.txt\n@@ -0,0 +1 @@\n+b\n", "it exists already"),
        ("--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n+b\n*oops\n", "is not part of a hunk"),
        (
            "--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n+b\n--- /dev/null\n+++ b/sub\n"
            "@@ -0,0 +1 @@\n+c\n",
            "it is a folder",
        ),
    ],
)
async def test_apply_patch_rejects_malformed(ctx: RunContext, patch: str, needle: str) -> None:
    """Malformed or inapplicable patches fail with a message saying what is wrong."""
    put(ctx, "x.txt", "a\n")
    put(ctx, "sub/keep.txt", "")
    r = await call(ctx, "apply_patch", patch=patch)
    assert r.ok is False
    assert needle in r.output
    assert (Path(ctx.workspace) / "x.txt").read_text() == "a\n"


async def test_apply_patch_out_of_order_hunks(ctx: RunContext) -> None:
    """Hunks given out of file order fail with a message saying so."""
    put(ctx, "x.txt", "a\nb\nc\nd\n")
    patch = "--- a/x.txt\n+++ b/x.txt\n@@ -4 +4 @@\n-d\n+D\n@@ -1 +1 @@\n-a\n+A\n"
    r = await call(ctx, "apply_patch", patch=patch)
    assert r.ok is False
    assert "hunks must come in file order" in r.output
