"""Fault injection: the faults a simulator is given, which fire on a request, and their replies.

A :class:`Fault` names the 1-based model request it fires on (or every one). Before a turn is
planned, ``reset`` and the status faults answer instead of it (:func:`refuse`); ``badgzip``
answers once the turn is planned (:func:`bad_gzip`). The in-stream kinds are handed to the pacing
as :class:`~agentloop.sim._stream.StreamFault` (:func:`in_stream`), applied after
``after_tokens`` visible tokens of a stream (see ``_stream``), or to a whole answer's bytes
(:func:`whole_reply`).
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Iterable
from dataclasses import dataclass

from agentloop.errors import ConfigError
from agentloop.sim import _http
from agentloop.sim._stream import StreamFault

FAULT_KINDS = ("429", "500", "503", "reset", "cut", "stall", "malformed", "endless", "badgzip")
IN_STREAM = ("cut", "stall", "malformed", "endless")
_STATUS_FAULTS = {
    "429": (429, "rate_limit_exceeded", "Rate limit reached (simulated)."),
    "500": (500, "server_error", "The server had an error (simulated)."),
    "503": (503, "server_error", "The engine is overloaded (simulated)."),
}
Headers = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault on the ``on_request``-th model request (1-based), or on ``every`` request.

    ``429`` (with Retry-After), ``500``, ``503``: an error reply at once. ``reset``: the TCP
    connection is reset before any header. In a stream, after ``after_tokens`` visible tokens:
    ``cut`` closes the connection with no terminal event, ``stall`` sends nothing for
    ``stall_s`` seconds then goes on (the rest keeps its pace), ``malformed`` sends an SSE event
    whose data is not JSON, ``endless`` never ends the stream (filler deltas at pace until the
    client hangs up). ``badgzip``: the body says ``Content-Encoding: gzip`` but is not gzip.
    ``retry_after_date``: a 429's Retry-After is an HTTP date (RFC 9110), without retry-after-ms.
    """

    kind: str
    on_request: int | None = None
    every: bool = False
    retry_after_s: float = 1.0
    after_tokens: int = 0
    stall_s: float = 5.0
    retry_after_date: bool = False

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ConfigError(f"unknown fault kind {self.kind!r} (known: {', '.join(FAULT_KINDS)})")
        if self.on_request is None and not self.every:
            raise ConfigError(f"fault {self.kind!r} needs on_request=N or every=True")

    def fires_on(self, number: int) -> bool:
        return self.every or self.on_request == number


def firing(faults: Iterable[Fault], number: int) -> list[Fault]:
    """The faults that fire on request ``number``, in the order they were given."""
    return [f for f in faults if f.fires_on(number)]


def refuse(
    writer: asyncio.StreamWriter, req: _http.Request, faults: list[Fault], rid: Headers
) -> bool | None:
    """Answer with the first ``reset`` or status fault, if one fired: whether the connection
    lives on; ``None`` when no such fault fired (the turn is planned)."""
    for f in faults:
        if f.kind == "reset":
            _http.reset(writer)
            return False
        if f.kind in _STATUS_FAULTS:
            status, code, msg = _STATUS_FAULTS[f.kind]
            extra = rid.copy()
            if f.kind == "429" and f.retry_after_date:
                when = email.utils.formatdate(time.time() + f.retry_after_s, usegmt=True)
                extra.append(("retry-after", when))
            elif f.kind == "429":
                extra += [
                    ("retry-after", f"{f.retry_after_s:g}"),
                    ("retry-after-ms", f"{f.retry_after_s * 1000:g}"),
                ]
            kind = "requests" if status == 429 else "server_error"
            body = _http.error_body(msg, kind, code)
            writer.write(_http.json_response(status, body, req.keep_alive, extra))
            return True
    return None


def in_stream(faults: list[Fault]) -> list[StreamFault]:
    """The faults applied while an answer is written (after ``after_tokens`` visible tokens)."""
    return [StreamFault(f.after_tokens, f.kind, f.stall_s) for f in faults if f.kind in IN_STREAM]


def wants_bad_gzip(faults: list[Fault]) -> bool:
    return any(f.kind == "badgzip" for f in faults)


def bad_gzip(
    writer: asyncio.StreamWriter, req: _http.Request, stream: bool, extra: Headers
) -> bool:
    """A reply whose body claims gzip but is not: the client's decoder must fail cleanly."""
    junk = b"this is not gzip data \x00\x01\x02" * 4
    gz = [("Content-Encoding", "gzip")]
    if stream:
        writer.write(
            _http.sse_head(req.keep_alive, [*extra, *gz]) + _http.chunk(junk) + _http.LAST_CHUNK
        )
    else:
        writer.write(_http.json_response(200, junk, req.keep_alive, [*extra, *gz]))
    return False


def whole_reply(
    req: _http.Request, body: bytes, extra: Headers, faults: list[StreamFault]
) -> tuple[bytes, bool]:
    """A non-streamed answer's bytes, ``malformed`` (half the body) or ``cut`` (the connection
    closes inside the body) applied, and whether the connection lives on."""
    kinds = {f.kind for f in faults}
    if "malformed" in kinds:
        return _http.json_response(200, body[: len(body) // 2], req.keep_alive, extra), True
    data = _http.json_response(200, body, req.keep_alive, extra)
    if "cut" in kinds:
        return data[: len(data) - len(body) // 2], False
    return data, True
