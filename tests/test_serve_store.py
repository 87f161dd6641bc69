"""`agentloop serve`'s run store over real HTTP: runs outlive a crash and a restart, retried
submissions run once, listing pages through the store, and /metrics filled by real runs."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_serve import QUICK, SLOW, Server, _start, _stop, _wait_for

from agentloop.trace import attrs as A
from agentloop.trace.reader import load_trace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "quick.yaml").write_text(QUICK)
    (tmp_path / "tasks" / "slow.yaml").write_text(SLOW)
    return tmp_path


@pytest.fixture
async def server(root: Path) -> AsyncIterator[Server]:
    s = _start(root, "--concurrency", "2")
    try:
        yield s
    finally:
        await s.client.aclose()
        _stop(s)


def _kill(s: Server) -> None:
    """SIGKILL: the crash, with no chance to write anything down."""
    s.proc.send_signal(signal.SIGKILL)
    s.proc.communicate(timeout=30)


def _rows(root: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(root / "agentloop-state" / "runs.sqlite3") as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT id, status, resumed_from FROM runs")]


@pytest.mark.slow
async def test_a_crash_keeps_the_queue_and_marks_runs_in_flight_interrupted(root: Path) -> None:
    """SIGKILL with one run in flight and two queued: after a restart on the same folder the
    queued two run to their end under their own ids, the one in flight is `interrupted` with
    its (cut short, loadable) trace, and a finished run keeps its status and report."""
    s = _start(root, "--concurrency", "1")
    try:
        done = await s.submit({"task": "tasks/quick.yaml"})
        await s.all_events(done)
        report = (await s.client.get(f"/v1/runs/{done}/report")).json()
        slow = await s.submit({"task": "tasks/slow.yaml"})
        await _wait_for(s, slow, "model_start")
        queued = [await s.submit({"task": "tasks/quick.yaml"}) for _ in range(2)]
        _kill(s)
    finally:
        await s.client.aclose()
    again = _start(root, "--concurrency", "1")
    try:
        for run_id in queued:
            events = await again.all_events(run_id)
            assert ("run_end", "ok") == (events[-1][0], events[-1][1]["data"]["status"])
            assert {run_id} == {e["id"] for _, e in events}
        interrupted = await again.status(slow)
        assert "interrupted" == interrupted["status"]
        trace = load_trace(root / str(interrupted["trace"]))
        assert trace.end_record is None  # cut short where the run was
        assert "ok" == (await again.status(done))["status"]
        assert report == (await again.client.get(f"/v1/runs/{done}/report")).json()
        listed = (await again.client.get("/v1/runs")).json()["runs"]
        assert [*queued[::-1], slow, done] == [r["id"] for r in listed]
        assert 4 == len(_rows(root))  # none lost, none run twice
    finally:
        await again.client.aclose()
        _, output = _stop(again)
    assert "Traceback" not in output, output


@pytest.mark.slow
async def test_resume_runs_an_interrupted_run_again_once(root: Path) -> None:
    """With --resume, a run the crash interrupted runs again as a new run that names it; a crash
    of that one does not resume it again."""
    s = _start(root, "--concurrency", "1")
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        await _wait_for(s, slow, "model_start")
        _kill(s)
    finally:
        await s.client.aclose()
    s = _start(root, "--concurrency", "1", "--resume")
    try:
        first = await s.status(slow)
        assert "interrupted" == first["status"] and first["resumed_as"]
        second = first["resumed_as"]
        assert slow == (await s.status(second))["resumed_from"]
        await _wait_for(s, second, "model_start")
        _kill(s)
    finally:
        await s.client.aclose()
    s = _start(root, "--concurrency", "1", "--resume")
    try:
        assert "interrupted" == (await s.status(second))["status"]
        assert (await s.status(second))["resumed_as"] is None
        assert 2 == len(_rows(root))
    finally:
        await s.client.aclose()
        _stop(s)


@pytest.mark.slow
async def test_sigterm_leaves_the_queue_for_the_next_start(root: Path) -> None:
    """SIGTERM cancels the run in flight (its trace closed `cancelled`); the queued run stays
    queued and runs after the restart."""
    s = _start(root, "--concurrency", "1")
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        await _wait_for(s, slow, "model_start")
        queued = await s.submit({"task": "tasks/quick.yaml"})
        code, output = await asyncio.to_thread(_stop, s)
    finally:
        await s.client.aclose()
    assert 0 == code, output
    assert "1 run(s) cancelled" in output
    s = _start(root, "--concurrency", "1")
    try:
        cancelled = await s.status(slow)
        assert "cancelled" == cancelled["status"]
        assert "cancelled" == load_trace(root / str(cancelled["trace"])).end_record.status
        events = await s.all_events(queued)
        assert "ok" == events[-1][1]["data"]["status"]
    finally:
        await s.client.aclose()
        _stop(s)


@pytest.mark.slow
async def test_submissions_are_refused_with_503_while_draining(root: Path) -> None:
    """With --drain-s, after SIGTERM a run in flight may finish; meanwhile a submission gets
    503 with Retry-After and /readyz says stopping; the run ends ok."""
    # a ~3 s call, not slow.yaml's 10 s: the 503 and /readyz checks take well under a second
    # after model_start, and then the test only waits for the run's end
    (root / "tasks" / "drained.yaml").write_text(
        SLOW.replace("reasoning_tokens: 600", "reasoning_tokens: 180")
    )
    s = _start(root, "--concurrency", "1", "--drain-s", "60")
    try:
        slow = await s.submit({"task": "tasks/drained.yaml"})
        await _wait_for(s, slow, "model_start")
        s.proc.send_signal(signal.SIGTERM)
        for _ in range(100):
            r = await s.client.post("/v1/runs", json={"task": "tasks/quick.yaml"})
            if r.status_code != 202:
                break
            await asyncio.sleep(0.05)
        assert 503 == r.status_code, r.text
        assert int(r.headers["Retry-After"]) >= 1
        ready = await s.client.get("/readyz")
        assert (503, "stopping") == (ready.status_code, ready.json()["status"])
        end = await _wait_for(s, slow, "run_end")
        assert "ok" == end["data"]["status"]
        code, output = await asyncio.to_thread(_stop, s)
        assert 0 == code, output
    finally:
        await s.client.aclose()


async def test_a_retried_submission_runs_once(server: Server, root: Path) -> None:
    """The same Idempotency-Key and body, sent again or five times at once, answers with the
    first run's id and starts no second run; the same key with another body is a 409."""
    body = {"task": "tasks/quick.yaml"}
    key = {"Idempotency-Key": "deploy-4711-retry"}
    first = await server.client.post("/v1/runs", json=body, headers=key)
    again = await server.client.post("/v1/runs", json=body, headers=key)
    assert (202, 202) == (first.status_code, again.status_code)
    assert first.json()["id"] == again.json()["id"]
    assert "true" == again.headers["Idempotent-Replayed"]
    other = await server.client.post("/v1/runs", json={"task": "tasks/slow.yaml"}, headers=key)
    assert (409, "Idempotency-Key") == (other.status_code, other.json()["error"]["field"])
    burst = await asyncio.gather(
        *(
            server.client.post("/v1/runs", json=body, headers={"Idempotency-Key": "burst"})
            for _ in range(5)
        )
    )
    assert 1 == len({r.json()["id"] for r in burst})
    assert 2 == len(_rows(root))
    long_key = await server.client.post(
        "/v1/runs", json=body, headers={"Idempotency-Key": "k" * 201}
    )
    assert (400, "Idempotency-Key") == (long_key.status_code, long_key.json()["error"]["field"])


