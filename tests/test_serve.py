"""`agentloop serve` over real HTTP: a started server process, httpx as the client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import instant_tiers_file, run_cli

TOKEN = "svc-token-3f9a1c77e2b54d0c"
QUICK = """\
name: quick
prompt: Say hello through the think tool, then finish.
tools: [think]
tier: sim-ultrafast
script:
  - reasoning_tokens: 20
    text: Thinking first.
    tool_calls:
      - {name: think, arguments: {thought: hello}}
  - text: Done.
    tool_calls:
      - {name: finish, arguments: {summary: said hello}}
"""
# one long model call (~10 s of hidden reasoning at sim-standard's 60 tok/s): time to watch,
# queue behind and cancel
SLOW = """\
name: slow
prompt: Think for a long time, then finish.
tools: [think]
tier: sim-standard
script:
  - reasoning_tokens: 600
    text: Still thinking.
    tool_calls:
      - {name: finish, arguments: {summary: thought long}}
"""


class Server:
    """A running `agentloop serve` process and an authenticated client for it."""

    def __init__(self, proc: subprocess.Popen[str], base: str, root: Path) -> None:
        self.proc, self.base, self.root = proc, base, root
        self.client = httpx.AsyncClient(
            base_url=base, timeout=30.0, headers={"Authorization": f"Bearer {TOKEN}"}
        )

    async def submit(self, body: dict[str, Any]) -> str:
        r = await self.client.post("/v1/runs", json=body)
        assert 202 == r.status_code, r.text
        return str(r.json()["id"])

    async def events(
        self, run_id: str, headers: dict[str, str] | None = None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        async for _, name, data in self.sse(run_id, headers):
            if name:
                yield name, data

    async def sse(
        self, run_id: str, headers: dict[str, str] | None = None
    ) -> AsyncIterator[tuple[str, str, dict[str, Any]]]:
        """(id, event name, data) of each event; ("", "", {"comment": TEXT}) for a comment."""
        async with self.client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as r:
            assert 200 == r.status_code
            assert r.headers["content-type"].startswith("text/event-stream")
            event_id, name = "", None
            async for line in r.aiter_lines():
                if line.startswith(":"):
                    yield "", "", {"comment": line[1:].strip()}
                elif line.startswith("id: "):
                    event_id = line[len("id: ") :]
                elif line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: ") and name is not None:
                    yield event_id, name, orjson.loads(line[len("data: ") :])
                    event_id, name = "", None

    async def all_events(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        return [e async for e in self.events(run_id)]

    async def status(self, run_id: str) -> dict[str, Any]:
        r = await self.client.get(f"/v1/runs/{run_id}")
        assert 200 == r.status_code
        return dict(r.json())


def _start(root: Path, *args: str, token: str | None = TOKEN) -> Server:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_TOKEN", "OPENAI_API_KEY")}
    if token:
        env["AGENTLOOP_TOKEN"] = token
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentloop.cli",
            "serve",
            "--port",
            "0",
            "--tasks-dir",
            "tasks",
            "--trace-dir",
            "traces",
            *args,
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on http://" in line, line + (proc.stderr.read() if proc.stderr else "")
    base = line.split("listening on ", 1)[1].split()[0]
    return Server(proc, base, root)


def _stop(server: Server) -> tuple[int, str]:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    try:
        out, err = server.proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        out, err = server.proc.communicate()
    return server.proc.returncode, out + err


def _folder(path: Path) -> Path:
    """A server's folder: its tasks (quick, slow, unscripted) and a task outside them."""
    (path / "tasks").mkdir()
    (path / "tasks" / "quick.yaml").write_text(QUICK)
    (path / "tasks" / "slow.yaml").write_text(SLOW)
    (path / "tasks" / "unscripted.yaml").write_text(
        "name: unscripted\nprompt: Do it.\ntools: [think]\ntier: sim-fast\n"
    )
    (path / "outside.yaml").write_text(QUICK)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A folder for a test that starts a server of its own (its own flags, its own life)."""
    return _folder(tmp_path)


@contextlib.contextmanager
def serving(
    root: Path, *args: str, token: str | None = TOKEN
) -> Iterator[tuple[Server, list[str]]]:
    """A server (:func:`_start`) to share between tests, and its output: drained as it comes (a
    pipe left full would stall it), whole once the server has stopped at the block's end."""
    s = _start(root, *args, token=token)
    output: list[str] = []
    drains = [
        threading.Thread(target=output.extend, args=(pipe,), daemon=True)
        for pipe in (s.proc.stdout, s.proc.stderr)
    ]
    for t in drains:
        t.start()
    try:
        yield s, output
    finally:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
        try:
            s.proc.wait(30)
        finally:
            s.proc.kill()  # a no-op once it has exited
            for t in drains:
                t.join(30)
            for pipe in (s.proc.stdout, s.proc.stderr):
                if pipe is not None:
                    pipe.close()


