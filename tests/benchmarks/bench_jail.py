"""Benchmark of the per-run jail: what confinement costs a run, side by side with no jail.

Run: ``python tests/benchmarks/bench_jail.py`` (about 20 s). Figures, medians of N tries:

1. opening and closing a run's jail (bwrap, its init, the cgroups), once per run;
2. one ``true`` command through :func:`agentloop.sandbox.proc.run` (tool mode: pipes, the linger check,
   the still-running check) in the jail and on the host (``HostJail``, the unconfined fallback);
3. the same for ``python -c pass`` (an interpreter start, what most task commands pay);
4. 20 commands at once (a turn's parallel tool calls), wall time per command;
5. the trust boundary's cost (issue 29), side by side with the way it was before: a jail
   over the allow-listed host (:mod:`agentloop.sandbox.view`) against one over the whole host
   read-only (``--ro-bind / /``, as before); a success check (``python -m pytest -q`` on one
   test) in its own verdict jail over a snapshot (:mod:`agentloop.sandbox.verdict`) against the same
   command through the run's jail (as before); and the task venv's manifest check, paid by
   every run that reuses a venv.
6. the event loop's lag while jails open and close, eight at a time, five waves (issue 28: the
   loop that opens a run's jail is the one timing the other runs' streams): the largest and the
   99th percentile lateness of a 1 ms sampler beside them, and in a fresh process the first
   open's (``/etc`` is walked once per process for the jail's view). bwrap is started on a
   thread (``BwrapJail._exec``). Measured side by side on a 2-core machine (load 1.2-2.7, three
   tries each): started on the loop (``create_subprocess_exec``, as before), first open 14.9 and
   18.7 ms of lag, waves max 25-130 ms, p99 9.0-16.1 ms; on a thread, first open 2.3 and 2.8 ms,
   waves max 14-28 ms, p99 6.8-9.8 ms. What is left is the GIL and the CPU (the loop is found
   waiting in ``select`` or re-taking the GIL after a syscall, not running jail code).

Target: the jail adds at most a few milliseconds per command and well under a second per run.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop.config.tasks import Task  # noqa: E402
from agentloop.sandbox import proc, taskenv, workspace  # noqa: E402
from agentloop.sandbox import view as jail_view  # noqa: E402
from agentloop.sandbox.context import scrubbed_env  # noqa: E402
from agentloop.sandbox.jail import Jail, JailSpec, open_jail  # noqa: E402
from agentloop.sandbox.verdict import verdict_jail  # noqa: E402

N = 30


async def per_command(jail: Jail, ws: Path, command: str) -> float:
    times = []
    for _ in range(N):
        t0 = time.perf_counter()
        o = await proc.run(jail, command, cwd=ws, env=scrubbed_env(), timeout_s=30, cap=4000)
        times.append(time.perf_counter() - t0)
        assert o.exit_code == 0, o.stderr.text()
    return statistics.median(times)


async def parallel(jail: Jail, ws: Path, k: int = 20) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(
        *(
            proc.run(jail, "true", cwd=ws, env=scrubbed_env(), timeout_s=30, cap=4000)
            for _ in range(k)
        )
    )
    return (time.perf_counter() - t0) / k


async def main() -> None:
    ws = Path(tempfile.mkdtemp(prefix="bench-jail-"))
    first: list[float] = []  # the process's first open: /etc walked for the view
    sampler = asyncio.create_task(_sample(first))
    await asyncio.sleep(0.01)
    first.clear()
    await (await open_jail(JailSpec(workspace=ws))).aclose()
    sampler.cancel()
    print(f"loop lag beside the process's first jail open + close: max {max(first) * 1e3:.1f} ms")
    await loop_lag(ws)
    opens = []
    for _ in range(10):
        t0 = time.perf_counter()
        jail = await open_jail(JailSpec(workspace=ws))
        await jail.aclose()
        opens.append(time.perf_counter() - t0)
    assert jail.confined, jail.summary_line()
    print(f"jail open + close (median of 10): {statistics.median(opens) * 1e3:7.1f} ms")
    jails = {
        "jail": await open_jail(JailSpec(workspace=ws)),
        "host": await open_jail(JailSpec(workspace=ws), bwrap="/nonexistent/bwrap"),
    }
    rows = {}
    for name, jail in jails.items():
        rows[name] = (
            await per_command(jail, ws, "true"),
            await per_command(jail, ws, f"{sys.executable} -c pass"),
            await parallel(jail, ws),
        )
    print(f"{'':28} {'jail':>9} {'host':>9} {'jail - host':>12}")
    for i, what in enumerate(("true", "python -c pass", "20 x true at once (per cmd)")):
        a, b = rows["jail"][i], rows["host"][i]
        print(f"{what:28} {a * 1e3:7.1f}ms {b * 1e3:7.1f}ms {(a - b) * 1e3:+10.1f}ms")
    for jail in jails.values():
        await jail.aclose()
    os.rmdir(ws)
    await trust_boundary()


async def _sample(lags: list[float]) -> None:
    """Note how late each 1 ms sleep woke (the loop's lag), until cancelled."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t0 - 0.001)


async def loop_lag(ws: Path, at_once: int = 8, waves: int = 5) -> None:
    """The loop's lag beside jails opening and closing, ``at_once`` at a time."""

    async def one() -> None:
        jail = await open_jail(JailSpec(workspace=ws))
        assert jail.confined, jail.summary_line()
        await jail.aclose()

    lags: list[float] = []
    sampler = asyncio.create_task(_sample(lags))
    await asyncio.sleep(0.01)
    lags.clear()
    for _ in range(waves):
        await asyncio.gather(*(one() for _ in range(at_once)))
    sampler.cancel()
    lags.sort()
    p99 = lags[int(len(lags) * 0.99)]
    print(
        f"loop lag beside {waves} waves of {at_once} jails opened and closed: "
        f"max {lags[-1] * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms ({len(lags)} samples)"
    )


async def open_close(ws: Path, n: int = 10) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        jail = await open_jail(JailSpec(workspace=ws))
        assert jail.confined, jail.summary_line()
        await jail.aclose()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def trust_boundary() -> None:
    ws = Path(tempfile.mkdtemp(prefix="bench-trust-"))
    (ws / "tests").mkdir()
    (ws / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    allow_listed, init_at = jail_view.host_args, jail_view.INIT_AT
    rows: dict[str, list[float]] = {"allow-listed": [], "whole host": []}
    for _ in range(3):  # the two layouts take turns, so the machine's load hits both
        rows["allow-listed"].append(await open_close(ws))
        # as before: the whole host read-only, the init run from where it lies
        jail_view.host_args = lambda: ["--ro-bind", "/", "/"]  # type: ignore[assignment]
        jail_view.INIT_AT = str(Path(jail_view._init.__file__).resolve())
        rows["whole host"].append(await open_close(ws))
        jail_view.host_args, jail_view.INIT_AT = allow_listed, init_at  # type: ignore[assignment]
    a, b = (statistics.median(v) for v in rows.values())
    print(
        f"jail open + close: allow-listed {a * 1e3:.1f} ms, whole host {b * 1e3:.1f} ms"
        f" ({(a - b) * 1e3:+.1f} ms)"
    )
    task = Task(name="b", prompt="p", system="s", workspace=ws)
    env = await taskenv.ensure(task)
    with taskenv.activate(env):
        place = await workspace.prepare_run(
            task, readonly=env.readonly, path_prefix=env.path_prefix
        )
        cmd = "python -m pytest -q -p no:cacheprovider"
        old, new = [], []
        for _ in range(N // 3):
            t0 = time.perf_counter()
            code, out = await workspace.run_command(cmd, place.path, scrubbed_env(), 60, place.jail)
            old.append(time.perf_counter() - t0)
            assert code == 0, out
            t0 = time.perf_counter()
            async with verdict_jail(place.jail, place.path, pristine=place.tests) as vj:
                code, out = await workspace.run_command(cmd, place.path, scrubbed_env(), 60, vj)
            new.append(time.perf_counter() - t0)
            assert code == 0, out
        await place.close()
    a, b = statistics.median(new), statistics.median(old)
    print(
        f"success check: verdict jail {a * 1e3:.1f} ms, through the run's jail {b * 1e3:.1f} ms"
        f" ({(a - b) * 1e3:+.1f} ms)"
    )
    times = []
    for _ in range(N // 3):
        t0 = time.perf_counter()
        await asyncio.to_thread(taskenv.manifest, env.venv)
        times.append(time.perf_counter() - t0)
    files = sum(len(f) for _d, _s, f in os.walk(env.venv))
    print(f"task venv manifest check ({files} files): {statistics.median(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
