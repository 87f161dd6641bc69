"""Benchmark: `agentloop serve` under load, SIGKILLed mid-way and restarted on the same folder.

Run as ``python tests/benchmarks/bench_serve_load.py [SUBMISSIONS] [CLIENTS] [CONCURRENCY]``
(default 200 20 8). A real server process on loopback runs a two-step scripted task on the
embedded simulator (sim-ultrafast). CLIENTS clients submit their share over real HTTP, each
submission with an ``Idempotency-Key`` and retried (same key) on a refused or cut connection, a
429 or a 503; every accepted run has an SSE follower that reconnects with ``Last-Event-ID``
until it sees ``run_end``. Once half the submissions are accepted the server is SIGKILLed and
started again on the same port, state and trace folders.

Checked at the end, from the answers and the store: every accepted run is there once (none lost,
none run twice: one row per key, at most one trace per row and no trace without a row), each
ended (ok, or interrupted: in flight at the kill; one killed while its workspace was set up
has no trace), every trace loadable; every follower saw its
run's end. Printed: submit latency p50/p99 (a successful POST, retries not included; the
retries are counted), events-to-client lag p50/p99 (an event's arrival at the client against
the run's own clock, beyond that run's best-delivered event), the wall time and run rate.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop.trace.reader import load_trace  # noqa: E402

TASK = """\
name: quick
prompt: Say hello through the think tool, then finish.
tools: [think]
tier: sim-ultrafast
script:
  - text: Thinking first.
    tool_calls:
      - {name: think, arguments: {thought: hello}}
  - text: Done.
    tool_calls:
      - {name: finish, arguments: {summary: said hello}}