@contextlib.asynccontextmanager
async def client_of(shared: Server) -> AsyncIterator[Server]:
    """A shared server with a client of one test's own; that test's runs have all ended when
    it is over, so the next test finds the server idle."""
    s = Server(shared.proc, shared.base, shared.root)
    s.client.headers = httpx.Headers(shared.client.headers)  # the shared one's: a token or none
    try:
        yield s
    finally:
        async with asyncio.timeout(60):  # a bound about hangs: the runs here take seconds
            while any([await _listed(s, "queued"), await _listed(s, "running")]):
                await asyncio.sleep(0.05)
        await s.client.aclose()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One `agentloop serve --concurrency 2` for the module's tests that need no flags of
    their own and do not end it: each finds its own runs by id or by a task of its own. Its
    folder's tiers.toml adds the instant tiers (conftest) to the built-in ones."""
    folder = _folder(tmp_path_factory.mktemp("served"))
    instant_tiers_file(folder)
    with serving(folder, "--concurrency", "2") as (s, out):
        yield s
    assert TOKEN not in "".join(out)  # the token is never printed or logged


@pytest.fixture
async def server(served: Server) -> AsyncIterator[Server]:
    async with client_of(served) as s:
        yield s


async def _listed(server: Server, status: str | None = None, task: str | None = None) -> list[str]:
    """The ids of the server's runs (newest first), of one status or task if given."""
    query = {k: v for k, v in (("status", status), ("task", task)) if v is not None}
    r = await server.client.get("/v1/runs", params=query)
    assert 200 == r.status_code, r.text
    return [str(run["id"]) for run in r.json()["runs"]]


async def _cli_json(*args: str) -> Any:
    """What `agentloop ARGS --json` prints (in-process, off the event loop's thread)."""
    out = await asyncio.to_thread(run_cli, *args, "--json")
    assert 0 == out.returncode, out.stderr
    return orjson.loads(out.stdout)


@pytest.mark.slow
async def test_requests_without_the_token_get_401(server: Server) -> None:
    """Without the bearer token, or with a wrong one, every route answers 401 with a JSON error."""
    async with httpx.AsyncClient(base_url=server.base) as anon:
        assert 401 == (await anon.get("/v1/runs")).status_code
        wrong = await anon.post(
            "/v1/runs", json={"task": "quick"}, headers={"Authorization": "Bearer nope"}
        )
        assert 401 == wrong.status_code
        assert "bearer token" in wrong.json()["error"]["message"]
    assert 200 == (await server.client.get("/v1/runs")).status_code


@pytest.mark.slow
async def test_a_run_streams_its_events_then_serves_trace_report_and_whatif(
    server: Server,
) -> None:
    """A submitted run streams run_start .. run_end over SSE, then its trace, report and
    what-if are the ones the CLI computes from the same trace file."""
    root = server.root
    (root / "tasks" / "streamed.yaml").write_text(QUICK.replace("name: quick", "name: streamed"))
    run_id = await server.submit({"task": "tasks/streamed.yaml"})
    events = await server.all_events(run_id)
    kinds = [k for k, _ in events]
    assert "run_start" == kinds[0]
    assert "run_end" == kinds[-1]
    assert {"step_start", "model_start", "model_end", "tool_start", "tool_end"} <= set(kinds)
    assert "ok" == events[-1][1]["data"]["status"]
    # one id per run: the submitted id is the runner's, in every event and in the trace
    assert run_id == (await server.status(run_id))["run_id"]
    assert {(run_id, run_id)} == {(e["id"], e["run_id"]) for _, e in events}

    status = await server.status(run_id)
    assert ("ok", 2) == (status["status"], status["steps"])
    # two times, named: the agent's (elapsed_s) and the wall time with set-up and check
    assert 0 < status["elapsed_s"] < status["wall_s"]
    trace = await server.client.get(f"/v1/runs/{run_id}/trace")
    records = [orjson.loads(line) for line in trace.text.splitlines()]
    assert ("run", "end") == (records[0]["type"], records[-1]["type"])
    assert run_id == records[0]["run_id"]

    trace_file = root / str(status["trace"])
    report = (await server.client.get(f"/v1/runs/{run_id}/report")).json()
    assert await _cli_json("report", str(trace_file)) == report
    whatif = (
        await server.client.get(f"/v1/runs/{run_id}/whatif", params={"tier": "sim-standard"})
    ).json()
    assert await _cli_json("whatif", str(trace_file), "--tier", "sim-standard") == whatif

    late = await server.all_events(run_id)  # a late subscriber gets the whole run again
    assert kinds == [k for k, _ in late]
    assert [run_id] == await _listed(server, task="streamed")  # its task's one run


