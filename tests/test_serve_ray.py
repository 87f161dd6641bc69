"""`agentloop serve --ray`: runs as Ray tasks on a real local Ray cluster, followed live over
SSE from the worker, their traces served, cancelled on the worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_serve import QUICK, SLOW, Server, _cli_json, _start, _stop, client_of, serving
from test_suite_ray import ray_head  # noqa: F401 (the fixture: one head for this module)

from agentloop.trace.reader import load_trace

pytestmark = [pytest.mark.external, pytest.mark.slow]

# a two-step run whose first model call streams for ~2 s (120 hidden reasoning tokens at
# sim-standard's 60 tok/s): events must reach the client while it goes, not at its end
STEADY = """\
name: steady
prompt: Think, then finish.
tools: [think]
tier: sim-standard
script:
  - reasoning_tokens: 120
    text: Thinking on a worker.
    tool_calls:
      - {name: think, arguments: {thought: on a worker}}
  - text: Done.
    tool_calls:
      - {name: finish, arguments: {summary: ran on Ray}}
"""


# a secret-named variable the workers have and the server does not (test_serve's servers are
# started without OPENAI_API_KEY); set before the module's Ray head starts, which its workers inherit
WORKER_SECRET = "worker-only-passphrase-8d1c2e7f"


@pytest.fixture(scope="module", autouse=True)
def _worker_secret() -> Iterator[None]:
    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = WORKER_SECRET
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = saved


@pytest.fixture(scope="module")
def ray_served(
    tmp_path_factory: pytest.TempPathFactory,
    ray_head: str,  # noqa: F811
) -> Iterator[Server]:
    """One `agentloop serve --ray` (one Ray driver) for the module's tests that do not test the
    server's own end: each runs tasks of its own and finds its runs by id."""
    folder = tmp_path_factory.mktemp("ray-served")
    (folder / "tasks").mkdir()
    for name, text in (("quick", QUICK), ("slow", SLOW), ("steady", STEADY)):
        (folder / "tasks" / f"{name}.yaml").write_text(text)
    with serving(folder, "--concurrency", "2", "--ray", ray_head) as (s, out):
        yield s
    output = "".join(out)
    assert "Traceback" not in output, output
    assert 0 == s.proc.returncode, output


@pytest.fixture
async def server(ray_served: Server) -> AsyncIterator[Server]:
    async with client_of(ray_served) as s:
        yield s


async def _timed(s: Server, run_id: str) -> list[tuple[float, str, str, dict[str, Any]]]:
    """(arrival time, id, name, data) of each event of the run's stream."""
    out = []
    async for event_id, name, data in s.sse(run_id):
        if name:
            out.append((time.monotonic(), event_id, name, data))
    return out


async def test_a_run_on_a_worker_streams_live_and_its_trace_is_served(server: Server) -> None:
    """The run's events come from the worker while it runs (the model's progress seconds before
    run_end, the run listed running meanwhile), with the same ids and Last-Event-ID resume as a
    local run; its trace is in the server's folder and report and what-if read it."""
    run_id = await server.submit({"task": "tasks/steady.yaml"})
    seen: list[tuple[float, str, str, dict[str, Any]]] = []
    status_while = None
    async for event_id, name, data in server.sse(run_id):
        if not name:
            continue
        seen.append((time.monotonic(), event_id, name, data))
        if name == "model_progress" and status_while is None:
            status_while = (await server.status(run_id))["status"]
    kinds = [name for _, _, name, _ in seen]
    assert ("run_start", "run_end") == (kinds[0], kinds[-1])
    assert {"model_start", "model_progress", "model_end", "tool_start", "tool_end"} <= set(kinds)
    assert "running" == status_while
    first_progress = next(t for t, _, name, _ in seen if name == "model_progress")
    assert seen[-1][0] - first_progress > 1.0, "events arrived in one burst at the end"
    assert [str(i) for i in range(len(seen))] == [i for _, i, _, _ in seen]
    assert {(run_id, run_id)} == {(d["id"], d["run_id"]) for _, _, _, d in seen}
    assert "ok" == seen[-1][3]["data"]["status"]

    status = await server.status(run_id)
    assert ("ok", 2) == (status["status"], status["steps"])
    trace_file = server.root / str(status["trace"])
    assert trace_file.parent == server.root / "traces"
    trace = load_trace(trace_file)
    assert trace.complete
    assert run_id == orjson.loads(trace_file.read_text().splitlines()[0])["run_id"]
    served = (await server.client.get(f"/v1/runs/{run_id}/trace")).text
    assert trace_file.read_text() == served
    assert "Thinking on a worker." in served
    report = (await server.client.get(f"/v1/runs/{run_id}/report")).json()
    assert await _cli_json("report", str(trace_file)) == report
    whatif = await server.client.get(f"/v1/runs/{run_id}/whatif", params={"tier": "sim-fast"})
    assert 200 == whatif.status_code, whatif.text

    # a reconnect with Last-Event-ID gets the rest, numbered as before
    rest = [
        (i, name) async for i, name, _ in server.sse(run_id, headers={"Last-Event-ID": "3"}) if name
    ]
    assert [(i, name) for _, i, name, _ in seen[4:]] == rest