"""
RETRYABLE = (httpx.TransportError,)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(root: Path, port: int, concurrency: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOOP_TOKEN"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentloop.cli",
            "serve",
            "--port",
            str(port),
            "--concurrency",
            str(concurrency),
            "--max-queue",
            "1000",
            "--tasks-dir",
            "tasks",
            "--trace-dir",
            "traces",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line + (proc.stderr.read() if proc.stderr else "")
    return proc


class Load:
    def __init__(self, base: str, total: int) -> None:
        self.base, self.total = base, total
        self.accepted: dict[str, str] = {}  # key -> id
        self.latencies: list[float] = []
        self.retries = 0
        self.lags: list[float] = []
        self.ends: dict[str, str] = {}  # id -> run_end status seen by its follower
        self.half = asyncio.Event()
        self.followers: list[asyncio.Task[None]] = []

    async def submit(self, http: httpx.AsyncClient, key: str) -> None:
        while True:
            t0 = time.perf_counter()
            try:
                r = await http.post(
                    "/v1/runs", json={"task": "quick.yaml"}, headers={"Idempotency-Key": key}
                )
            except RETRYABLE:
                self.retries += 1
                await asyncio.sleep(0.2)
                continue
            if r.status_code in (429, 503):
                self.retries += 1
                await asyncio.sleep(min(2.0, float(r.headers.get("Retry-After", "1"))))
                continue
            assert r.status_code == 202, r.text
            self.latencies.append(time.perf_counter() - t0)
            run_id = r.json()["id"]
            assert self.accepted.setdefault(key, run_id) == run_id, "a key got two runs"
            if len(self.accepted) >= self.total // 2:
                self.half.set()
            self.followers.append(asyncio.create_task(self.follow(http, run_id)))
            return

    async def follow(self, http: httpx.AsyncClient, run_id: str) -> None:
        last: str | None = None
        offsets: list[float] = []
        while True:
            try:
                headers = {"Last-Event-ID": last} if last is not None else {}
                async with http.stream(
                    "GET", f"/v1/runs/{run_id}/events", headers=headers, timeout=None
                ) as r:
                    event_id, name = None, None
                    async for line in r.aiter_lines():
                        if line.startswith("id: "):
                            event_id = line[4:]
                        elif line.startswith("event: "):
                            name = line[7:]
                        elif line.startswith("data: ") and name:
                            data = orjson.loads(line[6:])
                            if data.get("run_id") and name != "run_end":
                                offsets.append(time.perf_counter() - float(data["t_s"]))
                            last = event_id
                            if name == "run_end":
                                self.ends[run_id] = data["data"]["status"]
                                if offsets:
                                    best = min(offsets)
                                    self.lags.extend(o - best for o in offsets)
                                return
                            name = None
            except RETRYABLE:
                pass
            await asyncio.sleep(0.2)  # the server is down: reconnect once it is back


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def main(total: int, clients: int, concurrency: int) -> int:
    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    (root / "tasks").mkdir()
    (root / "tasks" / "quick.yaml").write_text(TASK)
    port = free_port()
    proc = start(root, port, concurrency)
    load = Load(f"http://127.0.0.1:{port}", total)
    limits = httpx.Limits(max_connections=clients * 20, max_keepalive_connections=clients * 20)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=load.base, timeout=30.0, limits=limits) as http:

        async def client(c: int) -> None:
            for i in range(c, total, clients):
                await load.submit(http, f"bench-{i}")

        async def killer() -> None:
            nonlocal proc
            await load.half.wait()
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.communicate)
            print(
                f"killed after {len(load.accepted)} accepted, {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            proc = await asyncio.to_thread(start, root, port, concurrency)

        kill = asyncio.create_task(killer())
        await asyncio.gather(*(client(c) for c in range(clients)))
        await kill
        submitted = time.perf_counter() - t0
        await asyncio.wait_for(asyncio.gather(*load.followers), timeout=900)
        wall = time.perf_counter() - t0
        listed: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": "500", **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/v1/runs", params=params)).json()
            listed += page["runs"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)

    with sqlite3.connect(root / "agentloop-state" / "runs.sqlite3") as db:
        rows = db.execute("SELECT id, idem_key, status, trace FROM runs").fetchall()
    by_id = {r[0]: r for r in rows}
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r[2]] = statuses.get(r[2], 0) + 1
    traces = sorted((root / "traces").glob("*.jsonl"))
    problems = []
    if len(load.accepted) != total:
        problems.append(f"{len(load.accepted)} of {total} submissions accepted")
    if set(load.accepted.values()) - set(by_id):
        problems.append("an accepted run is missing from the store")
    if len(rows) != len({r[1] for r in rows}) or len(rows) != total:
        problems.append(f"{len(rows)} rows for {total} keys")
    if set(statuses) - {"ok", "interrupted"}:
        problems.append(f"statuses {statuses}")
    named = {str(root / r[3]) for r in rows if r[3]}
    if {str(t) for t in traces} != named or len(named) != sum(1 for r in rows if r[3]):
        problems.append(f"{len(traces)} trace files for {len(named)} runs that name one")
    unreadable = 0
    for path in traces:
        try:
            load_trace(path)
        except Exception:
            unreadable += 1
    if unreadable:
        problems.append(f"{unreadable} traces not loadable")
    if len(load.ends) != total:
        problems.append(f"{len(load.ends)} followers saw their run end")
    if len(listed) != total:
        problems.append(f"GET /v1/runs lists {len(listed)}")

    ms = [x * 1000 for x in load.latencies]
    lag = [x * 1000 for x in load.lags]
    print(f"submissions {total} from {clients} clients, concurrency {concurrency}")
    print(f"statuses    {statuses}; retried submissions {load.retries}")
    print(f"submit      p50 {pct(ms, 50):.1f} ms, p99 {pct(ms, 99):.1f} ms (n={len(ms)})")
    print(f"event lag   p50 {pct(lag, 50):.1f} ms, p99 {pct(lag, 99):.1f} ms (n={len(lag)})")
    print(f"wall        {wall:.1f} s ({submitted:.1f} s to accept all), {total / wall:.1f} runs/s")
    print("checks      " + ("all held" if not problems else "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    sys.exit(asyncio.run(main(*(args + [200, 20, 8][len(args) :]))))
