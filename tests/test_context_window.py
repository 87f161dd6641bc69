"""The context-window budget (agentloop.loop.context_window) and the refusal of unscripted sim runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from agentloop.analysis.graph import build_graph
from agentloop.analysis.report import build_report, report_json
from agentloop.analysis.report_text import render_report
from agentloop.cli import main as cli
from agentloop.clients.scripted import ScriptedClient
from agentloop.config.tasks import Limits, Task
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.errors import TraceFileError
from agentloop.export.html import report_html
from agentloop.export.otlp import otlp_json, trace_spans
from agentloop.loop.context_window import PLACEHOLDER, Window, message_tokens, recorded_trims
from agentloop.loop.runner import Runner
from agentloop.sandbox.context import RunContext
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.trace import attrs as A
from agentloop.trace.reader import parse_lines
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import MemorySink
from agentloop.types import Message, ToolCall, ToolResult, ToolSpec


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


class BigOutput:
    """A real tool whose output is about 800 tokens, so a few of them overfill a small window."""

    spec = ToolSpec("big", "Print a lot.", {"type": "object", "properties": {}})

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(ok=True, output="line of tool output " * 200)


async def _trimmed_run(tmp_path: Path) -> list[dict[str, Any]]:
    call = ScriptTurn(text="", tool_calls=(ScriptToolCall("big", "{}"),))
    turns = [call, call, call, ScriptTurn(text="done")]
    task = Task(name="t", prompt="go", system="sys", tools=("big",), limits=Limits())
    tier = Tier(
        "small",
        "sim",
        "scripted-model",
        "chat",
        SpeedProfile(0.1, 1000, 100),
        options={"max_output_tokens": 200},
        context_window=2000,
    )
    sink = MemorySink()
    runner = Runner(
        task, ScriptedClient(turns), {"big": BigOutput()}, tier, Tracer(sink), RunContext(tmp_path)
    )
    assert "ok" == (await runner.run()).status
    return sink.records


async def test_each_trim_is_a_span_event_written_inside_its_model_span(tmp_path: Path):
    """Every trim is a context.trim event of the model span, written before that span ends."""
    records = await _trimmed_run(tmp_path)
    events = [r for r in records if r["type"] == "span_event"]
    model_ends = {r["id"]: k for k, r in enumerate(records) if r["type"] == "span_end"}
    trimmed = {
        r["id"]: r["attrs"][A.CONTEXT_TRIMMED]
        for r in records
        if r["type"] == "span_end" and r["attrs"].get(A.CONTEXT_TRIMMED)
    }
    assert [A.EVENT_CONTEXT_TRIM] * 2 == [e["name"] for e in events]
    assert trimmed == {sid: [e["attrs"] for e in events if e["span"] == sid] for sid in trimmed}
    assert all(records.index(e) < model_ends[e["span"]] for e in events)
    assert [3, 5] == [e["attrs"]["index"] for e in events]


async def test_trims_show_in_the_report(tmp_path: Path):
    """report lists each trim (step, tool, tokens) in text and in --json."""
    records = await _trimmed_run(tmp_path)
    trace = parse_lines([orjson.dumps(r) for r in records], "<memory>")
    report = build_report(build_graph(trace))
    text = render_report(report)
    assert [3, 4] == [t["step"] for t in report_json(report)["context_trims"]]
    assert 2 == text.count("big output (call ")
    assert "Context window: 2 tool output(s) dropped to fit" in text
    assert recorded_trims(trace) == list(report.trims)


def test_a_trace_without_events_and_an_event_of_no_span():
    """Old traces (no span_event lines) load with no events; an event of an unknown span is
    refused naming the line and field."""
    head = orjson.dumps({"type": "run", "schema": 1, "run_id": "r", "task": {"name": "t"}})
    start = orjson.dumps(
        {
            "type": "span_start",
            "id": "s1",
            "parent": None,
            "kind": "run",
            "name": "run",
            "t": 0,
            "after": [],
        }
    )
    stray = orjson.dumps({"type": "span_event", "span": "s9", "t": 5, "name": "x", "attrs": {}})
    assert [] == parse_lines([head, start], "old.jsonl").events
    with pytest.raises(TraceFileError) as err:
        parse_lines([head, start, stray], "t.jsonl")
    assert "t.jsonl, line 3" in err.value.message
    assert "span" in err.value.message


async def test_trims_show_on_the_html_timeline_and_as_otlp_span_events(tmp_path: Path):
    """The HTML timeline marks each trim on its model bar; OTLP export sends each as an event
    of its model span (encoded by the OpenTelemetry SDK's own OTLP encoder)."""
    records = await _trimmed_run(tmp_path)
    trace = parse_lines([orjson.dumps(r) for r in records], "<memory>")
    page = report_html(trace)
    data = otlp_json(trace_spans(trace))
    spans = [s for rs in data["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    trim_events = [e for s in spans for e in s.get("events", []) if e["name"] == "context.trim"]
    assert 2 == page.count('class="trim"')
    assert 2 == page.count("context trim: step ")
    assert [3, 5] == [
        int(a["value"]["intValue"])
        for e in trim_events
        for a in e["attributes"]
        if a["key"] == "agentloop.index"
    ]
