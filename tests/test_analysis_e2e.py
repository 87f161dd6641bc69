"""End to end: a scripted task run on two simulated tiers, and what-if predicting the faster run."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.analysis.compare import compare
from agentloop.analysis.graph import build_graph, load_quickly
from agentloop.analysis.lateness import of_trace
from agentloop.analysis.whatif import Scenario, whatif
from agentloop.api import run_task
from agentloop.config.tasks import load_task
from agentloop.config.tiers import get_tier, load_tiers
from tests.conftest import SleepTool, held_drift_s

TASK = """\
name: whatif-e2e
prompt: Check the three services, then report.
tools: [sleep]
limits: {max_steps: 8, timeout_s: 120}
script:
  - reasoning_tokens: 60
    text: Checking the first two services side by side.
    tool_calls:
      - {name: sleep, arguments: {seconds: 0.5}}
      - {name: sleep, arguments: {seconds: 0.3}}
  - reasoning_tokens: 40
    text: Now the third one.
    tool_calls:
      - {name: sleep, arguments: {seconds: 0.45}}
  - reasoning_tokens: 80
    text: One more look at the slowest one.
    tool_calls:
      - {name: sleep, arguments: {seconds: 0.4}}
  - reasoning_tokens: 30
    text: All three services answer within their budgets; nothing to change.
"""


@pytest.mark.pacing
async def test_whatif_predicts_the_ultrafast_run_within_3_percent(tmp_path: Path) -> None:
    """A run on sim-standard re-timed to sim-ultrafast predicts the real sim-ultrafast run (3%,
    plus what each run's client measured of its own lateness and what the two runs measured
    differently in the categories the what-if holds: tools, overhead, framework)."""
    (tmp_path / "task.yaml").write_text(TASK)
    task = load_task(tmp_path / "task.yaml", {"sleep"})
    traces, late_s = {}, 0.0
    for tier in ("sim-standard", "sim-ultrafast"):
        result = await run_task(
            task, tier=tier, tools={"sleep": SleepTool()}, trace_dir=tmp_path / "traces"
        )
        assert "ok" == result.status and 4 == result.steps
        trace = load_quickly(result.trace_path)
        traces[tier] = build_graph(trace)
        late_s += of_trace(trace).sum_bound_s  # what a busy machine may have added to its calls
    a, b = traces["sim-standard"], traces["sim-ultrafast"]
    ultra = get_tier(load_tiers(), "sim-ultrafast")
    w = whatif(a, Scenario.tier(ultra.name, ultra.profile))
    c = compare(a, b)
    held_s = held_drift_s(a, b)  # what the two runs measured apart where the what-if holds
    error_s = abs(w.predicted_ns - b.measured_ns) / 1e9
    assert error_s < 0.03 * b.measured_ns / 1e9 + late_s + held_s, (
        f"predicted {w.predicted_ns / 1e9:.3f} s, ran {b.measured_ns / 1e9:.3f} s, "
        f"the runs' own lateness {late_s:.3f} s, the held categories' drift {held_s:.3f} s"
    )
    assert w.speedup > 2
    assert c.prediction.predicted_ns == w.predicted_ns and not c.warnings
    assert c.error_pct == pytest.approx((w.predicted_ns - b.measured_ns) / b.measured_ns * 100)