@pytest.mark.slow
async def test_an_inline_task_runs(server: Server) -> None:
    """An inline task object is validated like a task file and runs."""
    import yaml

    run_id = await server.submit({"task": yaml.safe_load(QUICK), "tier": "sim-fast"})
    events = await server.all_events(run_id)
    assert ("run_end", "ok") == (events[-1][0], events[-1][1]["data"]["status"])
    assert "sim-fast" == (await server.status(run_id))["tier"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"task": "no-such-task"}, "task"),
        ({"task": "../outside.yaml"}, "task"),
        ({"task": str(Path("/etc/passwd"))}, "task"),
        ({"task": "tasks/quick.yaml", "limits": {"max_steps": 0}}, "limits.max_steps"),
        ({"task": "tasks/quick.yaml", "limits": {"max_stepz": 3}}, "limits.max_stepz"),
        ({"task": "tasks/quick.yaml", "tier": "no-such-tier"}, "tier"),
        ({"task": "tasks/missing.yaml"}, "task"),
        ({"task": {"name": "x"}}, "task.prompt"),
        ({"task": {"name": "x", "prompt": "p", "tools": ["rm_rf"]}}, "task.tools[0]"),
        ({"tier": "sim-fast"}, "task"),
        ({"task": "tasks/quick.yaml", "colour": "red"}, "colour"),
        # knowable before a run starts: refused at the door, never accepted and then "crashed"
        ({"task": "tasks/quick.yaml", "tier": "openai-standard"}, "tier"),  # key unset
        ({"task": "tasks/unscripted.yaml"}, "task.script"),  # the simulator plays scripts only
        ({"task": {"name": "x", "prompt": "p", "tier": "sim-fast"}}, "task.script"),
        # a routing is checked like the tier: its agents the task's, its tiers runnable here
        ({"task": "fleet-triage", "routing": {"nobody": "sim-fast"}}, "routing.nobody"),
        ({"task": "fleet-triage", "routing": {"main": "no-such-tier"}}, "routing.main"),
        ({"task": "fleet-triage", "routing": {"main": "openai-standard"}}, "routing.main"),
        ({"task": "tasks/quick.yaml", "routing": {"main": 3}}, "routing.main"),
    ],
)
async def test_bad_requests_get_400_naming_the_field(
    server: Server, body: dict[str, Any], field: str
) -> None:
    """An invalid run request gets 400 with a JSON error that names the field at fault."""
    before = await _listed(server)
    r = await server.client.post("/v1/runs", json=body)
    assert 400 == r.status_code, r.text
    assert field == r.json()["error"]["field"]
    assert "--" not in r.json()["error"]["message"]  # an HTTP caller is told HTTP, not CLI flags
    assert before == await _listed(server)  # nothing was written


@pytest.mark.slow
async def test_a_submission_s_routing_puts_its_agents_on_their_tiers(server: Server) -> None:
    """``routing`` in the body moves the lead to another tier while its analysts run on the
    submission's tier: both are in the trace's tiers and on its model calls (instant tiers of
    the server's folder: which tier a call went to is the subject, not its pace)."""
    run_id = await server.submit(
        {"task": "fleet-triage", "tier": "sim-instant", "routing": {"main": "sim-instant-b"}}
    )
    events = await server.all_events(run_id)
    assert "ok" == events[-1][1]["data"]["status"], events[-1]
    trace = await server.client.get(f"/v1/runs/{run_id}/trace")
    records = [orjson.loads(line) for line in trace.text.splitlines()]
    assert ["sim-instant-b", "sim-instant"] == [t["name"] for t in records[0]["tiers"]]
    called = {
        r["attrs"].get("tier")
        for r in records
        if r.get("type") == "span_end" and "tier" in r.get("attrs", {})
    }
    assert {"sim-instant-b", "sim-instant"} == called


async def test_the_door_names_what_is_missing_in_http_terms(server: Server) -> None:
    """A tier whose key variable is unset and a task the simulator cannot play are refused with
    a message that names the field, the variable and what to ask for instead."""
    r = await server.client.post(
        "/v1/runs", json={"task": "tasks/quick.yaml", "tier": "openai-standard"}
    )
    message = r.json()["error"]["message"]
    assert "OPENAI_API_KEY" in message and "'tier'" in message
    r = await server.client.post("/v1/runs", json={"task": "tasks/unscripted.yaml"})
    message = r.json()["error"]["message"]
    assert "'script'" in message and "'tier'" in message and "--tier" not in message


