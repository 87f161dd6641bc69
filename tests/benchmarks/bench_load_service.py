"""Benchmark: 1,000 runs submitted over HTTP to ``agentloop serve --concurrency 64``, measured.

Run: ``python tests/benchmarks/bench_load_service.py [--runs 1000] [--concurrency 64]
[--sim in|child|both]`` (minutes per configuration). The task and the figures are
``bench_load.py``'s: a two-step task with a shell command on ``sim-standard`` (60 tok/s), each
model call's ``output_tps`` against the simulator's pacing and what its span says of itself.
Each configuration starts its own service process (``agentloop serve`` on a free port, its own
trace, task and state folders), submits every run at once (``POST /v1/runs``, a few at a time
in flight), waits for every trace to end (read from the folder, so the service is not polled),
then stops it. Side by side: the load protection off (``AGENTLOOP_LOAD_GATE=off``, the trace
pipeline on the loop, the loop's instants) and on (the defaults: gate, trace thread, kernel
receive stamps by reader threads; ``loop-stamps``: kernel stamps read by the loop, as before;
``--only no-stamps`` runs that level of ``bench_load.py``); the simulator ``in`` the service's process (a
``sim-*`` tier: each run starts its own) or in a ``child`` process of the benchmark's (one route
with the task's script, a tier ``bench-child`` pointed at it in a tiers file).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import (
    ON_LOOP_ENV,
    PROTECTIONS,
    child_route,
    measure,
    print_rows,
    protection_env,
    protection_off_in_this_process,
    write_task,
)

SUBMITTING = 16  # submissions in flight at once
CHILD_TIER = """\
[tiers.bench-child]
stall_timeout_s = 300
base_url = "{url}"
model = "sim-standard"
api = "responses"
profile = {{ base_latency_s = 0.30, prefill_tps = 20000, output_tps = 60 }}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ended(traces: Path) -> int:
    n = 0
    for p in traces.glob("*.jsonl"):
        with contextlib.suppress(OSError), p.open("rb") as f:
            f.seek(max(0, p.stat().st_size - 4096))
            if b'"type":"end"' in f.read():
                n += 1
    return n


async def _submit_all(port: int, n: int, tier: str) -> list[str]:
    import httpx2

    errors: list[str] = []
    sem = asyncio.Semaphore(SUBMITTING)
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
        for _ in range(600):  # the service's start: up to a minute on a busy machine
            with contextlib.suppress(httpx2.HTTPError):
                if (await http.get("/healthz")).status_code == 200:
                    break
            await asyncio.sleep(0.1)

        async def one() -> None:
            async with sem:
                r = await http.post("/v1/runs", json={"task": "task.yaml", "tier": tier})
                if r.status_code != 202:
                    errors.append(f"{r.status_code}: {r.text[:200]}")

        await asyncio.gather(*(one() for _ in range(n)))
    return errors


async def _config(n: int, concurrency: int, gate: str, sim: str, tmp: Path) -> dict[str, Any]:
    tasks, traces = tmp / "tasks", tmp / "traces"
    tasks.mkdir()
    task = write_task(tasks)
    port, tier, extra = _free_port(), "sim-standard", []
    env = protection_env(gate)
    async with contextlib.AsyncExitStack() as stack:
        if sim == "child":
            _, base_url = await child_route(stack, task)
            (tmp / "tiers.toml").write_text(CHILD_TIER.format(url=base_url))
            tier, extra = "bench-child", ["--tiers", str(tmp / "tiers.toml")]
        argv = [
            *("serve", "--port", str(port), "--concurrency", str(concurrency)),
            *("--trace-dir", str(traces), "--tasks-dir", str(tasks)),
            *("--state-dir", str(tmp / "state"), "--max-queue", str(n + 10), *extra),
        ]
        log = (tmp / "serve.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", *argv, env=env, stdout=log, stderr=log
        )
        try:
            t0 = time.perf_counter()
            errors = await _submit_all(port, n, tier)
            while _ended(traces) < n - len(errors) and proc.returncode is None:
                await asyncio.sleep(2.0)
            wall = time.perf_counter() - t0
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            log.close()
        if proc.returncode not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
            errors.append(
                f"service exited {proc.returncode}: {(tmp / 'serve.log').read_text()[-500:]}"
            )
    out = {"runs": n, "errors": len(errors), "first_errors": errors[:3], "wall_s": wall}
    return out | measure(traces)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:  # the service's own process
        if os.environ.get(ON_LOOP_ENV):
            protection_off_in_this_process()
        from agentloop.cli import main as cli

        sys.exit(cli(sys.argv[2:]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--only", choices=PROTECTIONS)
    ap.add_argument("--sim", choices=("in", "child", "both"), default="both")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    rows = []
    for sim in ("in", "child") if args.sim == "both" else (args.sim,):
        for gate in ("off", "loop-stamps", "on") if args.only is None else (args.only,):
            with tempfile.TemporaryDirectory() as tmp:
                r = asyncio.run(_config(args.runs, args.concurrency, gate, sim, Path(tmp)))
            rows.append((gate, sim, r))
            print(f"  ({gate}, sim {sim} done, load average {os.getloadavg()[0]:.2f})", flush=True)
    print(f"service, --concurrency {args.concurrency}")
    print_rows(rows)


if __name__ == "__main__":
    main()
