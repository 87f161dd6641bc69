"""The reader's fast paths type every record exactly as the detailed checks do, unusual but valid
shapes still load, and a broken record sequence is refused naming file, line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from agentloop.analysis.synthetic import TraceBuilder, agent_lines, header, model_attrs
from agentloop.analysis.synthetic_runs import StepSpec, sequential_run
from agentloop.errors import TraceFileError
from agentloop.trace import _span_checks, schema
from agentloop.trace.fields import Where
from agentloop.trace.reader import Trace, load_trace, parse_lines
from agentloop.trace.schema import SpanEnd, SpanStart, end_record, end_span_record, start_record
from tests.conftest import ROOT

REF = sorted((ROOT / "traces" / "reference").glob("*.jsonl"))
Record = dict[str, Any]


def _lines(records: list[Record]) -> list[bytes]:
    return [orjson.dumps(r) for r in records]


def _detailed(lines: list[bytes]) -> dict[str, tuple[Any, ...]]:
    """Every span's fields as the detailed checks alone type them (no fast path)."""
    out: dict[str, tuple[Any, ...]] = {}
    starts: dict[str, SpanStart] = {}
    for lineno, raw in enumerate(lines[1:], start=2):
        w = Where("<detailed>", lineno)
        rec = schema.parse_record(orjson.loads(raw), w)
        if type(rec) is SpanStart:
            starts[rec.id] = rec
            out[rec.id] = (*rec[:6], None, "in_flight", {}, rec.attrs, None, None)
        elif type(rec) is SpanEnd:
            st = starts[rec.id]
            model = _span_checks.model_attrs_checked(rec.attrs, w) if st.kind == "model" else None
            tool = (
                _span_checks.tool_attrs_checked(rec.attrs, st.name, w)
                if st.kind == "tool"
                else None
            )
            out[rec.id] = (*st[:6], rec.t, rec.status, rec.attrs, st.attrs, model, tool)
    return out


def _fields(trace: Trace) -> dict[str, tuple[Any, ...]]:
    return {
        s.id: (
            s.id,
            s.parent,
            s.kind,
            s.name,
            s.t0,
            s.after,
            s.t1,
            s.status,
            s.attrs,
            s.start_attrs,
            s.model,
            s.tool,
        )
        for s in trace.spans.values()
    }


def _failed_calls() -> list[bytes]:
    """A run with retried calls, a call that failed for good, odd timings and a killed end."""
    b = sequential_run(
        [
            StepSpec(300_000_000, reasoning=40, visible=12, attempts=((50_000_000, 10_000_000),)),
            StepSpec(200_000_000, visible=1, tools=(("shell", 5_000_000), ("read", 1_000_000))),
        ],
        finish=False,
    )
    m = b.start("model", "chat demo", 10**10, "s1")
    failed = {"step": 3, "attempts": [{"t_start": 10**10, "t_end": 10**10 + 5, "error": "503"}]}
    b.end(m, 10**10 + 9, "error", **failed)
    odd = model_attrs(2 * 10**10, 10**8, 0, 3, 60.0)
    odd["timing"]["t_first_visible"] = odd["timing"]["t_hdr"] = None
    m2 = b.start("model", "chat demo", 2 * 10**10, "s1")
    b.end(m2, 3 * 10**10, **odd)
    return b.lines()


@pytest.mark.parametrize(
    "lines",
    [
        *[p.read_bytes().splitlines() for p in REF],
        list(agent_lines(30)),
        _failed_calls(),
    ],
    ids=[*[p.stem for p in REF], "agent", "failed-calls"],
)
def test_fast_paths_type_every_span_as_the_detailed_checks_do(lines: list[bytes]) -> None:
    """Each span's fields and typed views equal what the detailed checks alone give."""
    assert _detailed(lines) == _fields(parse_lines(lines, "<fast>"))


