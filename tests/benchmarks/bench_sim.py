"""Benchmark: does the simulator hold its output rate at 60, 750 and 3000 tok/s, 1 and 64 streams?

Run: ``python tests/benchmarks/bench_sim.py`` (about 90 s). For each rate a simulator runs in
its own process (``--serve``, so the measuring client has the other core) answering every request
with filler text of about 4 s at that rate. An independent client on raw asyncio streams (no
SDK, no httpx) opens 1 or 64 concurrent streaming Responses requests and stamps every read on
arrival; only when all streams have ended does it parse the chunked SSE by hand and count the
tokens of the received deltas with the simulator's own tokenizer (parsing one finished stream
while others still run would delay their timestamps by tens of ms). Per stream:

    rate = (V - m) / (t_last - t_first)

with ``V`` visible tokens, ``m`` tokens in the first visible read, ``t_first``/``t_last`` the
arrival of the reads completing the first and last visible deltas (a chunk leaves when its last
token is due, so this is the rate the schedule promised). Also TTFT (request written -> first visible chunk) against
the profile's ``base + input / prefill_tps``. Goal: rate within 0.5% (1 stream) / 1% (64 streams).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop.model.tokens import count_tokens  # noqa: E402

BASE_S = 0.2
PREFILL_TPS = 100_000
DURATION_S = 4.0
RATES = (60, 750, 3000)
STREAMS = (1, 64)
_DELTA = b'"type":"response.output_text.delta"'


def _warm_profile() -> dict:
    from agentloop.config.tiers import SpeedProfile

    return {"warm": SpeedProfile(base_latency_s=0.0, prefill_tps=0, output_tps=10_000_000)}


async def serve(rate: float, tokens: int) -> None:
    """The simulator process: print the base URL, serve until stdin closes."""
    from agentloop.config.tiers import SpeedProfile
    from agentloop.sim import SimServer

    profile = SpeedProfile(base_latency_s=BASE_S, prefill_tps=PREFILL_TPS, output_tps=rate)
    async with SimServer(profile=profile, filler_tokens=tokens, profiles=_warm_profile()) as sim:
        print(sim.base_url, flush=True)
        await asyncio.to_thread(sys.stdin.read)


class _Recorder(asyncio.Protocol):
    """Stamps every read on arrival and keeps the bytes; parsing waits until the stream ends,
    so the client's own work never delays a timestamp."""

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done
        self.parts: list[tuple[float, bytes]] = []
        self.tail = b""

    def data_received(self, data: bytes) -> None:
        self.parts.append((time.perf_counter(), data))
        self.tail = (self.tail + data)[-7:]
        if self.tail == b"\r\n0\r\n\r\n" and not self.done.done():  # last chunk of the body
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("closed before the last chunk"))


def visible_arrivals(parts: list[tuple[float, bytes]]) -> list[tuple[float, int]]:
    """(arrival, tokens) per read that completed visible delta events, from the raw reads."""
    raw = b"".join(d for _, d in parts)
    ends, acc = [], 0
    for _, d in parts:
        acc += len(d)
        ends.append(acc)
    pos = raw.index(b"\r\n\r\n") + 4
    body = bytearray()
    spans: list[tuple[int, int]] = []  # (decoded start, raw start) per chunk
    while True:
        eol = raw.index(b"\r\n", pos)
        size = int(raw[pos:eol], 16)
        if size == 0:
            break
        spans.append((len(body), eol + 2))
        body += raw[eol + 2 : eol + 2 + size]
        pos = eol + 4 + size
    starts = [d for d, _ in spans]
    out: dict[int, int] = {}
    at = 0
    for ev in bytes(body).split(b"\n\n"):
        at += len(ev) + 2
        if _DELTA not in ev:
            continue
        k = bisect.bisect_right(starts, at - 3) - 1  # chunk holding the event's last byte
        raw_end = spans[k][1] + (at - 3 - spans[k][0])
        read = bisect.bisect_right(ends, raw_end)
        payload = orjson.loads(ev[ev.index(b"data: ") + 6 :])
        out[read] = out.get(read, 0) + count_tokens(payload["delta"])
    return [(parts[i][0], n) for i, n in sorted(out.items())]


