"""`agentloop suite --ray`: runs as Ray tasks on a real local Ray cluster the test starts."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.suite.records import load_suite
from agentloop.suite.run import run_suite
from agentloop.trace.reader import load_trace

pytestmark = pytest.mark.external

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A one-node Ray cluster on loopback (``ray start --head``), stopped after the tests."""
    temp = tempfile.mkdtemp(prefix="ray-h14-")
    port = free_port()
    # token authentication on, with a token of the test's own, for the cluster and this driver
    auth = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)
    env = dict(os.environ)
    subprocess.run(
        [
            RAY,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=180,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def test_a_suite_runs_as_ray_tasks_and_its_traces_come_back(
    tmp_path: Path, ray_head: str
) -> None:
    """Each run is a Ray task on the cluster; every trace lands in DIR/traces and loads."""
    task = tmp_path / "hello.yaml"
    task.write_text("""name: hello
prompt: Say hello.
tools: [think]
success: {command: "python -c 'pass'"}
script:
  - reasoning_tokens: 20
    text: Thinking.
    tool_calls:
      - {name: think, arguments: {thought: "greet"}}
  - text: Hello from a Ray worker.
""")
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        task.read_text()
        .replace("name: hello", "name: broken")
        .replace("tools: [think]", "tools: [think]\nsetup: ['exit 3']")
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        task.read_text()
        .replace("name: hello", "name: bad")
        .replace("python -c 'pass'", "python -c 'raise SystemExit(2)'")
    )
    suite = await run_suite(
        [task, bad, broken],
        tmp_path / "out",
        tier="sim-ultrafast",
        repeat=2,
        concurrency=4,
        ray=ray_head,
    )
    assert "ray" == suite.backend
    assert {("hello", True), ("bad", False), ("broken", False)} == {
        (r.task, r.passed) for r in suite.runs
    }
    assert 6 == len(suite.runs)
    # a run that raised on its worker is an error in words, not Ray's remote traceback
    for r in (r for r in suite.runs if r.task == "broken"):
        assert "error" == r.status
        assert "setup command failed with exit code 3" in r.reason, r.reason
        assert "Traceback" not in r.reason and "deserialize" not in r.reason, r.reason
    for r in (r for r in suite.runs if r.task != "broken"):
        trace = load_trace(tmp_path / "out" / str(r.trace))
        assert trace.complete and 2 == r.steps
        assert "Hello from a Ray worker." == trace.of_kind("model")[-1].attrs["output"]["text"]
    assert suite.runs == load_suite(tmp_path / "out").runs
