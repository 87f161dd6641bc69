"""The run store is pruned: ended runs past an age or a count are deleted, queued and running
ones never, and their traces stay on disk; at the server's start and every --prune-every-s."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_serve import QUICK, _start, _stop

from agentloop import start_run
from agentloop.service.runs import RunBook
from agentloop.service.store import RunStore


def _iso(days_ago: float) -> str:
    when = datetime.now(UTC) - timedelta(days=days_ago)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def test_prune_deletes_old_and_surplus_ended_runs_only(tmp_path: Path) -> None:
    """Of runs submitted in this order: an ok one ended 40 days ago, a running and a queued one
    from 40 days ago, an interrupted one ended 31 days ago, three ended ones of today: 30 days
    kept deletes the two old ended ones, then 2 runs kept the oldest of today's; the live ones
    stay however old, the counts follow, the trace files are untouched."""
    store = RunStore(tmp_path / "state")
    await store.open()
    try:
        rows = [
            ("old-ok", "ok", _iso(41), _iso(40)),
            ("old-running", "running", _iso(40), None),
            ("old-queued", "queued", _iso(40), None),
            ("old-interrupted", "interrupted", _iso(32), _iso(31)),
            ("today-1", "ok", _iso(0.02), _iso(0.01)),
            ("today-2", "error", _iso(0.02), _iso(0.01)),
            ("today-3", "cancelled", _iso(0.02), _iso(0.01)),
        ]
        for run_id, status, submitted, ended in rows:
            trace = tmp_path / "traces" / f"{run_id}.jsonl"
            trace.parent.mkdir(exist_ok=True)
            trace.write_text("{}\n")
            row = {
                "id": run_id,
                "task": "quick",
                "tier": None,
                "status": status,
                "submitted_at": submitted,
                "ended_at": ended,
                "trace": str(trace),
            }
            await store.add(row, {"task": "quick"})
        book = RunBook(start_run, store=store, trace_dir=tmp_path / "traces")
        book.counts = Counter(await store.counts())

        assert 2 == await book.prune(keep_days=30, keep_runs=100)  # the age bound: the old two
        page, _ = await store.page(status=None, task=None, before=None, limit=50)
        assert {"old-ok", "old-interrupted"}.isdisjoint({r["id"] for r in page})
        assert 1 == await book.prune(keep_days=30, keep_runs=2)  # the count: the oldest of today
        page, _ = await store.page(status=None, task=None, before=None, limit=50)
        left = {r["id"] for r in page}
        assert {"old-running", "old-queued", "today-2", "today-3"} == left
        assert {"running": 1, "queued": 1, "error": 1, "cancelled": 1} == {
            k: v for k, v in book.counts.items() if v
        }
        assert None is await book.find("old-ok")
        assert 7 == len(list((tmp_path / "traces").glob("*.jsonl")))  # the traces are the user's
        assert 0 == await book.prune(keep_days=30, keep_runs=2)  # nothing more to do
    finally:
        await store.close()


@pytest.mark.slow
async def test_the_server_prunes_at_start_and_then_periodically(tmp_path: Path) -> None:
    """Two runs, then a restart with --keep-runs 1: the older is pruned at start (404, not
    listed, its trace still on disk); a third run, and the pruning that comes every 0.5 s
    deletes the second."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "quick.yaml").write_text(QUICK)
    s = _start(tmp_path)
    try:
        first, second = [await s.submit({"task": "tasks/quick.yaml"}) for _ in range(2)]
        for run_id in (first, second):
            await s.all_events(run_id)
        first_trace = tmp_path / str((await s.status(first))["trace"])
    finally:
        await s.client.aclose()
        _stop(s)

    s = _start(tmp_path, "--keep-runs", "1", "--prune-every-s", "0.5")
    try:
        listed = (await s.client.get("/v1/runs")).json()["runs"]
        assert [second] == [r["id"] for r in listed]
        assert 404 == (await s.client.get(f"/v1/runs/{first}")).status_code
        assert first_trace.is_file()

        third = await s.submit({"task": "tasks/quick.yaml"})
        await s.all_events(third)
        deadline = time.monotonic() + 20
        while (await s.client.get(f"/v1/runs/{second}")).status_code != 404:
            assert time.monotonic() < deadline, "the periodic pruning never came"
            await asyncio.sleep(0.1)
        listed = (await s.client.get("/v1/runs")).json()["runs"]
        assert [third] == [r["id"] for r in listed]
    finally:
        await s.client.aclose()
        code, output = _stop(s)
    assert 0 == code, output