async def test_task_paths_are_relative_to_the_tasks_folder(server: Server) -> None:
    """`incident/x.yaml` and `quick.yaml` are paths inside --tasks-dir, as are the ones relative
    to the server's folder (`tasks/quick.yaml`); a bare name is a task of the tasks folder."""
    root = server.root
    (root / "tasks" / "incident").mkdir()
    (root / "tasks" / "incident" / "nested.yaml").write_text(QUICK.replace("quick", "nested"))
    for task, name in (
        ("incident/nested.yaml", "nested"),
        ("quick.yaml", "quick"),
        ("tasks/quick.yaml", "quick"),
        ("quick", "quick"),
    ):
        run_id = await server.submit({"task": task})
        assert name == (await server.status(run_id))["task"], task
    for outside in ("incident/../../outside.yaml", "../outside.yaml"):
        r = await server.client.post("/v1/runs", json={"task": outside})
        assert (400, "task") == (r.status_code, r.json()["error"]["field"]), outside


@pytest.mark.slow
async def test_a_shipped_task_by_name_and_limits(server: Server) -> None:
    """A shipped task is found by its name; limits in the request apply to the run."""
    run_id = await server.submit(
        {"task": "disk-full", "tier": "sim-ultrafast", "limits": {"max_steps": 1}}
    )
    events = await server.all_events(run_id)
    end = events[-1][1]["data"]
    assert ("disk-full", "budget", 1) == (
        (await server.status(run_id))["task"],
        end["status"],
        end["steps"],
    )


