"""The transcript of a real run: in the HTML report beside the waterfall, and on the terminal."""

from __future__ import annotations

from html import escape
from pathlib import Path

import orjson
import pytest

from agentloop.trace.reader import load_trace
from tests.conftest import INSTANT_TOML, run_cli

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tasks/incident/checkout-timeouts.yaml"
REFERENCE = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"
SECRET = "sk-transcriptTEST0123456789abcdefghijkl"


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shipped task run end to end on the simulator (real tools, real HTTP), on sim-instant
    from a ``--tiers`` file: what a transcript shows does not depend on the model's speed."""
    out = tmp_path_factory.mktemp("run")
    tiers = out.parent / "tiers.toml"
    tiers.write_text(INSTANT_TOML)
    r = run_cli("run", TASK, "--tiers", tiers, "--tier", "sim-instant", "--trace-dir", out, "-q")
    assert 0 == r.returncode, r.stderr
    (trace,) = out.glob("*.jsonl")
    return trace


def _finish_summary(path: Path) -> str:
    """The answer as the trace file holds it: the finish call's summary argument."""
    for line in path.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec.get("type") == "span_end" and rec["attrs"].get("gen_ai.tool.name") == "finish":
            summary: str = orjson.loads(rec["attrs"]["arguments"])["summary"]
            return summary
    raise AssertionError("no finish call in the trace")


def test_report_html_shows_the_answer_and_tool_output(real_trace: Path, tmp_path: Path) -> None:
    """``report --html`` of a real run holds the final answer, a tool's output and the prompt,
    and every model and tool bar of the waterfall links to its message."""
    page = tmp_path / "r.html"
    r = run_cli("report", real_trace, "--html", page)
    html = page.read_text()
    trace = load_trace(real_trace)
    runbook = next(s for s in trace.of_kind("tool") if s.tool and "RUNBOOK" in s.tool.arguments)
    assert 0 == r.returncode, r.stderr
    assert escape(_finish_summary(real_trace).strip()) in html
    assert runbook.tool is not None and escape(runbook.tool.output[:200]) in html
    assert escape(trace.run.task.prompt.strip()) in html
    assert "hidden reasoning tokens" in html  # the simulator streams no summaries here
    assert "success check" in html and "3 passed" in html
    for s in [*trace.of_kind("model"), *trace.of_kind("tool")]:
        assert (f'href="#msg-{s.id}"' in html, f'id="msg-{s.id}"' in html) == (True, True), s.id


def test_report_transcript_on_the_terminal(real_trace: Path) -> None:
    """``report --transcript`` prints the conversation: prompt, calls, folded output, answer."""
    r = run_cli("report", real_trace, "--transcript")
    flat = " ".join(r.stdout.split())
    assert 0 == r.returncode, r.stderr
    assert " ".join(_finish_summary(real_trace).split())[:60] in flat
    for text in ("PAGE: checkout_5xx_rate", "read_file ok", "run_tests FAILED", "more lines"):
        assert text in flat, text
    assert "\x1b[" not in r.stdout  # not a terminal: no colour codes


def test_transcript_passes_the_redactor(tmp_path: Path) -> None:
    """A secret a trace still holds in a tool output shows in neither the page nor the terminal."""
    lines = REFERENCE.read_bytes().splitlines()
    for k, line in enumerate(lines):
        rec = orjson.loads(line)
        if rec.get("type") == "span_end" and "gen_ai.tool.name" in rec.get("attrs", {}):
            rec["attrs"]["output"] += f"\ntoken {SECRET}\n"
            lines[k] = orjson.dumps(rec)
            break
    trace = tmp_path / "leaky.jsonl"
    trace.write_bytes(b"\n".join(lines) + b"\n")
    page = tmp_path / "leaky.html"
    html_run = run_cli("report", trace, "--html", page)
    term = run_cli("report", trace, "--transcript")
    assert (0, 0) == (html_run.returncode, term.returncode)
    assert (SECRET in page.read_text(), SECRET in term.stdout) == (False, False)
    assert ("[REDACTED]" in page.read_text(), "[REDACTED]" in term.stdout) == (True, True)
