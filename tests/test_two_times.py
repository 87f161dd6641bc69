"""The run summary names two times: the agent's, and the wall time with set-up and the check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import run_cli

# a second of set-up and a second of success check around a one-turn run
TASK = """\
name: two-times
prompt: Say done.
setup: ["sleep 1"]
success: {command: "sleep 1"}
script:
  - text: done
"""


@pytest.mark.slow
def test_the_summary_names_agent_time_and_wall_time(tmp_path: Path) -> None:
    """``time agent X s`` is the run span; ``wall Y s`` adds the set-up's and the check's ~2 s."""
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    r = run_cli("run", task, "--tier", "sim-ultrafast", "--trace-dir", tmp_path)
    agent = re.search(r"^time +agent ([0-9.]+) s \(model calls, tools", r.stdout, re.M)
    wall = re.search(
        r"^ +wall +([0-9.]+) s \(with the workspace's set-up and the success", r.stdout, re.M
    )
    assert (0, True, True) == (r.returncode, agent is not None, wall is not None), (
        r.stdout + r.stderr
    )
    assert agent is not None and wall is not None
    assert float(wall.group(1)) - float(agent.group(1)) >= 2.0  # the two sleeps, outside the agent