def test_unusual_but_valid_records_load() -> None:
    """A span end without status is ok, a start without attrs gets its own empty dict, tool
    attrs without data get {}, and a failed call's model span has no timing."""
    recs: list[Record] = [header()]
    recs.append(start_record("s1", None, "run", "r", 10, [], {}))
    recs.append(start_record("s2", "s1", "tool", "execute_tool x", 11, [], {}))
    recs.append({"type": "span_end", "id": "s2", "t": 12, "attrs": {"gen_ai.tool.name": "x"}})
    recs.append(start_record("s3", "s1", "model", "chat", 13, ["s2"], {}))
    recs.append(end_span_record("s3", 14, "error", {"attempts": []}))
    recs.append(end_span_record("s1", 15, "ok", {}))
    recs.append(end_record("ok", 16, reason="done"))
    trace = parse_lines(_lines(recs), "<t>")
    s1, s2, s3 = trace.spans["s1"], trace.spans["s2"], trace.spans["s3"]
    assert ("ok", {}, {}, None, "error", ["s2"]) == (
        s2.status,
        s2.tool.data if s2.tool else None,
        s1.start_attrs,
        s3.model.timing if s3.model else "untyped",
        s3.status,
        s3.after,
    )
    s1.start_attrs["x"] = 1
    assert {} == s2.start_attrs


def test_a_killed_trace_keeps_its_open_spans() -> None:
    """Blank lines are skipped, a cut last line is noted, and open spans load as in flight."""
    # the header, the run, step 1 and its model call opened, the model call ended, a tool opened
    lines = [*list(agent_lines(2))[:6], b"", b"  ", b'{"type": "span_end", "id": "s']
    trace = parse_lines(lines, "<t>")
    open_ = [(s.id, s.status, s.t1, s.attrs) for s in trace.in_flight]
    assert (
        [(sid, "in_flight", None, {}) for sid in ("s1", "s2", "s4")],
        [
            "line 9: last record cut short (run was killed mid-write)",
            "no end record: the run did not finish (killed or still running)",
        ],
        {"step": 1},
        "ok",
    ) == (open_, trace.problems, trace.spans["s4"].start_attrs, trace.spans["s3"].status)


def _refused(lines: list[bytes]) -> str:
    with pytest.raises(TraceFileError) as exc:
        parse_lines(lines, "<t>")
    return str(exc.value)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (start_record("s2", "s1", "step", "again", 3, [], {}), "field 'id': span s2 started twice"),
        (end_span_record("s2", 9, "ok", {}), "field 'id': span s2 ended twice"),
        (end_span_record("s9", 9, "ok", {}), "field 'id': span_end names span 's9', which never"),
        (end_span_record("s1", 1, "ok", {}), "field 't': span s1 ends at 1 ns, before it started"),
        ([1, 2], "field 'type': a record must be a JSON object, not array"),
        ({"id": "s3"}, "field 'type': must be a record type (string), not null"),
        ({"type": "span_end", "t": 9}, "field 'id': must be a span id (string), not null"),
        ({"type": "span_start", "id": "s3", "kind": "x", "t": 4}, "field 'name': must be a"),
    ],
    ids=[
        "started-twice",
        "ended-twice",
        "never-started",
        "ends-before-start",
        "not-an-object",
        "no-type",
        "end-no-id",
        "start-no-name",
    ],
)
def test_a_broken_record_sequence_names_line_and_field(record: Any, expected: str) -> None:
    """A record out of place or without its fields stops the load at its own line."""
    recs: list[Any] = [header()]
    recs.append(start_record("s1", None, "run", "r", 2, [], {}))
    recs.append(start_record("s2", "s1", "step", "step 1", 3, [], {}))
    recs.append(end_span_record("s2", 4, "ok", {}))
    recs.append(record)
    assert f"<t>, line 5, {expected}" == _refused(_lines(recs))[: len(f"<t>, line 5, {expected}")]


def test_an_unknown_record_type_is_skipped_with_a_note(tmp_path: Path) -> None:
    """A record type from a later agentloop is skipped and said, the rest loads."""
    b = TraceBuilder()
    run = b.start("run", "r", 1)
    b.end(run, 5)
    b.finish(6)
    lines = b.lines()
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join([*lines[:2], b'{"type": "event", "t": 3}', *lines[2:]]) + b"\n")
    trace = load_trace(path)
    assert (["line 3: unknown record type skipped"], 5) == (trace.problems, trace.spans["s1"].t1)


@pytest.mark.parametrize("schema_value", [[], {}, "1", 1.0, True, 99])
def test_a_header_with_an_odd_schema_is_refused_by_name(schema_value: Any) -> None:
    """A header whose ``schema`` is not a readable version (a list, an object: not hashable)
    is a message naming line 1 and the field, never a TypeError."""
    recs: list[Any] = [{**header(), "schema": schema_value}]
    assert _refused(_lines(recs)).startswith("<t>, line 1, field 'schema': is ")