async def test_a_cancel_reaches_the_worker_and_the_trace_comes_back(server: Server) -> None:
    """DELETE while the worker's model call streams: the worker's run is cancelled (its trace
    closed cancelled and relayed to the server, run_end cancelled in the stream), and a run
    beside it on the cluster runs on to ok."""
    slow = await server.submit({"task": "tasks/slow.yaml"})
    async with contextlib.aclosing(server.events(slow)) as events:
        async for name, _ in events:
            if name == "model_progress":
                break
    quick = await server.submit({"task": "tasks/quick.yaml"})
    t0 = time.monotonic()
    r = await server.client.delete(f"/v1/runs/{slow}")
    cancel_s = time.monotonic() - t0
    assert (200, "cancelled") == (r.status_code, r.json()["status"]), r.text
    assert cancel_s < 10, cancel_s
    records = [orjson.loads(x) for x in (server.root / r.json()["trace"]).read_text().splitlines()]
    assert ("end", "cancelled") == (records[-1]["type"], records[-1]["status"])
    assert load_trace(server.root / r.json()["trace"]).complete
    events_after = [(name, data) async for name, data in server.events(slow)]
    assert ("run_end", "cancelled") == (events_after[-1][0], events_after[-1][1]["data"]["status"])
    assert "model_progress" in [name for name, _ in events_after]

    ends = [e async for e in server.events(quick)]
    assert "ok" == ends[-1][1]["data"]["status"]
    assert 200 == (await server.client.get(f"/v1/runs/{slow}/report")).status_code


async def test_sigterm_cancels_a_run_on_a_worker_and_closes_its_trace(
    tmp_path: Path,
    ray_head: str,  # noqa: F811
) -> None:
    """SIGTERM with a run in flight on the cluster: the worker's run is cancelled, its trace
    ends cancelled on the server, and the server exits 0."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "slow.yaml").write_text(SLOW)
    s = _start(tmp_path, "--ray", ray_head)
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        async with contextlib.aclosing(s.events(slow)) as events:
            async for name, _ in events:
                if name == "model_progress":
                    break
        trace = tmp_path / str((await s.status(slow))["trace"])
        code, output = await asyncio.to_thread(_stop, s)
    finally:
        await s.client.aclose()
    assert 0 == code, output
    assert "1 run(s) cancelled" in output, output
    assert "Traceback" not in output, output
    last = orjson.loads(trace.read_text().splitlines()[-1])
    assert ("end", "cancelled") == (last["type"], last["status"])


async def test_a_run_that_fails_on_its_worker_ends_error_naming_why(server: Server) -> None:
    """A run whose set-up fails on the worker ends `error` with the worker's error in a
    sentence (not Ray's remote traceback), and its stream still ends with run_end."""
    task = STEADY.replace("tools: [think]", "tools: [think]\nsetup: ['exit 3']")
    (server.root / "tasks" / "broken.yaml").write_text(task.replace("name: steady", "name: broken"))
    run_id = await server.submit({"task": "tasks/broken.yaml"})
    events = await server.all_events(run_id)
    assert "run_end" == events[-1][0]
    status = await server.status(run_id)
    assert "error" == status["status"]
    assert "the run failed on its Ray worker" in status["reason"], status["reason"]
    assert "setup command failed with exit code 3" in status["reason"], status["reason"]
    assert "Traceback" not in status["reason"] and "\n" not in status["reason"], status["reason"]


def _ray_runs() -> list[str]:
    """The Ray worker processes running a run of the service (Ray names them ray::FUNCTION)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line.startswith("ray::_stream_one")]


async def test_a_killed_server_takes_its_runs_on_the_cluster_with_it(
    tmp_path: Path,
    ray_head: str,  # noqa: F811
) -> None:
    """SIGKILL of the server mid-run: Ray ends the worker's run (its owner is gone), and the
    restarted server lists it interrupted with the trace relayed so far, which loads."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "slow.yaml").write_text(SLOW)
    s = _start(tmp_path, "--ray", ray_head)
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        async with contextlib.aclosing(s.events(slow)) as events:
            async for name, _ in events:
                if name == "model_progress":
                    break
        assert _ray_runs()
        s.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(s.proc.communicate, timeout=30)
    finally:
        await s.client.aclose()
    deadline = time.monotonic() + 30
    while _ray_runs():
        assert time.monotonic() < deadline, "the worker's run outlived its server"
        await asyncio.sleep(0.2)

    s = _start(tmp_path, "--ray", ray_head)
    try:
        status = await s.status(slow)
        assert "interrupted" == status["status"]
        trace = load_trace(tmp_path / str(status["trace"]))
        assert not trace.complete
        assert trace.of_kind("model")  # the relayed part: the model call that was streaming
    finally:
        await s.client.aclose()
        _stop(s)


async def test_a_workers_secret_never_reaches_the_stream_or_the_trace(server: Server) -> None:
    """A model text holding a secret of the workers' environment (one the server does not
    have, so its own redactor cannot know it) is hidden on the worker, in the events it relays
    as in its trace."""
    task = STEADY.replace("Thinking on a worker.", f"The key is {WORKER_SECRET}.")
    (server.root / "tasks" / "leaky.yaml").write_text(task.replace("name: steady", "name: leaky"))
    run_id = await server.submit({"task": "tasks/leaky.yaml"})
    events = await server.all_events(run_id)
    texts = [d["data"].get("text") for name, d in events if name == "model_end"]
    assert any(t and t.startswith("The key is ") for t in texts), texts
    assert WORKER_SECRET not in orjson.dumps(events).decode()
    assert WORKER_SECRET not in (await server.client.get(f"/v1/runs/{run_id}/trace")).text
