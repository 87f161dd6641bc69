"""Benchmark of the per-run jail: what confinement costs a run, side by side with no jail.

Run: ``python tests/benchmarks/bench_jail.py`` (about 20 s). Figures, medians of N tries:

1. opening and closing a run's jail (bwrap, its init, the cgroups), once per run;
2. one ``true`` command through :func:`agentloop.proc.run` (tool mode: pipes, the linger check,
   the still-running check) in the jail and on the host (``HostJail``, the unconfined fallback);
3. the same for ``python -c pass`` (an interpreter start, what most task commands pay);
4. 20 commands at once (a turn's parallel tool calls), wall time per command.

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

from agentloop import proc  # noqa: E402
from agentloop.context import scrubbed_env  # noqa: E402
from agentloop.jail import Jail, JailSpec, open_jail  # noqa: E402

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


if __name__ == "__main__":
    asyncio.run(main())
