"""`agentloop import` of an openai-agents run: OpenInference's spans of a real openai-agents agent
(against the simulator) become an agentloop trace that report, whatif and compare read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.trace.reader import load_trace
from tests.test_export_import import agent_spans, agentloop, as_json


def openai_agents_spans(tier: str, out: Path) -> Path:
    """Run the openai-agents agent against ``agentloop sim serve`` on ``tier``; its OTLP JSON."""
    return agent_spans(
        "openai-agents", "OPENAI_AGENTS_VERSION", "openai_agents_agent.py", tier, out
    )


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The agent's spans on sim-standard and sim-ultrafast, imported as agentloop traces."""
    d = tmp_path_factory.mktemp("openai-agents")
    out = {}
    for tier in ("sim-standard", "sim-ultrafast"):
        spans = openai_agents_spans(tier, d / f"{tier}.otlp.json")
        r = agentloop("import", str(spans), "-o", str(d / f"{tier}.jsonl"), "--tier", tier)
        assert 0 == r.returncode, r.stderr
        out[tier] = d / f"{tier}.jsonl"
    yield out


@pytest.mark.external
def test_openinference_spans_become_steps(imported: dict[str, Path]) -> None:
    """Three LLM spans open three steps; the TOOL spans follow their call, tokens come along."""
    trace = load_trace(imported["sim-standard"])
    steps = [
        [c.name for c in sorted(trace.children(s.id), key=lambda c: c.t0)]
        for s in sorted(trace.of_kind("step"), key=lambda s: s.t0)
    ]
    assert [
        ["chat sim-standard", "execute_tool read_runbook"],
        ["chat sim-standard", "execute_tool check_latency", "execute_tool check_latency"],
        ["chat sim-standard"],
    ] == steps
    first = min(trace.of_kind("model"), key=lambda s: s.t0).attrs
    assert (33, 134) == (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"])
    probe = next(s for s in trace.of_kind("tool") if s.attrs["gen_ai.tool.name"] == "check_latency")
    assert "p99" in probe.attrs["output"] and "upstream" in probe.attrs["arguments"]


@pytest.mark.pacing
@pytest.mark.external
def test_whatif_of_the_import_predicts_the_real_ultrafast_run(imported: dict[str, Path]) -> None:
    """The imported standard run's prediction on sim-ultrafast against the agent re-run there."""
    whatif = as_json("whatif", str(imported["sim-standard"]), "--tier", "sim-ultrafast", "--json")
    c = as_json("compare", str(imported["sim-standard"]), str(imported["sim-ultrafast"]), "--json")
    print(
        f"predicted {whatif['speedup']:.2f}x, measured {c['measured_speedup']:.2f}x, "
        f"error {c['error_pct']:+.1f}%"
    )
    assert whatif["speedup"] > 2
    assert abs(c["error_pct"]) < 25, c