async def one_stream(host: str, port: int, body: bytes) -> tuple[float, list[tuple[float, bytes]]]:
    """One streamed request over a raw socket: the send instant and the stamped raw reads."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    transport, proto = await loop.create_connection(lambda: _Recorder(done), host, port)
    try:
        transport.write(
            b"POST /v1/responses HTTP/1.1\r\nHost: %b\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n%b" % (host.encode(), len(body), body)
        )
        t_send = time.perf_counter()
        await done
    finally:
        transport.close()
    return t_send, proto.parts


def figures(t_send: float, parts: list[tuple[float, bytes]]) -> dict[str, float]:
    """Rate and TTFT of one recorded stream (parsed only after every stream has ended, so
    parsing one never delays another's timestamps)."""
    arrivals = visible_arrivals(parts)
    total = sum(n for _, n in arrivals)
    (t_first, m), (t_last, _) = arrivals[0], arrivals[-1]
    span = t_last - t_first
    return {
        "rate": (total - m) / span if span > 0 else float("nan"),
        "ttft": t_first - t_send,
        "tokens": total,
        "chunks": len(arrivals),
    }


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A simulator serving filler at one rate, in its own process (or in this one)."""

    def __init__(self, rate: int, inproc: bool) -> None:
        self.rate, self.inproc = rate, inproc
        self.tokens = int(rate * DURATION_S) + 1

    async def __aenter__(self) -> Server:
        if self.inproc:
            from agentloop.config.tiers import SpeedProfile
            from agentloop.sim import SimServer

            self.sim = SimServer(
                profile=SpeedProfile(BASE_S, PREFILL_TPS, self.rate),
                filler_tokens=self.tokens,
                profiles=_warm_profile(),
            )
            await self.sim.start()
            self.pid, url = os.getpid(), self.sim.base_url
        else:
            self.proc = subprocess.Popen(  # noqa: ASYNC220 - started once per rate, not timed
                [sys.executable, __file__, "--serve", str(self.rate), str(self.tokens)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            assert self.proc.stdout is not None
            self.pid, url = self.proc.pid, self.proc.stdout.readline().strip()
        host, port = url.split("//")[1].split("/")[0].split(":")
        self.host, self.port = host, int(port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.inproc:
            await self.sim.close()
        else:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


async def run_case(server: Server, streams: int) -> dict[str, float]:
    """``streams`` concurrent streams against ``server``; rate and TTFT figures."""
    body = orjson.dumps({"model": "bench", "input": "go", "stream": True})
    # warm-up at once (model "warm" streams instantly): first-call paths of both processes
    await one_stream(server.host, server.port, body.replace(b'"bench"', b'"warm"'))
    cpu0, own0, wall0 = _cpu_s(server.pid), time.process_time(), time.perf_counter()
    recorded = await asyncio.gather(
        *(one_stream(server.host, server.port, body) for _ in range(streams))
    )
    wall = time.perf_counter() - wall0
    cpu, own = _cpu_s(server.pid) - cpu0, time.process_time() - own0
    results = [figures(*r) for r in recorded]
    rate = server.rate
    rates = [r["rate"] for r in results]
    target_ttft = BASE_S + (4 + count_tokens("go")) / PREFILL_TPS
    return {
        "tokens": results[0]["tokens"],
        "mean": statistics.fmean(rates),
        "min": min(rates),
        "max": max(rates),
        "worst_err": max(abs(r / rate - 1) for r in rates),
        "mean_err": abs(statistics.fmean(rates) / rate - 1),
        "ttft": statistics.fmean(r["ttft"] for r in results),
        "target_ttft": target_ttft,
        "tok_per_chunk": statistics.fmean(r["tokens"] / r["chunks"] for r in results),
        "server_cpu": cpu / wall,
        "client_cpu": own / wall,
    }


async def main(rates: list[int], stream_counts: list[int], repeat: int, inproc: bool) -> int:
    where = "same process as the client" if inproc else "its own process"
    print(
        f"simulator pacing benchmark: server in {where}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}, ~{DURATION_S} s of tokens per stream, median of {repeat} "
        f"runs by worst error"
    )
    head = (
        f"{'target':>6} {'streams':>7} {'tokens':>6} {'mean tok/s':>10} {'min':>8} "
        f"{'max':>8} {'mean err':>8} {'worst':>7} {'tok/read':>8} {'TTFT ms':>7} "
        f"{'target':>6} {'srv CPU':>7} {'cli CPU':>7}  goal"
    )
    print(head)
    print("-" * len(head))
    ok = True
    for rate in rates:
        async with Server(rate, inproc) as server:
            for streams in stream_counts:
                runs = [await run_case(server, streams) for _ in range(repeat)]
                r = sorted(runs, key=lambda x: x["worst_err"])[len(runs) // 2]
                goal = 0.005 if streams == 1 else 0.01
                met = r["worst_err"] <= goal
                ok &= met
                print(
                    f"{rate:>6} {streams:>7} {r['tokens']:>6} {r['mean']:>10.2f} "
                    f"{r['min']:>8.2f} {r['max']:>8.2f} {r['mean_err']:>7.3%} "
                    f"{r['worst_err']:>7.3%} {r['tok_per_chunk']:>8.2f} "
                    f"{r['ttft'] * 1000:>7.1f} {r['target_ttft'] * 1000:>6.1f} "
                    f"{r['server_cpu']:>7.0%} "
                    f"{'(same)' if inproc else format(r['client_cpu'], '.0%'):>7}  "
                    f"{'ok' if met else 'MISSED'} (<= {goal:.1%}; all runs worst: "
                    f"{', '.join(format(x['worst_err'], '.2%') for x in runs)})",
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--serve", nargs=2, type=float, metavar=("RATE", "TOKENS"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--inproc",
        action="store_true",
        help="run the simulator in the measuring process (shares one core)",
    )
    parser.add_argument(
        "--rates",
        type=int,
        nargs="+",
        default=list(RATES),
        help="target output tok/s (default 60 750 3000)",
    )
    parser.add_argument(
        "--streams",
        type=int,
        nargs="+",
        default=list(STREAMS),
        help="concurrent stream counts (default 1 64)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (default 3)")
    a = parser.parse_args()
    if a.serve:
        asyncio.run(serve(a.serve[0], int(a.serve[1])))
        sys.exit(0)
    sys.exit(asyncio.run(main(a.rates, a.streams, a.repeat, a.inproc)))
