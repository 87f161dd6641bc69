"""The client's own lateness: a call streamed beside a busy event loop is marked, a quiet one not.

Real parts: the simulator is a real HTTP server, the client the production one; the load is a
CPU-bound task on the same event loop (busy work in chunks, no sleeps), as a run setting up a
jail or redacting a large output would be.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import os
import termios
import threading
import time

import pytest

from agentloop.clients import _rx
from agentloop.clients.openai_client import OpenAIClient
from agentloop.config.tiers import SpeedProfile, Tier
from agentloop.loop.model_span import lateness_attrs
from agentloop.model.timing import LATE_FRACTION, call_metrics
from agentloop.sim import SimServer
from agentloop.trace import attrs as A
from agentloop.trace.fields import Where
from agentloop.trace.span_attrs import model_attrs
from agentloop.types import Message, ModelRequest, ModelResponse

PROFILE = SpeedProfile(base_latency_s=0.05, prefill_tps=20000, output_tps=100)
REQUEST = ModelRequest((Message("system", "Be brief."), Message("user", "Say a lot.")), (), 0)
TIER = Tier(name="sim-lag", base_url="sim", model="sim-lag", api="chat", profile=PROFILE)


def busy(ms: float) -> None:
    """Hold the event loop's thread with CPU work for ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += 1


async def hog(stop: asyncio.Event, chunk_ms: float) -> None:
    """A CPU-bound task beside the stream: ``chunk_ms`` of busy work, then one loop turn."""
    while not stop.is_set():
        busy(chunk_ms)
        await asyncio.sleep(0)


async def one_call(chunk_ms: float | None, server_on_loop: bool = False) -> ModelResponse:
    async with SimServer(profile=PROFILE, filler_tokens=100) as sim:  # ~1 s of decode
        client = OpenAIClient(TIER, base_url=sim.base_url, server_on_loop=server_on_loop)
        stop = asyncio.Event()
        try:
            await client.complete(REQUEST)  # warm the connection
            load = asyncio.create_task(hog(stop, chunk_ms)) if chunk_ms else None
            resp = await asyncio.wait_for(client.complete(REQUEST), 30)
            stop.set()
            if load:
                await asyncio.wait_for(load, 5)
        finally:
            stop.set()
            await client.aclose()
    return resp


def span_attrs(resp: ModelResponse) -> dict[str, object]:
    return lateness_attrs(resp, call_metrics(resp.timing, resp.usage))


