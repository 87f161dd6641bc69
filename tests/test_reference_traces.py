"""The reference traces shipped in traces/reference/ load, analyse and replay offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.cli import main
from agentloop.replay import replay
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT

REF = ROOT / "traces" / "reference"
STANDARD = REF / "checkout-timeouts-sim-standard.jsonl"
ULTRAFAST = REF / "checkout-timeouts-sim-ultrafast.jsonl"


@pytest.mark.parametrize("path", [STANDARD, ULTRAFAST], ids=["standard", "ultrafast"])
def test_reference_trace_is_whole(path: Path) -> None:
    """Each reference trace is complete, successful and free of problems."""
    trace = load_trace(path)
    assert (True, "ok", []) == (trace.complete, trace.end["status"], trace.problems)
    assert trace.end["success"]["passed"] is True


def test_reference_traces_compare(capsys: pytest.CaptureFixture[str]) -> None:
    """compare on the two reference runs prints the measured and predicted speedups."""
    assert 0 == main(["compare", str(STANDARD), str(ULTRAFAST)])
    out = capsys.readouterr().out
    assert "B predicted from A" in out and "prediction error" in out


@pytest.mark.slow
async def test_reference_trace_replays_offline(tmp_path: Path) -> None:
    """An offline replay of a shipped trace runs every recorded step without side effects."""
    res = await replay(STANDARD, tier="sim-ultrafast", offline=True, trace_dir=tmp_path)
    assert ("ok", len(load_trace(STANDARD).of_kind("step"))) == (res.run.status, res.run.steps)
