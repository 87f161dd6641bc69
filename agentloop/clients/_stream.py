"""The streaming hot path: raw SSE bytes -> one assembled model turn with its timing.

Reads the response body as bytes, frames SSE itself and parses each ``data:`` payload with
orjson; no pydantic model is built per event. One clock reading per network read: every event
that arrived in the same read arrived at the same instant.

What one call may buffer is capped (``max_chars``: text, tool arguments and reasoning text kept,
and any unfinished event): a stream that never ends raises :class:`StreamTooLarge` instead of
growing memory until a wall-time limit. Chat servers differ (see ``agentloop.sim._chat``):
``reasoning_content`` / ``reasoning`` deltas are kept as hidden reasoning text, a ``timings``
object (llama.cpp) is kept as the server's own timing, and a stream without ``[DONE]`` ends well
at the body's end once a ``finish_reason`` came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any, Protocol

import orjson

from agentloop.types import ToolCall, Usage


class RxClock(Protocol):
    """Where a stream keeps its last read's receive instant (``perf_counter_ns``)."""

    rx_ns: int | None


class StreamBroken(Exception):
    """The stream ended or turned unreadable before its terminal event (retryable)."""


class StreamTooLarge(Exception):
    """One call buffered more than its cap without a terminal event (an endless stream)."""


DEFAULT_MAX_CHARS = 32 * 1024 * 1024  # per call: far above any real answer, far below trouble


class StreamErrorEvent(Exception):
    """The server reported an error inside the stream (``error`` / ``response.failed``)."""

    def __init__(self, message: str, code: str | None, retryable: bool) -> None:
        super().__init__(message)
        self.code, self.retryable = code, retryable


_RETRYABLE_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "server_is_overloaded",
        "slow_down",
        "internal_error",
        "overloaded",
        "timeout",
    }
)
_HIDDEN = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})


class _Call:
    __slots__ = ("args", "id", "name")

    def __init__(self, id: str, name: str, args: str) -> None:
        self.id, self.name = id, name
        self.args: list[str] = [args] if args else []


def _error_event(err: Any, fallback: str) -> StreamErrorEvent:
    err = err if isinstance(err, dict) else {}
    code = err.get("code") or err.get("type")
    message = err.get("message") or fallback
    return StreamErrorEvent(
        str(message), str(code) if code else None, code is None or str(code) in _RETRYABLE_CODES
    )


