"""Benchmark: `agentloop serve` with runs in its own process against `serve --ray` on a Ray cluster.

Run as ``python tests/benchmarks/bench_serve_ray.py [RUNS]`` (default 3). The same server
(a real process on loopback, concurrency 2) runs RUNS times a two-step scripted task whose first
model call streams for ~2 s (sim-standard), each followed over SSE, then twice a long call that
is cancelled with DELETE once its tokens stream; first locally, then with ``--ray`` on a
one-node cluster this script starts (``ray start --head`` on 127.0.0.1, token authentication).

Printed per mode: seconds from submit to the first event and to ``run_end`` per run, the
events-to-client lag p50/p99 (an event's arrival against the run's own clock, beyond that run's
best-delivered event: how late the stream is, not how long the run is), DELETE to the cancelled
answer, and for ``--ray`` the server's start to listening (connecting to the cluster).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_serve import SLOW, Server, _start, _stop  # noqa: E402
from test_serve_ray import STEADY  # noqa: E402
from test_suite_ray import RAY, free_port  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def measure(s: Server, label: str, runs: int) -> None:
    firsts, ends, lags, cancels = [], [], [], []
    for _ in range(runs):
        t0 = time.monotonic()
        run_id = await s.submit({"task": "tasks/steady.yaml"})
        seen = []
        async for _, name, data in s.sse(run_id):
            if name:
                seen.append((time.monotonic() - t0, float(data.get("t_s") or 0.0)))
        firsts.append(seen[0][0])
        ends.append(seen[-1][0])
        best = min(arrived - t for arrived, t in seen)
        lags.extend((arrived - t) - best for arrived, t in seen)
    for _ in range(2):
        run_id = await s.submit({"task": "tasks/slow.yaml"})
        async for _, name, _data in s.sse(run_id):
            if name == "model_progress":
                break
        t0 = time.monotonic()
        r = await s.client.delete(f"/v1/runs/{run_id}")
        cancels.append(time.monotonic() - t0)
        assert "cancelled" == r.json()["status"], r.text
    print(
        f"{label:6} submit->first event s {[round(x, 2) for x in firsts]}  "
        f"submit->run_end s {[round(x, 2) for x in ends]}  "
        f"event lag p50 {statistics.median(lags) * 1000:.0f} ms p99 {_pct(lags, 0.99) * 1000:.0f} ms  "
        f"DELETE->cancelled s {[round(x, 2) for x in cancels]}",
        flush=True,
    )


async def main(runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-serve-ray-"))
    (root / "tasks").mkdir()
    (root / "tasks" / "steady.yaml").write_text(STEADY)
    (root / "tasks" / "slow.yaml").write_text(SLOW)
    s = _start(root, "--concurrency", "2")
    try:
        await measure(s, "local", runs)
    finally:
        await s.client.aclose()
        _stop(s)
    os.environ.update(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    temp, port = tempfile.mkdtemp(prefix="ray-bench-"), free_port()
    head = [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}"]
    flags = ["--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"]
    await asyncio.to_thread(
        subprocess.run, [*head, *flags, f"--temp-dir={temp}"], check=True, capture_output=True
    )
    try:
        t0 = time.monotonic()
        s = _start(root, "--concurrency", "2", "--ray", f"127.0.0.1:{port}")
        print(f"serve --ray: start to listening {time.monotonic() - t0:.1f} s", flush=True)
        try:
            await measure(s, "ray", runs)
        finally:
            await s.client.aclose()
            _stop(s)
    finally:
        await asyncio.to_thread(subprocess.run, [RAY, "stop", "--force"], capture_output=True)
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
