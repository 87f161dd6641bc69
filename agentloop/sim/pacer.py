"""A simulator's one pacer: writes planned answers at their deadlines within one write budget.

Every stream of a simulator, its routes' included, is counted here (:attr:`Pacer.streaming`):
a stream is written at most once per ``min_chunk_interval_s``, and all of them together at most
about ``write_budget`` times per second (:meth:`Pacer.chunk_interval`); past that, chunks carry
more tokens instead of arriving late. The deadlines themselves are the answer's
:class:`~agentloop.sim._stream.Schedule`, absolute from the request's arrival.
"""

from __future__ import annotations

import asyncio

from agentloop.sim import _http
from agentloop.sim._stream import Schedule, StreamCut, StreamFault, StreamPlan, emit
from agentloop.sim.faults import Headers, whole_reply


class Pacer:
    """Chunking and write budget shared by every stream of one simulator."""

    def __init__(
        self,
        tokens_per_chunk: int,
        min_chunk_interval_s: float,
        write_budget: float,
        headers_after_prefill: bool,
    ) -> None:
        self.tokens_per_chunk = max(1, int(tokens_per_chunk))
        self.min_chunk_interval_s = float(min_chunk_interval_s)
        self.write_budget = float(write_budget)
        # a stream sends nothing, headers included, until base latency and prefill have passed
        self.headers_after_prefill = headers_after_prefill
        self.streaming = 0  # streams being written now

    def chunk_interval(self) -> float:
        return max(self.min_chunk_interval_s, self.streaming / self.write_budget)

    async def stream(
        self,
        writer: asyncio.StreamWriter,
        req: _http.Request,
        plan: StreamPlan,
        sched: Schedule,
        faults: list[StreamFault],
        extra: Headers,
    ) -> bool:
        """Write ``plan`` as a chunked SSE stream paced by ``sched``: whether the connection
        lives on (not after a ``cut`` fault or a client that hung up)."""
        if self.headers_after_prefill:
            delay = sched.t_reason - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)
            if writer.transport.is_closing():
                return False
        writer.write(_http.sse_head(req.keep_alive, extra))
        write = writer.write
        chunk = _http.chunk

        def send(data: bytes) -> None:
            if data:  # an empty chunk would end the chunked body
                write(chunk(data))

        self.streaming += 1
        try:
            await emit(
                send,
                plan,
                sched,
                self.tokens_per_chunk,
                faults,
                writer.transport.is_closing,
                self.chunk_interval,
            )
        except StreamCut:
            return False
        finally:
            self.streaming -= 1
        if writer.transport.is_closing():
            return False
        writer.write(_http.LAST_CHUNK)
        return True

    async def whole(
        self,
        writer: asyncio.StreamWriter,
        req: _http.Request,
        body: bytes,
        sched: Schedule,
        visible: int,
        faults: list[StreamFault],
        extra: Headers,
    ) -> bool:
        """A non-streamed answer: sent whole when its last token is due, faults applied."""
        for f in faults:
            if f.kind == "stall":
                sched.shift(f.stall_s)
        loop = asyncio.get_running_loop()
        delay = sched.due(visible - 1) - loop.time() if visible else sched.t_first - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        data, keep = whole_reply(req, body, extra, faults)
        writer.write(data)
        return keep
