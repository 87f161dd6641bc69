"""A damaged or hostile trace file is refused with exit 2 naming the file, the line and the field
(by report, whatif and compare alike), and the typed schema still reads every shipped trace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentloop.analysis.graph import build_graph
from agentloop.analysis.report import build_report
from agentloop.analysis.runend import COLUMNAR_BYTES
from agentloop.analysis.synthetic import agent_lines
from agentloop.cli import main
from agentloop.replay import replay
from agentloop.trace.fields import MAX_INSTANT_NS
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT

REF = ROOT / "traces" / "reference"
STANDARD = REF / "checkout-timeouts-sim-standard.jsonl"
ULTRAFAST = REF / "checkout-timeouts-sim-ultrafast.jsonl"
Record = dict[str, Any]


def _first(records: list[Record], pred: Callable[[Record], bool]) -> int:
    return next(i for i, r in enumerate(records) if pred(r))


def _model_end(records: list[Record]) -> int:
    models = {r["id"] for r in records if r.get("type") == "span_start" and r["kind"] == "model"}
    return _first(records, lambda r: r.get("type") == "span_end" and r["id"] in models)


def _tool_end(records: list[Record]) -> int:
    tools = {r["id"] for r in records if r.get("type") == "span_start" and r["kind"] == "tool"}
    return _first(records, lambda r: r.get("type") == "span_end" and r["id"] in tools)


def _start(records: list[Record]) -> int:
    return _first(records, lambda r: r.get("type") == "span_start" and r["kind"] == "tool")


def _end(records: list[Record]) -> int:
    return _first(records, lambda r: r.get("type") == "end")


def _set(path: list[str | int], value: Any) -> Callable[[Record], None]:
    def apply(rec: Record) -> None:
        obj: Any = rec
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value

    return apply


# (case id, which record, how it is damaged, the field the error must name)
DAMAGE: list[tuple[str, Callable[[list[Record]], int], Callable[[Record], None], str]] = [
    ("start-time-string", _start, _set(["t"], "1234"), "t"),
    ("start-time-null", _start, _set(["t"], None), "t"),
    ("start-time-negative", _start, _set(["t"], -23_746_171_990), "t"),
    ("start-time-absurd", _start, _set(["t"], MAX_INSTANT_NS * 10), "t"),
    ("start-time-float", _start, _set(["t"], 1.5e9), "t"),
    ("end-time-string", _tool_end, _set(["t"], "99"), "t"),
    ("end-before-start", _tool_end, _set(["t"], 0), "t"),
    ("attrs-list", _tool_end, _set(["attrs"], ["ok"]), "attrs"),
    ("start-attrs-list", _start, _set(["attrs"], [1, 2]), "attrs"),
    ("end-attrs-empty-list", _tool_end, _set(["attrs"], []), "attrs"),
    (
        "attempt-start-null-end-earlier",
        _model_end,
        _set(["attrs", "attempts", 0, "t_end"], 0),
        "attrs.attempts[0].t_end",
    ),
    ("after-dict-item", _start, _set(["after"], [{"id": "s3"}]), "after[0]"),
    ("after-not-list", _start, _set(["after"], "s3"), "after"),
    ("parent-number", _start, _set(["parent"], 2), "parent"),
    ("id-number", _start, _set(["id"], 7), "id"),
    (
        "tokens-string",
        _model_end,
        _set(["attrs", "gen_ai.usage.output_tokens"], "233"),
        "attrs.gen_ai.usage.output_tokens",
    ),
    (
        "tokens-negative",
        _model_end,
        _set(["attrs", "gen_ai.usage.input_tokens"], -5),
        "attrs.gen_ai.usage.input_tokens",
    ),
    ("timing-list", _model_end, _set(["attrs", "timing"], [1, 2]), "attrs.timing"),
    (
        "timing-send-string",
        _model_end,
        _set(["attrs", "timing", "t_send"], "0"),
        "attrs.timing.t_send",
    ),
    (
        "timing-out-of-order",
        _model_end,
        _set(["attrs", "timing", "t_last"], 1),
        "attrs.timing.t_last",
    ),
    ("attempts-object", _model_end, _set(["attrs", "attempts"], {"t_start": 0}), "attrs.attempts"),
    (
        "attempt-wait-string",
        _model_end,
        _set(["attrs", "attempts", 0, "wait_ns"], "5"),
        "attrs.attempts[0].wait_ns",
    ),
    (
        "output-args-object",
        _model_end,
        _set(["attrs", "output", "tool_calls", 0, "arguments"], {"path": "x"}),
        "attrs.output.tool_calls[0].arguments",
    ),
    ("step-string", _model_end, _set(["attrs", "step"], "1"), "attrs.step"),
    ("tool-ok-string", _tool_end, _set(["attrs", "ok"], "yes"), "attrs.ok"),
    ("tool-queue-negative", _tool_end, _set(["attrs", "queued_ns"], -1), "attrs.queued_ns"),
    # past int64, the columns' type: was an OverflowError out of columns_of on a big trace
    ("tool-queue-past-int64", _tool_end, _set(["attrs", "queued_ns"], 2**63), "attrs.queued_ns"),
    (
        "tokens-past-int64",
        _model_end,
        _set(["attrs", "gen_ai.usage.output_tokens"], 2**63),
        "attrs.gen_ai.usage.output_tokens",
    ),
    ("step-past-int64", _model_end, _set(["attrs", "step"], -(2**63)), "attrs.step"),
    (
        "attempt-wait-past-int64",
        _model_end,
        _set(["attrs", "attempts", 0, "wait_ns"], 2**64 - 1),
        "attrs.attempts[0].wait_ns",
    ),
    ("run-end-negative", _end, _set(["t"], 0), "t"),
    ("run-end-string", _end, _set(["t"], "23746171990"), "t"),
    ("status-number", _end, _set(["status"], 1), "status"),
    (
        "profile-zero-tps",
        lambda rs: 0,
        _set(["tier", "profile", "output_tps"], 0),
        "tier.profile.output_tps",
    ),
    (
        "profile-null-latency",
        lambda rs: 0,
        _set(["tier", "profile", "base_latency_s"], None),
        "tier.profile.base_latency_s",
    ),
    ("profile-string", lambda rs: 0, _set(["tier", "profile"], "fast"), "tier.profile"),
    ("tools-not-list", lambda rs: 0, _set(["tools"], {"read_file": {}}), "tools"),
    ("task-not-object", lambda rs: 0, _set(["task"], "checkout"), "task"),
]


def damaged(
    tmp_path: Path, where: Callable[[list[Record]], int], how: Callable[[Record], None]
) -> tuple[Path, int]:
    records = [orjson.loads(line) for line in STANDARD.read_bytes().splitlines()]
    i = where(records)
    how(records[i])
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path, i + 1


@pytest.mark.parametrize(
    ("where", "how", "field"), [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE]
)
def test_a_damaged_field_is_exit_2_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: Any, how: Any, field: str
) -> None:
    """report, whatif and compare each refuse the damaged trace: exit 2, one message naming the
    file, the line and the field, and no traceback."""
    path, line = damaged(tmp_path, where, how)
    for argv in (
        ["report", str(path)],
        ["whatif", str(path), "--speedup", "2"],
        ["compare", str(ULTRAFAST), str(path)],
    ):
        code = main(argv)
        err = capsys.readouterr().err
        assert (2, f"{path}, line {line}, field '{field}'") == (
            code,
            err[err.find(str(path)) :][: len(f"{path}, line {line}, field '{field}'")],
        )
        assert "Traceback" not in err


def test_a_count_past_int64_in_a_big_trace_is_exit_2_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past the columnar size a trace is analysed on int64 columns: a count the checked reader
    let through (2**63 fits JSON and Python) was an OverflowError out of ``columns_of``."""
    lines = list(agent_lines(2_300))
    model_end = next(k for k, x in enumerate(lines) if b'"gen_ai.usage.output_tokens"' in x)
    rec = orjson.loads(lines[model_end])
    rec["attrs"]["gen_ai.usage.output_tokens"] = 2**63
    lines[model_end] = orjson.dumps(rec)
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    assert path.stat().st_size >= COLUMNAR_BYTES
    for argv in (["whatif", str(path), "--speedup", "2"], ["report", str(path), "--json"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert (2, True) == (code, "Traceback" not in err), err
        assert f"{path}, line {model_end + 1}, field 'attrs.gen_ai.usage.output_tokens'" in err


@pytest.mark.parametrize("path", [STANDARD, ULTRAFAST], ids=["standard", "ultrafast"])
def test_reference_traces_read_into_typed_values(path: Path) -> None:
    """Every span of a shipped trace gets its typed view, agreeing with the raw attributes."""
    trace = load_trace(path)
    models, tools = trace.of_kind("model"), trace.of_kind("tool")
    assert [s.attrs["gen_ai.usage.output_tokens"] for s in models] == [
        s.model.output_tokens if s.model else None for s in models
    ]
    assert [s.attrs["queued_ns"] for s in tools] == [
        s.tool.queued_ns if s.tool else None for s in tools
    ]
    profile = trace.header["tier"]["profile"]
    assert ("checkout-timeouts", profile["output_tps"]) == (
        trace.run.task.name,
        trace.run.tier.profile.output_tps if trace.run.tier.profile else None,
    )


def test_reference_trace_report_figures_hold() -> None:
    """The standard reference run still reports its recorded end-to-end time and model share."""
    report = build_report(build_graph(load_trace(STANDARD)))
    assert (23_745_589_291, 94) == (report.measured_ns, round(100 * report.model_share))


@pytest.mark.slow
async def test_replay_does_not_read_a_hostile_task_source(tmp_path: Path) -> None:
    """A header naming /etc/shadow as its task source replays from the header's task: the file
    is not loaded, so none of its contents' problems reach the user."""
    path, _ = damaged(tmp_path, lambda rs: 0, _set(["task", "source"], "/etc/shadow"))
    res = await replay(path, tier="sim-ultrafast", offline=True, trace_dir=tmp_path / "out")
    assert ("ok", "checkout-timeouts") == (
        res.run.status,
        load_trace(res.run.trace_path or "").run.task.name,
    )
