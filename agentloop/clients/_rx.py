"""Receive stamps for plain-HTTP model streams: when bytes arrived, not when the loop read them.

The client stamps each network read when the event loop gets to it; a busy loop makes bytes
that arrived on time look late (issue 28). Linux stamps every received packet itself
(``SO_TIMESTAMPNS``) and hands the stamp over as ancillary data of ``recvmsg``, which neither
asyncio's transports nor anyio expose; so this is an httpcore network backend of its own for
``http://`` endpoints (the simulator, a local llama-server). A read stamps only the LAST packet
it takes, and TCP merges packets that wait unread into one (the merged one keeps the newest
stamp): read from the event loop, every event that waited out a busy loop took the stamp of the
newest, and a call's first token looked as late as the loop (measured: a loop held in 50 ms
slices read a paced stream's first event 151 ms late, its decode 15% short).

So each connection has a reader thread of its own that does nothing but read and stamp: it
waits in a blocking ``recvmsg`` with the GIL released, so the kernel hands it a packet the
moment it arrives, whatever the loop is doing; the loop takes the stamped chunks from a queue
(:meth:`StampedStream.read`, ``rx_ns`` the chunk's stamp, on the ``perf_counter_ns`` clock).
The thread needs the GIL only between two reads; packets that arrive then wait, merged, and
that read's stamp may be late by up to that gap. Each read's error bound is kept
(:meth:`StampedStream.error_of`): 0 for a read that was waiting when its bytes came (a blocked
thread's wake-up aside: microseconds unless every core is busy, :data:`SLACK_NS`); for bytes
that were already queued, their stamp minus the last instant the socket was seen empty. The
request's own instant is the loop's write to the socket (``tx_ns``), which happens when it is
stamped. ``https://`` endpoints keep the SDK's own transport (TLS over this socket is not done
here) and the loop's instants, bounded by its lag (:mod:`agentloop.clients._lag`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; the constant Python omits
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
_TS = struct.Struct("qq")  # struct timespec: seconds, nanoseconds (CLOCK_REALTIME)
_ANC = socket.CMSG_SPACE(_TS.size)
READ_BYTES = 65536  # one recvmsg: a read that takes less found the socket empty after it
QUEUE_BYTES = 8 * 1024 * 1024  # read ahead of the loop at most this much, then wait for it
# a read that was waiting when its bytes came: what its stamp may still be off by (the mapping
# of CLOCK_REALTIME onto perf_counter, and a blocked thread's wake-up with a core free)
SLACK_NS = 1_000_000

OFF_ENV = "AGENTLOOP_KERNEL_STAMPS"  # "off": the loop's own instants; "loop": kernel stamps
# read by the loop, without the reader thread (the benchmark's side by side)


def mode() -> str:
    """``thread`` (the default), ``loop`` or ``off``: how plain-HTTP streams are stamped."""
    v = os.environ.get(OFF_ENV, "").lower()
    return "off" if v in ("off", "0", "no", "false") else "loop" if v == "loop" else "thread"


def enabled() -> bool:
    """Whether clients read plain-HTTP streams with kernel stamps (on unless turned off)."""
    return mode() != "off"


class StampedStream(httpcore2.AsyncNetworkStream):
    """One TCP connection, read with ``recvmsg`` by a thread of its own (or, in ``loop`` mode,
    by the event loop); ``rx_ns`` is the stamp of the chunk :meth:`read` returned last."""

    def __init__(self, sock: socket.socket, threaded: bool = True) -> None:
        self.sock = sock
        self.rx_ns: int | None = None  # perf_counter_ns of the last chunk's last packet
        self.tx_ns: int | None = None  # when the current request's first bytes went out
        self._errs: dict[int, int] = {}  # stamp -> its error bound, reads since tx_ns
        self._loop = asyncio.get_running_loop()
        self._chunks: collections.deque[tuple[bytes | OSError, int, int]] = collections.deque()
        self._lock = threading.Lock()  # the queue's hand-over: chunks, _waiter, _queued
        self._waiter: asyncio.Future[None] | None = None
        self._queued = 0
        self._room = threading.Event()
        self._room.set()
        self._writing = False  # the last operation was a write: a request under way
        self._thread: threading.Thread | None = None
        self._wait0 = 0  # the reader's run-queue wait when the current request went out
        if threaded:
            sock.setblocking(True)  # the thread blocks in recvmsg; writes pass MSG_DONTWAIT
            self._thread = threading.Thread(target=self._reader, name="agentloop-rx", daemon=True)
            self._thread.start()

    def error_of(self, instant: int | None) -> int | None:
        """The error bound of a stamp this stream gave since the request went out (None: not
        one of its stamps)."""
        return None if instant is None else self._errs.get(instant)

    def run_wait_ns(self) -> int:
        """How long the reader thread has waited for a CPU so far (runnable, not running: the
        kernel's own account, ``/proc/self/task/TID/schedstat``); 0 without a reader or where
        the kernel keeps no such account. A read that waited may be late by this much: a
        packet's wake-up that found no core free, while the next packet came."""
        tid = self._thread.native_id if self._thread is not None else None
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                return int(f.read().split()[1])
        except (OSError, ValueError, IndexError):  # no reader, an ended one, no schedstat
            return 0

    # -- the reader thread ----------------------------------------------------------------------

    def _reader(self) -> None:
        """Read until EOF or error, each chunk with its kernel stamp and its error bound; the
        thread owns the socket's close (a close from the loop could hand its fd number to
        another socket while this thread is about to read it)."""
        sock, empty_at = self.sock, time.perf_counter_ns()
        try:
            while True:
                self._room.wait()
                t_call = time.perf_counter_ns()
                try:
                    try:  # already queued: arrived after the socket was last seen empty
                        data, anc, _f, _a = sock.recvmsg(READ_BYTES, _ANC, socket.MSG_DONTWAIT)
                        waited, t_block = False, t_call
                    except BlockingIOError:  # empty now: wait for the next packet
                        empty_at = max(empty_at, t_call)
                        t_block = time.perf_counter_ns()
                        data, anc, _f, _a = sock.recvmsg(READ_BYTES, _ANC)
                        waited = True
                except OSError as exc:
                    self._put(exc, time.perf_counter_ns(), 0)
                    return
                stamp = _stamp(anc)
                # came while it waited (or in the instant before it began), or was queued
                err = max(0, min(stamp, t_block) - t_call) if waited else max(0, stamp - empty_at)
                if len(data) < READ_BYTES:
                    empty_at = max(empty_at, t_call, stamp)  # drained, after its last packet
                self._put(data, stamp, err)
                if not data:
                    return
        finally:
            sock.close()

    def _put(self, data: bytes | OSError, stamp: int, err: int) -> None:
        with self._lock:
            self._chunks.append((data, stamp, err))
            if isinstance(data, bytes):
                self._queued += len(data)
                if self._queued > QUEUE_BYTES:
                    self._room.clear()
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                self._loop.call_soon_threadsafe(_wake, waiter)

    # -- the loop's side ------------------------------------------------------------------------

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                if self._thread is None:
                    data, stamp, err = await self._read_on_loop(max_bytes)
                else:
                    data, stamp, err = await self._next(max_bytes)
        except TimeoutError as exc:
            raise httpcore2.ReadTimeout(str(exc)) from exc
        if isinstance(data, OSError):
            raise httpcore2.ReadError(str(data)) from data
        # never before the last chunk's: two clock mappings may differ by a microsecond
        self.rx_ns = stamp = max(stamp, self.rx_ns or 0)
        self._errs[stamp] = max(err, self._errs.get(stamp, 0))
        self._writing = False
        return data

    async def _next(self, max_bytes: int) -> tuple[bytes | OSError, int, int]:
        while True:
            with self._lock:
                if self._chunks:
                    data, stamp, err = self._chunks[0]
                    if isinstance(data, OSError):  # left queued: every later read fails alike
                        return data, stamp, err
                    if len(data) > max_bytes:  # the rest stays first, with the same stamp
                        self._chunks[0] = (data[max_bytes:], stamp, err)
                        data = data[:max_bytes]
                    else:
                        self._chunks.popleft()
                    self._queued -= len(data)
                    if self._queued <= QUEUE_BYTES:
                        self._room.set()
                    return data, stamp, err
                waiter = self._waiter = self._loop.create_future()
            await waiter

    async def _read_on_loop(self, max_bytes: int) -> tuple[bytes | OSError, int, int]:
        while True:
            try:
                data, anc, _f, _a = self.sock.recvmsg(max_bytes, _ANC)
            except BlockingIOError:
                await _ready(self._loop.add_reader, self._loop.remove_reader, self.sock)
                continue
            except OSError as exc:
                return exc, time.perf_counter_ns(), 0
            return data, _stamp(anc), 0  # (its error: the loop's lag, _lag's bound)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not self._writing:  # a new request's first bytes: their instant is the send
            self._writing, self._errs = True, {}
            self._wait0 = self.run_wait_ns()
            self.tx_ns = time.perf_counter_ns()
        view = memoryview(buffer)
        try:
            async with asyncio.timeout(timeout):
                while view:
                    try:
                        view = view[self.sock.send(view, socket.MSG_DONTWAIT) :]
                    except BlockingIOError:
                        await _ready(self._loop.add_writer, self._loop.remove_writer, self.sock)
        except TimeoutError as exc:
            raise httpcore2.WriteTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore2.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        if self._thread is None:
            self.sock.close()
            return
        # wakes the reader (its recvmsg returns), which closes the socket on its way out
        self._room.set()
        with contextlib.suppress(OSError):  # not connected: the reader has seen its end
            self.sock.shutdown(socket.SHUT_RDWR)

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("kernel-stamped streams are plain HTTP only")

    def get_extra_info(self, info: str) -> Any:
        if info == "socket":
            return self.sock
        if info == "is_readable":  # the pool asks before reusing an idle connection
            if self._thread is not None:
                return bool(self._chunks)  # data or EOF came while it was idle
            try:
                self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # data or EOF
            except OSError:  # nothing to read: idle and open
                return False
            return True
        return None


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _ready(add: Any, remove: Any, sock: socket.socket) -> None:
    """Wait until the loop sees ``sock`` readable (``add_reader``) or writable (``add_writer``)."""
    fut = asyncio.get_running_loop().create_future()
    fd = sock.fileno()
    add(fd, _wake, fut)
    try:
        await fut
    finally:
        remove(fd)


def _stamp(anc: list[tuple[int, int, bytes]]) -> int:
    """A read's kernel stamp on the ``perf_counter_ns`` clock (now, if none came with it)."""
    now = time.perf_counter_ns()
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(raw) >= _TS.size:
            sec, nsec = _TS.unpack_from(raw)
            # the offset read now, not once: a step of the wall clock moves it
            return min(now, int(sec) * 1_000_000_000 + int(nsec) - _clock_offset())
    return now


class StampedBackend(httpcore2.AsyncNetworkBackend):
    """Connects plain TCP sockets with receive timestamps on."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                family, kind, proto, _, addr = infos[0]
                sock = socket.socket(family, kind, proto)
                try:
                    sock.setblocking(False)
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    for opt in socket_options or ():
                        sock.setsockopt(*opt)
                    if local_address:
                        sock.bind((local_address, 0))
                    await loop.sock_connect(sock, addr)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        return StampedStream(sock, threaded=mode() == "thread")

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("kernel-stamped streams are TCP only")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def stamped_transport(verify: Any, limits: httpx2.Limits) -> httpx2.AsyncHTTPTransport:
    """An httpx transport whose connections carry kernel receive stamps (plain HTTP)."""
    transport = httpx2.AsyncHTTPTransport(verify=verify, limits=limits)
    pool = transport._pool  # the one field to swap: httpx builds the pool, we pick its backend
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=pool._ssl_context,
        max_connections=pool._max_connections,
        max_keepalive_connections=pool._max_keepalive_connections,
        keepalive_expiry=pool._keepalive_expiry,
        network_backend=StampedBackend(),
    )
    return transport


def rx_clock(resp: httpx2.Response) -> StampedStream | None:
    """The response's stamped stream, if it came over one."""
    stream = resp.extensions.get("network_stream")
    return stream if isinstance(stream, StampedStream) else None


def stamped_bound(
    rx: StampedStream | None, instants: Iterable[int | None]
) -> tuple[int | None, int | None]:
    """A call's send instant and timing error bound from its stream's own stamps: ``(tx_ns,
    bound)``; ``(None, None)`` where an instant is not a reader thread's stamp (a loop-read
    stream, a chat stream that ended without ``[DONE]``): the loop's lag bounds the call then."""
    if rx is None or rx._thread is None or rx.tx_ns is None:
        return None, None
    errs = [rx.error_of(t) for t in instants if t is not None]
    if not errs or any(e is None for e in errs):
        return None, None
    starved = max(0, rx.run_wait_ns() - rx._wait0)  # the reader's waits for a CPU since
    return rx.tx_ns, max(e for e in errs if e is not None) + starved + SLACK_NS


def _clock_offset() -> int:
    """CLOCK_REALTIME minus ``perf_counter_ns``, read between two perf_counter reads (their
    midpoint), the tightest of three pairs: one read after the other would book the gap between
    the two clock reads (microseconds, more if the thread is preempted there) as an early stamp."""
    best = (1 << 62, 0)
    for _ in range(3):
        t0 = time.perf_counter_ns()
        rt = time.time_ns()
        t1 = time.perf_counter_ns()
        best = min(best, (t1 - t0, rt - (t0 + t1) // 2))
    return best[1]
