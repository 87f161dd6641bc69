"""Secrets never reach a trace, a log line, or a tool's subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop import run_task
from agentloop.clients.scripted import ScriptedClient
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.tasks import Task

SECRET = "s3cr3t-value-9f8e7d6c5b4a"


async def test_secret_values_are_redacted_from_the_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret env value in the prompt, the model's text and a tool's output is redacted."""
    monkeypatch.setenv("DEPLOY_TOKEN", SECRET)
    task = Task(name="leaky", prompt=f"the token is {SECRET}", system="s",
                tools=("run",), finish_tool=True)
    turns = [ScriptTurn(text=f"I see {SECRET}", tool_calls=(
                 ScriptToolCall("run", '{"command": "echo token=$DEPLOY_TOKEN; echo ' + SECRET
                                + '"}'),)),
             ScriptTurn(text="done")]
    result = await run_task(task, client=ScriptedClient(turns), trace_dir=tmp_path)
    assert "ok" == result.status
    text = Path(result.trace_path or "").read_text()
    assert SECRET not in text
    assert "[REDACTED]" in text
    assert "token=\\n" in text or "token=\n" in text  # the subprocess never had the variable


async def test_authorization_headers_and_sk_keys_are_redacted(tmp_path: Path) -> None:
    """Bearer tokens and sk- keys are redacted even when no env var names them."""
    leak = "Authorization: Bearer abcdefghijklmnop0123 and sk-proj-ABCDEFGHIJKLMNOPQRST"
    task = Task(name="leaky2", prompt=leak, system="s")
    result = await run_task(task, client=ScriptedClient([ScriptTurn(text="ok")]),
                            trace_dir=tmp_path)
    text = Path(result.trace_path or "").read_text()
    assert "abcdefghijklmnop0123" not in text and "sk-proj-ABCDEFGHIJKLMNOPQRST" not in text
