"""Live progress in the terminal: elapsed time and tokens during a model call, redacted lines."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import agentloop
from agentloop.cli import main
from agentloop.commands.progress import Progress

# one visible turn of ~200 tokens: about 3.6 s at sim-standard's 60 tok/s
LONG_TURN = f"""\
name: progress-long
prompt: Say a lot.
script:
  - text: "{("word " * 200).strip()}"
"""

PLANTED_ENV = "planted-secret-value-0123"
PLANTED_SK = "sk-plantedKey0123456789abcdef"

LEAKY = """\
name: progress-leaky
prompt: Read the two files.
workspace: ws
tools: [read_file]
script:
  - tool_calls:
      - {name: read_file, arguments: {path: env.txt}}
      - {name: read_file, arguments: {path: key.txt}}
  - text: done
"""


@pytest.mark.slow
def test_a_piped_run_prints_plain_progress_lines_during_a_long_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a TTY: during a ~3.6 s call a plain line says its elapsed time and tokens so far."""
    task = tmp_path / "task.yaml"
    task.write_text(LONG_TURN)
    assert 0 == main(["run", str(task), "--tier", "sim-standard", "--trace-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    live = [li for li in lines if li.endswith("tok so far ...")]
    done = next(i for i, li in enumerate(lines) if "tok (0 reasoning)" in li)
    assert 1 <= len(live) and all(lines.index(li) < done for li in live)
    assert live[0].startswith("step  1  model    2.")
    tokens = int(live[0].split("s  ")[1].split(" tok")[0])
    assert 60 < tokens < 200


@pytest.mark.slow
async def test_a_tty_shows_a_live_status_line_replaced_by_the_calls_summary(tmp_path: Path) -> None:
    """On a TTY the call in flight is a live rich status line; its summary line stays."""
    task = tmp_path / "task.yaml"
    task.write_text(LONG_TURN)
    screen = io.StringIO()
    handle = await agentloop.start_run(
        task, tier="sim-standard", trace_dir=tmp_path, events=Progress(screen, live=True)
    )
    await handle
    text = screen.getvalue()
    assert "tok so far ..." in text
    assert "\x1b[" in text  # drawn with terminal control codes, then cleared
    last = text.rstrip("\n").splitlines()[-1].rsplit("\x1b[2K", 1)[-1]  # after the erase
    assert last.startswith("step  1  model") and last.endswith("-> answer")


def test_a_secret_a_tool_printed_never_reaches_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted env key value and an sk- key in tool output are redacted on screen."""
    monkeypatch.setenv("AGENTLOOP_PLANTED_API_KEY", PLANTED_ENV)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "env.txt").write_text(f"{PLANTED_ENV}\n")
    (tmp_path / "ws" / "key.txt").write_text(f"{PLANTED_SK}\n")
    task = tmp_path / "task.yaml"
    task.write_text(LEAKY)
    assert 0 == main(["run", str(task), "--tier", "sim-ultrafast", "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert (False, False) == (PLANTED_ENV in out, PLANTED_SK in out)
    assert 2 == sum("read_file" in li and "[REDACTED]" in li for li in out.splitlines())
