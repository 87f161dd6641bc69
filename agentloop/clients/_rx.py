"""Kernel receive timestamps for plain-HTTP model streams: when bytes arrived, not when read.

The client stamps each network read when the event loop gets to it; a busy loop makes bytes
that arrived on time look late (issue 28). Linux stamps every received packet itself
(``SO_TIMESTAMPNS``), but hands the stamp over only as ancillary data of ``recvmsg``, which
neither asyncio's transports nor anyio expose (and ``SIOCGSTAMPNS`` answers ENOENT on TCP). So
this is an httpcore network backend of its own for ``http://`` endpoints (the simulator, a local
llama-server): a non-blocking socket read with ``recvmsg`` when the loop says it is readable,
each read's kernel stamp kept on the stream (:attr:`StampedStream.rx_ns`, on the
``perf_counter_ns`` clock) for :func:`agentloop.clients._stream.read_sse` to stamp its events
with. TCP gives the stamp of the last packet a read took: an event that shared a read with
later ones is still stamped late by at most the loop's lag, never early, so the lag bound of
:mod:`agentloop.clients._lag` still holds; what changes is the error itself. ``https://``
endpoints keep the SDK's own transport (TLS over this socket is not done here).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; the constant Python omits
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
_TS = struct.Struct("qq")  # struct timespec: seconds, nanoseconds (CLOCK_REALTIME)
_ANC = socket.CMSG_SPACE(_TS.size)


class StampedStream(httpcore2.AsyncNetworkStream):
    """One TCP connection, read with ``recvmsg``; ``rx_ns`` is the last read's kernel stamp."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rx_ns: int | None = None  # perf_counter_ns of the last read's last packet

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        data, anc, _flags, _addr = self.sock.recvmsg(max_bytes, _ANC)
                    except BlockingIOError:
                        await _readable(loop, self.sock)
                        continue
                    self._stamp(anc)
                    return data
        except TimeoutError as exc:
            raise httpcore2.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore2.ReadError(str(exc)) from exc

    def _stamp(self, anc: list[tuple[int, int, bytes]]) -> None:
        now = time.perf_counter_ns()
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(raw) >= _TS.size:
                sec, nsec = _TS.unpack_from(raw)
                # the offset read now, not once: a step of the wall clock moves it
                self.rx_ns = min(now, sec * 1_000_000_000 + nsec - _clock_offset())
                return
        self.rx_ns = now  # no stamp came with it: the loop's own time

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await asyncio.get_running_loop().sock_sendall(self.sock, buffer)
        except TimeoutError as exc:
            raise httpcore2.WriteTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore2.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self.sock.close()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("kernel-stamped streams are plain HTTP only")

    def get_extra_info(self, info: str) -> Any:
        if info == "socket":
            return self.sock
        if info == "is_readable":  # the pool asks before reusing an idle connection
            try:
                self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # data or EOF
            except OSError:  # nothing to read: idle and open
                return False
            return True
        return None


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    fut = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await fut
    finally:
        loop.remove_reader(fd)


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
        return StampedStream(sock)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("kernel-stamped streams are TCP only")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


OFF_ENV = "AGENTLOOP_KERNEL_STAMPS"  # "off": the loop's own instants (the benchmark's side by side)


def enabled() -> bool:
    """Whether clients read plain-HTTP streams with kernel stamps (on unless turned off)."""
    return os.environ.get(OFF_ENV, "").lower() not in ("off", "0", "no", "false")


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