@pytest.mark.slow
async def test_malformed_json_and_unknown_runs(server: Server) -> None:
    """A body that is not JSON is a 400; an unknown run id is a 404 naming the id."""
    r = await server.client.post(
        "/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert 400 == r.status_code
    assert "not json" not in r.text  # the body is never echoed
    missing = await server.client.get("/v1/runs/deadbeef0000")
    assert (404, "id") == (missing.status_code, missing.json()["error"]["field"])


async def test_openapi_document(server: Server) -> None:
    """/openapi.json describes the run routes."""
    doc = (await server.client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    assert {
        "/v1/runs",
        "/v1/runs/{id}",
        "/v1/runs/{id}/events",
        "/v1/runs/{id}/trace",
        "/v1/runs/{id}/report",
        "/v1/runs/{id}/whatif",
    } <= set(doc["paths"])
    assert {"get", "post"} == set(doc["paths"]["/v1/runs"])
    assert {"/healthz", "/readyz", "/metrics"} <= set(doc["paths"])


async def _wait_for(server: Server, run_id: str, kind: str) -> dict[str, Any]:
    async with contextlib.aclosing(server.events(run_id)) as events:
        async for name, data in events:
            if name == kind:
                return data
    raise AssertionError(f"no {kind} event")


@pytest.mark.slow
async def test_queueing_at_the_limit_and_cancel(root: Path) -> None:
    """At concurrency 1 a second run waits queued; cancelling the first closes its trace as
    cancelled and lets the second run to its end."""
    s = _start(root, "--concurrency", "1")
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        await _wait_for(s, slow, "model_start")
        quick = await s.submit({"task": "tasks/quick.yaml"})
        assert "queued" == (await s.status(quick))["status"]
        assert "running" == (await s.status(slow))["status"]

        progress = await _wait_for(s, slow, "model_progress")  # tokens stream during the call
        assert progress["data"]["elapsed_s"] > 0
        r = await s.client.delete(f"/v1/runs/{slow}")
        assert ("cancelled", 200) == (r.json()["status"], r.status_code)
        records = [orjson.loads(x) for x in (root / r.json()["trace"]).read_text().splitlines()]
        assert ("end", "cancelled") == (records[-1]["type"], records[-1]["status"])

        events = await s.all_events(quick)
        assert "ok" == events[-1][1]["data"]["status"]
    finally:
        await s.client.aclose()
        _, output = _stop(s)
        assert "Traceback" not in output, output


@pytest.mark.slow
async def test_sigterm_cancels_runs_in_flight_and_closes_their_traces(root: Path) -> None:
    """SIGTERM with a run in flight: the run is cancelled, its trace ends, the server exits 0."""
    s = _start(root)
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        await _wait_for(s, slow, "model_start")
        trace = root / str((await s.status(slow))["trace"])
        s.proc.send_signal(signal.SIGTERM)
        code, output = await asyncio.to_thread(_stop, s)
    finally:
        await s.client.aclose()
    assert 0 == code, output
    assert "1 run(s) cancelled" in output
    last = orjson.loads(trace.read_text().splitlines()[-1])
    assert ("end", "cancelled") == (last["type"], last["status"])


@pytest.mark.slow
def test_no_token_refuses_a_non_loopback_address(root: Path) -> None:
    """Without AGENTLOOP_TOKEN the server will not listen beyond loopback: exit 2, no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOOP_TOKEN"}
    out = subprocess.run(
        [sys.executable, "-m", "agentloop.cli", "serve", "--host", "0.0.0.0", "--port", "0"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 2 == out.returncode
    assert "AGENTLOOP_TOKEN" in out.stderr
    assert "Traceback" not in out.stderr


async def test_events_carry_ids_and_a_stream_resumes_after_the_last_one(server: Server) -> None:
    """Each event has `id: N`, numbered from 0 without gaps; a client that reconnects with
    Last-Event-ID: K gets the events after K, the same ones a full stream has there."""
    run_id = await server.submit({"task": "tasks/quick.yaml"})
    full = [(i, k, d) async for i, k, d in server.sse(run_id) if k]
    assert [str(n) for n in range(len(full))] == [i for i, _, _ in full]
    k = len(full) // 2
    rest = [(i, n, d) async for i, n, d in server.sse(run_id, {"Last-Event-ID": str(k)}) if n]
    assert full[k + 1 :] == rest
    past = [n async for _, n, _ in server.sse(run_id, {"Last-Event-ID": "9999"}) if n]
    assert ["run_end"] == past  # every stream ends with run_end, also one resumed past it
    bad = await server.client.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": "x"})
    assert (400, "Last-Event-ID") == (bad.status_code, bad.json()["error"]["field"])


@pytest.mark.slow
async def test_a_queued_runs_stream_gets_a_heartbeat(root: Path) -> None:
    """While a run waits for a slot its stream is not silent: a comment line comes every
    --heartbeat-s, before the run's first event."""
    s = _start(root, "--concurrency", "1", "--heartbeat-s", "0.3")
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        quick = await s.submit({"task": "tasks/quick.yaml"})
        seen: list[tuple[str, str]] = []
        async with contextlib.aclosing(s.sse(quick)) as stream:
            async for _, name, data in stream:
                seen.append((name, data.get("comment", "")))
                if len(seen) == 3:
                    break
        assert [("", "still queued")] * 3 == seen
        await s.client.delete(f"/v1/runs/{slow}")
        events = await s.all_events(quick)
        assert ("run_start", "run_end") == (events[0][0], events[-1][0])
    finally:
        await s.client.aclose()
        _stop(s)


async def test_answers_match_the_openapi_schemas(server: Server) -> None:
    """/openapi.json is a valid OpenAPI 3.1 document, and real answers (accepted, summary,
    list, event, error, health) validate against the schemas it gives for them."""
    from jsonschema import Draft202012Validator
    from openapi_spec_validator import validate

    doc = (await server.client.get("/openapi.json")).json()
    validate(doc)

    def check(instance: Any, path: str, method: str, code: str) -> None:
        content = doc["paths"][path][method]["responses"][code]["content"]
        schema = next(iter(content.values()))["schema"]
        Draft202012Validator({**schema, "components": doc["components"]}).validate(instance)

    r = await server.client.post("/v1/runs", json={"task": "tasks/quick.yaml"})
    check(r.json(), "/v1/runs", "post", "202")
    run_id = r.json()["id"]
    for _, data in await server.all_events(run_id):
        check(data, "/v1/runs/{id}/events", "get", "200")
    check((await server.client.get(f"/v1/runs/{run_id}")).json(), "/v1/runs/{id}", "get", "200")
    check((await server.client.get("/v1/runs")).json(), "/v1/runs", "get", "200")
    bad = await server.client.post("/v1/runs", json={"task": "nope"})
    check(bad.json(), "/v1/runs", "post", "400")
    check((await server.client.get("/healthz")).json(), "/healthz", "get", "200")
    body = doc["paths"]["/v1/runs"]["post"]["requestBody"]["content"]["application/json"]
    Draft202012Validator({**body["schema"], "components": doc["components"]}).validate(
        {"task": "quick", "tier": "sim-fast", "limits": {"max_steps": 3}}
    )
    with pytest.raises(Exception, match="colour"):
        Draft202012Validator({**body["schema"], "components": doc["components"]}).validate(
            {"task": "quick", "colour": "red"}
        )
