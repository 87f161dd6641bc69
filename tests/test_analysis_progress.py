"""A long analysis shows a live status on a terminal: reading a big trace without a cache."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from agentloop.analysis import runend, store
from agentloop.analysis.synthetic import agent_lines


def big_trace(path: Path) -> Path:
    """A trace just past the size from which the analysis runs on columns."""
    with path.open("wb") as f:
        f.writelines(line + b"\n" for line in agent_lines(4000))
    assert path.stat().st_size >= runend.COLUMNAR_BYTES
    return path


def whatif_on_a_terminal(trace: Path) -> tuple[str, dict]:
    """Run ``agentloop whatif TRACE --speedup 2 --json`` with stderr on a pseudo-terminal:
    what the terminal showed, and the JSON printed on stdout."""
    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [
            shutil.which("agentloop") or "agentloop",
            "whatif",
            str(trace),
            "--speedup",
            "2",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=sub,
        env={**os.environ, "TERM": "xterm", "COLUMNS": "160"},
    )
    os.close(sub)
    shown = b""
    out = b""
    assert proc.stdout is not None
    while True:
        ready, _, _ = select.select([main, proc.stdout], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("agentloop whatif did not finish in 60 s")
        if main in ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal closed with the process
                chunk = b""
            shown += chunk
        if proc.stdout in ready:
            chunk = proc.stdout.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                break
            out += chunk
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    os.close(main)
    return shown.decode(errors="replace"), orjson.loads(out)


@pytest.mark.skipif(sys.platform != "linux", reason="pseudo-terminals as on the CI machine")
def test_a_cold_big_trace_shows_reading_status_and_a_warm_one_does_not(tmp_path: Path):
    """First analysis of a big trace: a status line on the terminal while it is read and
    checked; the second reads the cache at once and shows none; both give the same answer."""
    trace = big_trace(tmp_path / "big.jsonl")
    shown, first = whatif_on_a_terminal(trace)
    assert "reading big.jsonl" in shown and "cached for the next question" in shown
    assert store.read_cache(trace) is not None
    shown, second = whatif_on_a_terminal(trace)
    assert "reading big.jsonl" not in shown
    assert first == second
