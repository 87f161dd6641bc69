"""Secrets never reach a trace, a log line, or a tool's subprocess."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest

from agentloop import run_task
from agentloop.clients.scripted import ScriptedClient
from agentloop.commands.progress import Progress
from agentloop.config.tasks import Task
from agentloop.script import ScriptToolCall, ScriptTurn

SECRET = "s3cr3t-value-9f8e7d6c5b4a"


async def test_secret_values_are_redacted_from_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret env value in the prompt, the model's text and a tool's output is redacted."""
    monkeypatch.setenv("DEPLOY_TOKEN", SECRET)
    task = Task(
        name="leaky", prompt=f"the token is {SECRET}", system="s", tools=("run",), finish_tool=True
    )
    turns = [
        ScriptTurn(
            text=f"I see {SECRET}",
            tool_calls=(
                ScriptToolCall(
                    "run", '{"command": "echo token=$DEPLOY_TOKEN; echo ' + SECRET + '"}'
                ),
            ),
        ),
        ScriptTurn(text="done"),
    ]
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
    result = await run_task(
        task, client=ScriptedClient([ScriptTurn(text="ok")]), trace_dir=tmp_path
    )
    text = Path(result.trace_path or "").read_text()
    assert "abcdefghijklmnop0123" not in text and "sk-proj-ABCDEFGHIJKLMNOPQRST" not in text


ENCODED = {
    "verbatim": "echo $V",
    "base64": 'printf %s "prefix:$V" | base64 -w0',
    "base64_shifted": 'printf %s "ab$V" | base64 -w0',
    "hex": "printf %s \"$V\" | od -An -tx1 | tr -d ' \\n'",
    "reversed": 'printf %s "$V" | rev',
    "url_encoded": "python -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' \"$V\"",
}


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(ENCODED))
async def test_encoded_secret_is_redacted_in_trace_and_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """A secret a command prints encoded reaches neither the trace nor the progress lines."""
    value = "sk-planted/" + "Zq9+x&y=1 " + "0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", value)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "v").write_text(value)
    raw = value.encode()
    forms = [
        value,
        base64.b64encode(b"prefix:" + raw).decode()[12:40],
        base64.b64encode(b"ab" + raw).decode()[4:30],
        raw.hex(),
        value[::-1],
        quote(value, safe=""),
    ]
    task = Task(
        name="enc",
        prompt="p",
        system="s",
        tools=("run",),
        finish_tool=True,
        workspace=tmp_path / "ws",
    )
    turns = [
        ScriptTurn(
            text="x",
            tool_calls=(
                ScriptToolCall(
                    "run", orjson.dumps({"command": "V=$(cat v); " + ENCODED[form]}).decode()
                ),
            ),
        ),
        ScriptTurn(text="done"),
    ]
    result = await run_task(
        task, client=ScriptedClient(turns), trace_dir=tmp_path, events=Progress(sys.stdout)
    )
    assert "ok" == result.status
    shown = capsys.readouterr().out
    text = Path(result.trace_path or "").read_text()
    assert [] == [f for f in forms if f in text or f in shown]


async def test_url_password_is_redacted(tmp_path: Path) -> None:
    """The password inside scheme://user:PASSWORD@host is redacted whatever the variable is named."""
    url = "postgres://app:Pa55-w0rd-xyz@db.internal:5432/orders"
    task = Task(name="url", prompt=f"DATABASE_URL={url}", system="s")
    result = await run_task(
        task, client=ScriptedClient([ScriptTurn(text=f"using {url}")]), trace_dir=tmp_path
    )
    text = Path(result.trace_path or "").read_text()
    assert "Pa55-w0rd-xyz" not in text and "postgres://app:[REDACTED]@db.internal" in text


