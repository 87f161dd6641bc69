"""The success check is recorded as a root span of kind ``check`` after the run span: the run's
wall time outside the agent's. The reader keeps it out of the analysis, so the what-if's agent
time is the same with it or without it, and traces written before it analyse the same."""

from __future__ import annotations

from pathlib import Path

import orjson

from agentloop.analysis import build_graph, build_report
from agentloop.analysis.whatif import Scenario, whatif
from agentloop.api import run_task
from agentloop.trace.reader import load_trace, parse_lines
from tests.conftest import instant_tier
from tests.test_suite import task_file


def figures(lines: list[bytes]) -> tuple[int, int, int]:
    trace = parse_lines(lines)
    g = build_graph(trace)
    w = whatif(g, Scenario.multipliers(11))
    return build_report(g).measured_ns, w.predicted_ns, len(trace.spans)


async def test_the_check_is_a_span_outside_the_agent_time(tmp_path: Path) -> None:
    task = task_file(tmp_path, "checked", check="python -c 'import time; time.sleep(0.2)'")
    result = await run_task(task, tier=instant_tier(), trace_dir=tmp_path / "traces")
    assert result.success is True
    path = Path(str(result.trace_path))
    trace = load_trace(path)
    [check] = [s for s in trace.outside.values() if s.kind == "check"]
    assert ("check", "success check", None) == (check.kind, check.name, check.parent)
    assert check.t1 is not None and check.t1 - check.t0 >= 200_000_000
    assert check.attrs["check.passed"] is True
    run = next(s for s in trace.spans.values() if s.kind == "run")
    assert run.t1 is not None and check.t0 >= run.t1  # after the run span, not in it
    assert all(s.kind != "check" for s in trace.spans.values())
    lines = path.read_bytes().splitlines()
    without = [line for line in lines if orjson.loads(line).get("id") != check.id]
    assert len(without) == len(lines) - 2
    assert figures(lines) == figures(without)  # as a trace written before the check span