@pytest.mark.parametrize("stamps", ["off", "loop"])
async def test_a_call_read_by_a_busy_loop_is_marked_under_load(
    stamps: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream the event loop reads itself (an https endpoint's; here forced with
    ``AGENTLOOP_KERNEL_STAMPS``: the loop's own instants, or kernel stamps the loop takes) is
    marked when the loop was busy while it streamed."""
    monkeypatch.setenv(_rx.OFF_ENV, stamps)
    resp = await one_call(chunk_ms=60)  # each chunk blocks every read due in it by up to 60 ms
    a = span_attrs(resp)
    assert a[A.TIMING_UNDER_LOAD] is True
    assert a[A.LOOP_LAG_MAX_S] >= 0.04  # type: ignore[operator]
    decode = call_metrics(resp.timing, resp.usage).decode_s
    assert decode and a[A.TIMING_ERROR_S] > LATE_FRACTION * decode  # type: ignore[operator]
    # and the trace's typed view reads it back
    typed = model_attrs(a | {A.WAIT_NS: 0}, Where("t.jsonl", 3))
    assert typed.under_load and typed.timing_error_s == a[A.TIMING_ERROR_S]


@pytest.mark.parametrize("on_loop", [True, False])
async def test_a_simulator_on_the_loop_is_as_late_as_the_loop(on_loop: bool) -> None:
    """Read by its reader thread, a stream is stamped as its bytes arrive; but a simulator on
    the same loop (the embedded default) sends them late when the loop is blocked. Its client
    (``server_on_loop``) takes the loop's lag as the call's bound; a client whose server is
    elsewhere keeps its stamps' own, smaller one."""
    resp = await one_call(chunk_ms=60, server_on_loop=on_loop)
    a = span_attrs(resp)
    lag, bound = a[A.LOOP_LAG_MAX_S], a[A.TIMING_ERROR_S]
    assert isinstance(lag, float) and isinstance(bound, float) and lag >= 0.04
    if on_loop:
        assert bound >= lag and a[A.TIMING_UNDER_LOAD] is True
    else:
        assert bound < lag, "the stamps' own bound: the loop's block is not theirs"


def run_queue_wait_s() -> float:
    """How long this thread has waited for a CPU so far, by the kernel's own account
    (``/proc/self/task/TID/schedstat``, its second field): lateness no client can avoid."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


@pytest.mark.pacing
async def test_a_quiet_call_is_not_marked() -> None:
    """Nothing on the loop: the call's bound is the sampler's own granularity plus at most
    what the kernel made this thread wait for a CPU (a busy machine's share, which the bound
    rightly counts). So it holds beside any CPU-bound job; on an idle machine the call is not
    marked, and it is marked only if the kernel really held the thread."""
    waited = run_queue_wait_s()
    resp = await one_call(chunk_ms=None)
    waited = run_queue_wait_s() - waited
    a = span_attrs(resp)
    bound = a[A.TIMING_ERROR_S]
    assert isinstance(bound, float)
    assert bound < 0.02 + waited, (a, waited)
    assert a[A.TIMING_UNDER_LOAD] is False or waited > 0.01, (a, waited)


def test_a_call_the_client_did_not_measure_has_no_lateness_keys() -> None:
    from agentloop.types import CallTiming, Usage

    resp = ModelResponse("hi", (), Usage(), CallTiming(t_send=1, t_end=2))
    assert span_attrs(resp) == {}
    typed = model_attrs({A.WAIT_NS: 0}, Where("t.jsonl", 3))  # an old trace's shape
    assert typed.timing_error_s is None and typed.under_load is False


def test_a_damaged_bound_names_its_field() -> None:
    from agentloop.errors import TraceFileError

    with pytest.raises(TraceFileError, match=A.TIMING_ERROR_S):
        model_attrs({A.WAIT_NS: 0, A.TIMING_ERROR_S: "late"}, Where("t.jsonl", 3))


TASK = """\
name: busy-neighbour
prompt: Say something long.
tier: sim-standard
script:
  - text: >-
      {text}
    tool_calls:
      - {{name: finish, arguments: {{summary: done}}}}
"""


@pytest.mark.parametrize("stamps", ["off", "thread"])
async def test_a_run_beside_a_busy_loop_says_so_in_its_report_and_what_if(
    tmp_path, monkeypatch, stamps
) -> None:  # type: ignore[no-untyped-def]
    """End to end: run_task beside a CPU-bound task, its stream read by the loop (as an https
    endpoint's is), or by its reader thread from the embedded simulator on the run's loop (its
    bytes late as the loop was); the report and the what-if say how many calls were measured
    under load, and by how much."""
    if stamps == "off":
        monkeypatch.setenv(_rx.OFF_ENV, "off")
    from agentloop.analysis.graph import build_graph
    from agentloop.analysis.report import build_report, report_json
    from agentloop.analysis.report_text import render_report
    from agentloop.analysis.whatif import Scenario, whatif, with_lateness
    from agentloop.analysis.whatif_text import render_whatif
    from agentloop.api import run_task
    from agentloop.events import RunEvent
    from agentloop.trace.reader import load_trace

    task = tmp_path / "t.yaml"
    task.write_text(TASK.format(text=" ".join(["a careful sentence of words"] * 4)))
    calling, stop = asyncio.Event(), asyncio.Event()

    async def hog_beside_the_call() -> None:  # the run's set-up and end are not the subject
        await calling.wait()
        await hog(stop, 60)

    def sink(event: RunEvent) -> None:
        if event.kind == "model_start":
            calling.set()
        elif event.kind == "model_end":
            stop.set()

    load = asyncio.create_task(hog_beside_the_call())
    try:
        result = await asyncio.wait_for(
            run_task(task, trace_dir=tmp_path / "traces", events=sink), 60
        )
    finally:
        calling.set()
        stop.set()
        await asyncio.wait_for(load, 5)
    assert result.status == "ok" and result.trace_path
    trace = load_trace(result.trace_path)
    report = build_report(build_graph(trace))
    late = report_json(report)["lateness"]
    assert late["measured"] == 1 and late["under_load"] == 1 and late["worst_bound_s"] >= 0.04
    assert "1 of 1 model calls measured under load" in render_report(report)
    w = with_lateness(whatif(build_graph(trace), Scenario.multipliers(2.0)), trace)
    assert "measured under load: 1 of 1 model calls" in render_whatif(w)
    from agentloop.export.html import report_html
    from agentloop.suite.records import trace_figures

    assert "1 of 1 model calls measured under load" in report_html(trace)
    figures = trace_figures(trace)  # what a suite's run record keeps
    assert figures["calls_measured"] == 1 and figures["calls_under_load"] == 1


async def test_the_sampler_runs_only_while_a_call_watches() -> None:
    """One sampler per loop, started by the first watch and gone with the last: a loop with no
    call streaming runs nothing of it; a block under way at a call's end still counts."""
    from agentloop.clients._lag import SAMPLE_NS, loop_lag

    lag = loop_lag()
    assert lag is loop_lag()
    a, b = lag.watch(), lag.watch()
    await asyncio.sleep(0.01)
    task = lag._task
    assert task is not None and not task.done()
    lag.done(a)
    busy(30)  # the loop blocked with b still watching, ended before the sampler wakes
    lag.done(b)
    assert b.max_ns >= 25_000_000 and b.bound_ns == b.max_ns + SAMPLE_NS
    await asyncio.wait_for(task, 1)  # no watch left: the sampler ends
    assert lag._task is None


async def test_a_read_after_a_blocked_loop_is_stamped_when_its_bytes_arrived() -> None:
    """Kernel receive stamps: bytes that arrived while the loop was blocked keep their arrival
    instant (between the send and the block's end), not the instant the loop read them."""
    from agentloop.clients._rx import StampedBackend, StampedStream, _clock_offset

    accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

    async def serve(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.set_result(w)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await StampedBackend().connect_tcp("127.0.0.1", port, timeout=10)
    assert isinstance(stream, StampedStream)
    writer = await accepted
    try:
        offset = _clock_offset()  # CLOCK_REALTIME - perf_counter: the stamp's mapping
        sent = time.perf_counter_ns()
        os.write(writer.transport.get_extra_info("socket").fileno(), b"data: 1\n\n")  # sent now
        # wait until the kernel has queued the bytes on the client's socket (its receive stamp
        # taken), or the stream's reader thread has taken them: on a busy machine loopback
        # delivery can wait for the softirq thread
        waiting = array.array("i", [0])
        for _ in range(10_000):
            fcntl.ioctl(stream.sock.fileno(), termios.FIONREAD, waiting)
            if waiting[0] or stream._chunks:
                break
            await asyncio.sleep(0.001)
        arrived = time.perf_counter_ns()
        busy(50)  # the loop is held while the bytes wait in the socket
        unblocked = time.perf_counter_ns()
        assert b"data: 1\n\n" == await stream.read(1024, timeout=10)
        # the stamp is CLOCK_REALTIME mapped onto perf_counter: allow that mapping 100 us
        # (microseconds apart under load), plus any step of the wall clock while the test ran
        # (a virtual machine's clock is corrected now and then; measured, not assumed), far
        # inside the 50 ms block it must not fall after
        slack = 100_000 + abs(_clock_offset() - offset)
        assert stream.rx_ns is not None and sent - slack <= stream.rx_ns <= arrived + slack, (
            f"stamp {stream.rx_ns - sent} ns after the send, the bytes seen {arrived - sent} ns "
            f"after it, the clocks' mapping moved {slack - 100_000} ns"
        )
        assert stream.rx_ns < unblocked
    finally:
        await stream.aclose()
        writer.close()
        server.close()
        await server.wait_closed()


async def test_a_call_on_the_simulator_is_read_with_kernel_stamps() -> None:
    """A run's simulator client reads its streams with receive stamps (plain HTTP)."""
    from agentloop.clients import _rx
    from agentloop.wiring.clients import _http_client

    http = _http_client()
    try:
        pool = http._transport._pool
        assert isinstance(pool._network_backend, _rx.StampedBackend)
    finally:
        await http.aclose()


PACED = """\
import socket, sys, time
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
c, _ = srv.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.recv(16)
for i in range(40):  # 40 events 15 ms apart, each with the instant it was sent
    c.sendall(b"data: %d %d\\n\\n" % (i, time.perf_counter_ns()))
    time.sleep(0.015)
c.sendall(b"data: [DONE]\\n\\n")
c.recv(16)
"""


async def test_a_stream_read_by_its_own_thread_keeps_arrival_instants_beside_a_busy_loop() -> None:
    """The reader thread: beside a loop held in 50 ms slices, every event keeps the instant it
    arrived to within its read's own error bound (plus what the kernel made the reader wait for
    a CPU), never earlier than it was sent; the loop itself got to the bytes late. The server is
    another process, so its pacing owes nothing to this loop; perf_counter is CLOCK_MONOTONIC,
    one clock for both processes."""
    import sys

    from agentloop.clients._rx import SLACK_NS, StampedBackend, StampedStream

    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PACED, stdout=asyncio.subprocess.PIPE
    )
    assert server.stdout is not None
    stream = None
    try:
        port = int(await asyncio.wait_for(server.stdout.readline(), 30))
        stream = await StampedBackend().connect_tcp("127.0.0.1", port, timeout=10)
        assert isinstance(stream, StampedStream) and stream._thread is not None
        stop = asyncio.Event()
        load = asyncio.create_task(hog(stop, 50))
        waited0 = stream.run_wait_ns()
        await stream.write(b"go")
        seen: list[tuple[int, int, int, int]] = []  # (sent, stamp, its bound, loop's read)
        buf, done = b"", False
        try:
            while not done:
                buf += await stream.read(65536, timeout=30)
                read_at, stamp = time.perf_counter_ns(), stream.rx_ns
                bound = stream.error_of(stamp)
                assert stamp is not None and bound is not None
                *events, buf = buf.split(b"\n\n")
                for ev in events:
                    done = done or ev == b"data: [DONE]"
                    if not done:
                        seen.append((int(ev.split()[2]), stamp, bound, read_at))
        finally:
            stop.set()
            await asyncio.wait_for(load, 5)
        starved = stream.run_wait_ns() - waited0
        await stream.write(b"bye")
    finally:
        if stream is not None:
            await stream.aclose()
        if server.returncode is None:
            server.kill()
        await server.wait()
    assert len(seen) == 40
    for sent, stamp, bound, _ in seen:
        assert sent - 100_000 <= stamp, "a stamp before its send"  # the clocks' mapping: 100 us
        assert stamp - sent <= bound + starved + SLACK_NS, (stamp - sent, bound, starved)
    assert max(read_at - stamp for _, stamp, _, read_at in seen) >= 40_000_000  # loop was late
