"""Live progress on a real pseudo-terminal: thinking, a running tool, colour, and NO_COLOR."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a run at sim-standard's speed, and a 1.5 s tool

# hidden reasoning first (120 tokens: ~2 s at 60 tok/s), then a tool that takes 1.5 s, which fails
TASK = """\
name: progress-terminal
prompt: Think, then run a slow command.
tools: [run]
script:
  - reasoning_tokens: 120
    tool_calls:
      - {name: run, arguments: {command: "sleep 1.5; exit 3"}}
  - text: done
"""
SGR = re.compile(rb"\x1b\[([0-9;]*)m")


def colours(shown: bytes) -> list[bytes]:
    """The colour codes drawn (SGR foreground 30-38 or 90-97; bold or dim are not colour)."""
    return [
        m.group(0)
        for m in SGR.finditer(shown)
        if any(p and (30 <= int(p) <= 38 or 90 <= int(p) <= 97) for p in m.group(1).split(b";"))
    ]


def run_on_a_terminal(tmp_path: Path, **env: str) -> bytes:
    """``agentloop run`` with stdout on a pseudo-terminal: all it drew there, raw."""
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    main, sub = pty.openpty()
    base = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    argv = [shutil.which("agentloop") or "agentloop", "run", str(task), "--tier", "sim-standard"]
    proc = subprocess.Popen(
        [*argv, "--trace-dir", str(tmp_path)],
        stdout=sub,
        stderr=subprocess.DEVNULL,
        env={**base, "TERM": "xterm", "COLUMNS": "160", **env},
    )
    os.close(sub)
    shown = b""
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 60)
            if not ready:
                raise AssertionError("agentloop run drew nothing for 60 s")
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            shown += chunk
    finally:
        assert 0 == proc.wait(timeout=60)
        os.close(main)
    return shown


def test_a_terminal_shows_thinking_a_running_tool_and_colour(tmp_path: Path) -> None:
    """Hidden reasoning reads "thinking", the slow tool has a live line with its elapsed time,
    and FAILED is drawn red."""
    shown = run_on_a_terminal(tmp_path)
    plain = SGR.sub(b"", shown).decode()
    assert "thinking (no visible token yet) ..." in plain
    assert "waiting for the first token" not in plain
    assert re.search(r"running run 1\.\d s \.\.\.", plain), plain
    assert re.search(rb"\x1b\[1;31m *FAILED", shown), shown  # bold red
    assert colours(shown)


def test_no_color_keeps_the_live_lines_without_colour(tmp_path: Path) -> None:
    """``NO_COLOR`` set: the same live lines, no colour code (bold and dim may stay)."""
    shown = run_on_a_terminal(tmp_path, NO_COLOR="1")
    assert ("running run" in shown.decode(), colours(shown)) == (True, [])