def _slow_text(redactor: object, text: str) -> str:
    """The redactor's five substitutions with no shortcut (what Redactor.text must equal)."""
    from agentloop import redact as R

    known = getattr(redactor, "_known", None)
    if known is not None:
        text = known.sub(R.REDACTED, text)
    text = R._URL_PASSWORD.sub(r"\1" + R.REDACTED + r"\3", text)
    text = R._NAMED_VALUE.sub(r"\1" + R.REDACTED, text)
    text = R._BEARER.sub(r"\1" + R.REDACTED, text)
    return R._SK.sub(R.REDACTED, text)


def test_redactor_shortcuts_change_no_result() -> None:
    """The literal pre-checks that skip a substitution skip only texts it cannot change: over
    thousands of texts built from secret-shaped pieces (case and Unicode look-alikes that (?i)
    matches included) the result equals the plain substitutions'."""
    import random

    from agentloop.redact import Redactor

    redactor = Redactor([SECRET])
    pieces = [
        SECRET, SECRET[::-1], SECRET.encode().hex(), base64.b64encode(SECRET.encode()).decode(),
        quote(SECRET, safe=""), "API_KEY", "token", "Secret", "PASSWD", "credentials", "passw",
        "\u017fecret", "\u212aEY", "cred\u0131ential", "=", ": ", "'", '"', "Bearer ", "BEARER\t",
        "sk-", "abcdefghijklmnopqrstuvwxyz0123", "://", "https://", "user:", "@", "host/x",
        " ", "\n", "word", "ünï", "x", "12345678", ";", "&",
    ]  # fmt: skip
    rng = random.Random(7)
    texts = ["", "abc", "abcdef", "gen_ai.usage.input_tokens", "postgres://u:pw123456@h/db"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(4000)]
    changed = 0
    for text in texts:
        want = _slow_text(redactor, text)
        assert want == redactor.text(text), text
        changed += want != text
    assert changed > 1000  # the corpus does exercise every substitution


def test_a_secret_inside_a_dataclass_is_redacted_as_orjson_would_write_it() -> None:
    """The record walk redacts strings inside dataclasses too (as a dict of their fields),
    instead of passing them through for the JSON encoder to print verbatim."""
    from agentloop.redact import Redactor
    from agentloop.types import ToolCall

    secret = "sk-dataclass-secret-12345"
    record = {"calls": [ToolCall(id="c1", name="run", arguments=f'{{"key": "{secret}"}}')]}
    out = orjson.dumps(Redactor([secret])(record)).decode()
    assert secret not in out
    assert '"name":"run"' in out


def test_every_place_that_hides_a_secret_shows_the_one_marker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trace records, log lines, the terminal and a tier's listing all show ``[REDACTED]``, and
    no module but agentloop/redact.py spells a marker of its own."""
    import ast

    from agentloop.config.tiers import Tier
    from agentloop.log import get_logger
    from agentloop.redact import REDACTED, redactor

    monkeypatch.setenv("DEPLOY_TOKEN", SECRET)
    record = redactor()({"type": "span_end", "attrs": {"output": f"token {SECRET}"}})
    get_logger("agentloop.test").warning("leak", detail=f"token {SECRET}")
    logged = capsys.readouterr().err
    shown = Progress(sys.stdout).redact.text(f"token {SECRET}")  # the terminal's default
    tier = Tier("t", "http://h", "m", "chat", None, options={"extra_headers": {"X-Org": SECRET}})
    assert [f"token {REDACTED}", f"token {REDACTED}", REDACTED] == [
        record["attrs"]["output"],
        shown,
        tier.summary()["options"]["extra_headers"]["X-Org"],
    ]
    assert f"token {REDACTED}" in logged and SECRET not in logged
    assert "[REDACTED]" == REDACTED
    package = Path(__file__).resolve().parents[1] / "agentloop"
    spelled = sorted(
        f"{p.relative_to(package)}:{node.lineno}"
        for p in package.rglob("*.py")
        if p.name != "redact.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value.strip() == "***" or "REDACTED" in node.value)
    )
    assert [] == spelled
