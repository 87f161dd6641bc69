"""The context-window budget (agentloop.context_window) and the refusal of unscripted sim runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.cli import main as cli
from agentloop.context_window import PLACEHOLDER, Window, message_tokens
from agentloop.types import Message, ToolCall


def _conversation() -> list[Message]:
    big = "line of tool output " * 200  # ~800 tokens each
    return [
        Message("system", "You help."),
        Message("user", "Look at the logs."),
        Message("assistant", "", (ToolCall("c1", "read_file", '{"path": "a.log"}'),)),
        Message("tool", big, tool_call_id="c1", name="read_file"),
        Message("assistant", "", (ToolCall("c2", "read_file", '{"path": "b.log"}'),)),
        Message("tool", big, tool_call_id="c2", name="read_file"),
    ]


def test_fit_trims_the_oldest_tool_output_first():
    """Over budget, the oldest tool output becomes a placeholder naming the tokens dropped."""
    msgs = _conversation()
    window = Window(window=1400, reserve=200, specs=())
    fit = window.fit(msgs)
    dropped = message_tokens(_conversation()[3]) - 4
    assert ([3], [dropped], True) == (
        [t.index for t in fit.trims],
        [t.tokens for t in fit.trims],
        fit.fits,
    )
    assert PLACEHOLDER.format(tokens=dropped) == msgs[3].content
    assert _conversation()[5] == msgs[5]


def test_fit_reports_a_request_that_cannot_fit():
    """With every tool output trimmed and the request still too big, fit says it does not fit."""
    msgs = [Message("system", "word " * 900), Message("user", "go")]
    fit = Window(window=1000, reserve=500, specs=()).fit(msgs)
    assert (False, ()) == (fit.fits, fit.trims)


def test_observed_input_tokens_scale_later_estimates():
    """A server counting more tokens than our estimate makes the next estimates larger."""
    msgs = _conversation()
    window = Window(window=100_000, reserve=100, specs=())
    first = window.fit(msgs).estimated
    window.observe(first * 2)
    assert first * 2 == window.estimate(msgs)


def test_unscripted_task_on_a_sim_tier_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """`run` refuses a task without script on the simulator, naming the alternatives (exit 2)."""
    task = tmp_path / "free.yaml"
    task.write_text("name: free\nprompt: Say hello.\ntools: [read_file]\n")
    code = cli(["run", str(task), "--tier", "sim-standard", "--trace-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert 2 == code
    assert ["plays only scripted turns", "real tier", "local-smollm2", "script:"] == [
        s
        for s in ["plays only scripted turns", "real tier", "local-smollm2", "script:"]
        if s in err
    ]
    assert [] == list(tmp_path.glob("*.jsonl"))