class Turn:
    """Accumulates one streamed turn: text, tool calls, usage and the instants of its events."""

    def __init__(self, api: str, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.api = api
        self.max_chars = max_chars
        self.size = 0  # characters kept so far (text, arguments, reasoning)
        self.reasoning: list[dict[str, Any]] = []  # Responses reasoning items, as sent
        self.reasoning_text: list[str] = []  # Chat reasoning_content deltas
        self.server_timings: dict[str, Any] | None = None
        self.usage_seen = False
        self.on_event = self._responses if api == "responses" else self._chat
        self.text: list[str] = []
        self.calls: dict[Any, _Call] = {}
        self.usage = Usage()
        self.model = ""
        self.service_tier: str | None = None
        self.finish_reason: str | None = None
        self.t_first: int | None = None
        self.t_first_visible: int | None = None
        self.t_last: int | None = None
        self.t_end: int | None = None
        self.t_read = perf_counter_ns()  # the last network read (made once headers are in)
        self.chunks = 0

    # -- results -------------------------------------------------------------------------------

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(c.id, c.name, "".join(c.args)) for c in self.calls.values())

    # -- event handlers: return True on the terminal event --------------------------------------

    def _mark(self, now: int, visible: bool, size: int = 0) -> None:
        self.size += size
        if self.size > self.max_chars:
            raise StreamTooLarge(
                f"more than {self.max_chars} characters in one response without its end"
            )
        if self.t_first is None:
            self.t_first = now
        if visible and self.t_first_visible is None:
            self.t_first_visible = now
        self.t_last = now
        self.chunks += 1

    def _responses(self, ev: dict[str, Any], now: int) -> bool:
        t = ev.get("type")
        if t == "response.output_text.delta":
            if ev.get("delta"):
                self.text.append(ev["delta"])
                self._mark(now, True, len(ev["delta"]))
        elif t == "response.function_call_arguments.delta":
            if ev.get("delta"):
                call = self.calls.get(ev.get("item_id")) or self.calls.get(ev.get("output_index"))
                if call is None:
                    call = self.calls[ev.get("item_id")] = _Call("", "", "")
                call.args.append(ev["delta"])
                self._mark(now, True, len(ev["delta"]))
        elif t in _HIDDEN:
            if ev.get("delta"):
                self._mark(now, False, len(ev["delta"]))
        elif t == "response.output_item.added" or t == "response.output_item.done":
            item = ev.get("item") or {}
            if item.get("type") == "reasoning":
                if t == "response.output_item.done":  # the final item: encrypted content whole
                    self.reasoning.append(item)
            elif item.get("type") == "function_call":
                key = item.get("id") or ev.get("output_index")
                call = self.calls.get(key)
                if call is None:
                    call = self.calls[key] = _Call(
                        item.get("call_id") or item.get("id") or "", item.get("name") or "", ""
                    )
                if not call.args and item.get("arguments"):  # never streamed: take it whole
                    call.args.append(item["arguments"])
                call.id = call.id or item.get("call_id") or ""
                call.name = call.name or item.get("name") or ""
        elif t == "response.completed" or t == "response.incomplete":
            self._final_responses(ev.get("response") or {}, t)
            self.t_end = now
            return True
        elif t == "response.failed":
            raise _error_event((ev.get("response") or {}).get("error"), "response failed")
        elif t == "error":
            raise _error_event(ev.get("error") or ev, "error event")
        return False

    def _final_responses(self, r: dict[str, Any], t: str) -> None:
        u = r.get("usage") or {}
        self.usage = Usage(
            input_tokens=u.get("input_tokens") or 0,
            output_tokens=u.get("output_tokens") or 0,
            reasoning_tokens=(u.get("output_tokens_details") or {}).get("reasoning_tokens") or 0,
            cached_input_tokens=(u.get("input_tokens_details") or {}).get("cached_tokens") or 0,
        )
        self.model = r.get("model") or ""
        self.service_tier = r.get("service_tier")
        self.usage_seen = bool(u)
        if not self.reasoning:  # a server that sent its reasoning items only in the final object
            self.reasoning = [
                it
                for it in r.get("output") or ()
                if isinstance(it, dict) and it.get("type") == "reasoning"
            ]
        if t == "response.incomplete":
            self.finish_reason = (r.get("incomplete_details") or {}).get("reason") or "incomplete"
        else:
            self.finish_reason = "tool_calls" if self.calls else "stop"

    def _chat(self, ev: dict[str, Any], now: int) -> bool:
        if ev.get("error"):
            raise _error_event(ev["error"], "error event")
        choices = ev.get("choices")
        if choices:
            ch = choices[0]
            delta = ch.get("delta")
            if delta:
                if delta.get("content"):
                    self.text.append(delta["content"])
                    self._mark(now, True, len(delta["content"]))
                if delta.get("tool_calls"):
                    self._chat_tools(delta["tool_calls"], now)
                thought = delta.get("reasoning_content") or delta.get("reasoning")
                if thought and isinstance(thought, str):
                    self.reasoning_text.append(thought)
                    self._mark(now, False, len(thought))
            if ch.get("finish_reason"):
                self.finish_reason = ch["finish_reason"]
        if ev.get("timings") and isinstance(ev["timings"], dict):
            self.server_timings = ev["timings"]
        u = ev.get("usage")
        if u:
            self.usage_seen = True
            self.usage = Usage(
                input_tokens=u.get("prompt_tokens") or 0,
                output_tokens=u.get("completion_tokens") or 0,
                reasoning_tokens=(u.get("completion_tokens_details") or {}).get("reasoning_tokens")
                or 0,
                cached_input_tokens=(u.get("prompt_tokens_details") or {}).get("cached_tokens")
                or 0,
            )
        if not self.model and ev.get("model"):
            self.model = ev["model"]
        if ev.get("service_tier"):
            self.service_tier = ev["service_tier"]
        return False  # the terminal event is the [DONE] line

    def _chat_tools(self, deltas: list[dict[str, Any]], now: int) -> None:
        for tc in deltas:
            idx = tc.get("index", 0)
            call = self.calls.get(idx)
            if call is None:
                call = self.calls[idx] = _Call("", "", "")
            if tc.get("id"):
                call.id = tc["id"]
            fn = tc.get("function") or {}
            if fn.get("name") and not call.name:
                call.name = fn["name"]
            if fn.get("arguments"):
                call.args.append(fn["arguments"])
                self._mark(now, True, len(fn["arguments"]))


async def read_sse(chunks: AsyncIterator[bytes], turn: Turn, rx: RxClock | None = None) -> None:
    """Feed every SSE event of ``chunks`` to ``turn`` until its terminal event.

    Each read's events are stamped with ``rx.rx_ns`` (the kernel's receive time of the read that
    brought them, :mod:`agentloop.clients._rx`) when the stream has it, else with the loop's time.
    Raises :class:`StreamBroken` on EOF before the terminal event or on an unparseable event.
    """
    on_event = turn.on_event
    loads = orjson.loads
    buf = b""
    pending: list[bytes] = []
    pending_size = 0
    cap = turn.max_chars
    async for chunk in chunks:
        now = turn.t_read = (rx.rx_ns if rx is not None else None) or perf_counter_ns()
        if buf:
            chunk = buf + chunk
        lines = chunk.split(b"\n")
        buf = lines.pop()
        if len(buf) > cap:
            raise StreamTooLarge(f"an event of more than {cap} bytes without its end")
        for line in lines:
            if line[:5] == b"data:":
                pending.append(line[6:] if line[5:6] == b" " else line[5:])
                pending_size += len(line)
                if pending_size > cap:
                    raise StreamTooLarge(f"an event of more than {cap} bytes without its end")
                continue
            if (line and line != b"\r") or not pending:
                continue  # event:, id:, comments; or a blank line with nothing to dispatch
            data = pending[0] if len(pending) == 1 else b"\n".join(pending)
            pending.clear()
            pending_size = 0
            if data[-1:] == b"\r":
                data = data[:-1]
            if data == b"[DONE]":
                turn.t_end = now
                return
            try:
                ev = loads(data)
            except orjson.JSONDecodeError:
                raise StreamBroken(f"malformed event: {data[:80]!r}") from None
            if type(ev) is not dict:
                raise StreamBroken(f"malformed event: {data[:80]!r}")
            if on_event(ev, now):
                return
    if turn.finish_reason and turn.api == "chat":
        turn.t_end = perf_counter_ns()  # a chat server that ends without [DONE] but said it all
        return
    raise StreamBroken("stream ended before its terminal event")
