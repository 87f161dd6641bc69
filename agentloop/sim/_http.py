"""A minimal HTTP/1.1 server side for the simulator: request parsing, JSON replies, chunked streams.

Just what the OpenAI SDK (httpx2) and curl send: a request line, headers, a body delimited by
``Content-Length`` (or chunked), keep-alive by default. Responses are ``Content-Length`` JSON or
``Transfer-Encoding: chunked`` server-sent events, so a connection survives a stream and the SDK's
pool reuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
MAX_BODY = 64 * 1024 * 1024


class BadRequest(Exception):
    """The bytes on the wire are not an HTTP request we can serve; answered with 400 and close."""


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed HTTP request."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    keep_alive: bool


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request | None:
    """Read one request; ``None`` when the peer closed the connection between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest("connection closed inside the request head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest("request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise BadRequest(f"bad request line {lines[0]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":  # curl, for large bodies
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            raise BadRequest("request body too large")
        body = await reader.readexactly(length) if length else b""
    conn = headers.get("connection", "").lower()
    keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
    return Request(method.upper(), target.split("?", 1)[0], headers, body, keep)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # trailer end (no trailers expected)
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def head_bytes(status: int, headers: list[tuple[str, str]], keep_alive: bool) -> bytes:
    """The status line and headers of a response."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines.append(f"Connection: {'keep-alive' if keep_alive else 'close'}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def json_response(
    status: int, body: bytes, keep_alive: bool, extra: Sequence[tuple[str, str]] = ()
) -> bytes:
    """A complete response with a JSON body."""
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *extra]
    return head_bytes(status, headers, keep_alive) + body


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> bytes:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


def sse_head(keep_alive: bool, extra: Sequence[tuple[str, str]] = ()) -> bytes:
    """Headers of a chunked server-sent-events stream."""
    return head_bytes(
        200,
        [
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("Cache-Control", "no-cache"),
            ("Transfer-Encoding", "chunked"),
            *extra,
        ],
        keep_alive,
    )


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def reset(writer: asyncio.StreamWriter) -> None:
    """Drop the connection with a TCP reset (SO_LINGER 0), as a crashed proxy would."""
    sock: Any = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