@pytest.mark.slow
async def test_listing_filters_and_pages_newest_first(server: Server) -> None:
    """GET /v1/runs pages newest first through ?limit and ?cursor, and filters by status and
    task; bad parameters are 400s naming them."""
    ids = [await server.submit({"task": "tasks/quick.yaml"}) for _ in range(5)]
    cancelled = await server.submit({"task": "tasks/slow.yaml"})
    await server.client.delete(f"/v1/runs/{cancelled}")
    for run_id in ids:
        await server.all_events(run_id)
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await server.client.get("/v1/runs", params=params)).json()
        assert len(page["runs"]) <= 2
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [cancelled, *ids[::-1]] == seen
    by_status = (await server.client.get("/v1/runs", params={"status": "cancelled"})).json()
    assert [cancelled] == [r["id"] for r in by_status["runs"]]
    by_task = (await server.client.get("/v1/runs", params={"task": "quick"})).json()
    assert ids[::-1] == [r["id"] for r in by_task["runs"]]
    for params, field in (
        ({"status": "done"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"cursor": "abc"}, "cursor"),
    ):
        r = await server.client.get("/v1/runs", params=params)
        assert (400, field) == (r.status_code, r.json()["error"]["field"])


async def test_health_and_metrics(server: Server) -> None:
    """/healthz answers without the token, /readyz with it; /metrics, read by prometheus-client's
    own parser, counts runs by status and has the run, model-call (per tier) and tool-call (per
    tool) histograms filled by the real runs."""
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(base_url=server.base) as anon:
        assert (200, "alive") == (
            (h := await anon.get("/healthz")).status_code,
            h.json()["status"],
        )
        assert 401 == (await anon.get("/readyz")).status_code
        assert 401 == (await anon.get("/metrics")).status_code
    assert "ready" == (await server.client.get("/readyz")).json()["status"]
    ids = [await server.submit({"task": "tasks/quick.yaml"}) for _ in range(3)]
    for run_id in ids:
        await server.all_events(run_id)
    await server.client.post("/v1/runs", json={"task": "nope"})  # one refusal

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for _ in range(50):  # the metrics of a run are observed just after its end
        text = (await server.client.get("/metrics")).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        if samples.get(("agentloop_run_duration_seconds_count", _l(status="ok", tier=T))) == 3:
            break
        await asyncio.sleep(0.1)
    assert 3 == samples[("agentloop_runs", _l(status="ok"))]
    assert 0 == samples[("agentloop_queue_depth", ())]
    assert 3 == samples[("agentloop_run_duration_seconds_count", _l(status="ok", tier=T))]
    assert 6 == samples[("agentloop_model_call_duration_seconds_count", _l(tier=T))]
    assert 6 == samples[("agentloop_model_ttft_seconds_count", _l(tier=T))]
    # a call has an output speed where its first and last visible tokens came in two reads: at
    # 750 tok/s on a busy machine a short answer can come in one, so the traces say how many
    timed = 0
    for path in (server.root / "traces").glob("*.jsonl"):
        for span in load_trace(path).spans.values():
            timed += span.kind == "model" and span.attrs.get(A.OUTPUT_TPS) is not None
    assert 1 <= timed == samples[("agentloop_model_output_tokens_per_second_count", _l(tier=T))]
    assert 0 < samples[("agentloop_model_ttft_seconds_sum", _l(tier=T))]
    assert 3 == samples[("agentloop_tool_call_duration_seconds_count", _l(tool="think"))]
    assert 0 < samples[("agentloop_cost_usd_total", _l(tier=T))]
    # every call's client measured its own lateness (issue 28), under load or not
    assert 6 == samples[("agentloop_model_timing_error_seconds_count", _l(tier=T))]
    assert 6 == sum(
        samples.get(("agentloop_model_calls_measured_total", _l(tier=T, under_load=u)), 0)
        for u in ("true", "false")
    )
    assert 1 <= samples[("agentloop_refused_requests_total", _l(code="400"))]


T = "sim-ultrafast"


def _l(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))
