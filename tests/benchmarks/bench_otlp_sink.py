"""Benchmark: what streaming spans to an OTLP collector costs the run's trace pipeline.

Run: ``python tests/benchmarks/bench_otlp_sink.py`` (a few seconds). The reference run's records
(27 spans) are written through the run's pipeline (redact, truncate, JSONL sink) over and over,
side by side in one process:

1. JSONL sink alone (what every run pays);
2. plus an ``OtlpSink`` to a live OTLP/HTTP receiver on loopback (a stdlib HTTP server in a
   thread that answers 200 to every POST: the cost measured is the sink's, not a collector's);
3. plus an ``OtlpSink`` to a port nobody listens on (the dead collector).

Printed: microseconds per record written by the run (``Pipeline.write``), the ratio to the JSONL
sink alone, and spans the live receiver got. Target: the OTLP sink adds at most a few tens of
microseconds per record (the run's own writes take that much), dead or alive.
"""

from __future__ import annotations

import http.server
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop.export.otlp_sink import OtlpSink  # noqa: E402
from agentloop.redact import redactor, secret_values, truncator  # noqa: E402
from agentloop.trace.writer import JsonlSink, Pipeline  # noqa: E402

REFERENCE = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"
ROUNDS = 150  # runs' worth of records per variant


class _Ok(http.server.BaseHTTPRequestHandler):
    received = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Ok.received += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def records(round_no: int) -> list[dict]:
    out = []
    for line in REFERENCE.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["type"] == "run":
            rec["run_id"] = f"bench-{round_no}"
        out.append(rec)
    return out


def run(extra: list[object], tmp: Path, tag: str) -> float:
    """Seconds per record written through a fresh pipeline per round (as per run)."""
    batches = [records(i) for i in range(ROUNDS)]
    n = sum(map(len, batches))
    total = 0.0
    for i, batch in enumerate(batches):
        sinks = [JsonlSink(tmp / f"{tag}-{i}.jsonl"), *extra]
        pipe = Pipeline(sinks, [redactor(secret_values()), truncator(64_000)], background=False)
        t0 = time.perf_counter()
        for rec in batch:
            pipe.write(rec)
        total += time.perf_counter() - t0
        sinks[0].close()
    return total / n


def main() -> None:
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base = run([], tmp, "jsonl")
        live = OtlpSink(f"http://127.0.0.1:{port}")
        alive = run([live], tmp, "live")
        t0 = time.perf_counter()
        live.close()
        close_live = time.perf_counter() - t0
        dead_sink = OtlpSink(f"http://127.0.0.1:{free_port()}")
        dead = run([dead_sink], tmp, "dead")
        t0 = time.perf_counter()
        dead_sink.close()
        close_dead = time.perf_counter() - t0
    server.shutdown()
    print(f"records per variant: {ROUNDS * len(records(0))} ({ROUNDS} runs of the reference trace)")
    print(f"JSONL sink alone           {base * 1e6:8.1f} us/record")
    print(
        f"+ OTLP sink, live receiver {alive * 1e6:8.1f} us/record  ratio {alive / base:5.2f}  "
        f"(+{(alive - base) * 1e6:.1f} us); close {close_live * 1e3:.0f} ms; "
        f"spans accepted {live.sent}"
    )
    print(
        f"+ OTLP sink, dead collector{dead * 1e6:8.1f} us/record  ratio {dead / base:5.2f}  "
        f"(+{(dead - base) * 1e6:.1f} us); close {close_dead * 1e3:.0f} ms"
    )


if __name__ == "__main__":
    main()
