"""Frozen values that cross agentloop's seams: messages, tool calls and results, usage, timings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for; ``arguments`` is the raw JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ReasoningItem:
    """A reasoning output item (Responses API) as the server sent it, for sending back verbatim.

    ``raw`` is the item's JSON from its ``response.output_item.done`` event (id, summary,
    ``encrypted_content`` when asked for): later requests of the run re-send exactly that.
    """

    id: str
    raw: str
    summary: tuple[str, ...] = ()
    encrypted: bool = False


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation item, neutral between the Chat Completions and Responses APIs."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # role == "tool": which call this answers
    name: str | None = None  # role == "tool": the tool's name
    reasoning: tuple[ReasoningItem, ...] = ()  # role == "assistant": items to pass back


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returns; ``ok=False`` is a failure the model sees, not a crash of the run.

    ``output`` is the text fed back to the model (already capped, with the cap stated in it);
    ``data`` holds structured fields for the trace (exit code, pass/fail counts, path ...).
    """

    ok: bool
    output: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the server reported them (never counted from SSE events)."""

    input_tokens: int = 0
    output_tokens: int = 0  # includes reasoning tokens
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    estimated: bool = False  # counted by agentloop's tokenizer: the server reported no usage

    @property
    def visible_tokens(self) -> int:
        return max(0, self.output_tokens - self.reasoning_tokens)


@dataclass(frozen=True, slots=True)
class CallTiming:
    """Instants of one streamed model call, ``time.perf_counter_ns()`` values (see docs/design.md).

    ``t_send`` before the request is written; ``t_hdr`` response headers; ``t_first`` first event
    with a non-empty payload; ``t_first_visible`` first text or tool-argument delta; ``t_last`` last
    payload event; ``t_end`` terminal event. ``None`` where the event never came.
    ``build_ns`` is the client-side time spent building the request before ``t_send``
    (framework overhead, kept visible). ``lag_max_ns``: the largest event-loop lag seen while
    the call ran, and ``error_bound_ns`` the bound it gives on every duration of the call
    (``agentloop.clients._lag``); ``None`` where the client did not measure them.
    """

    t_send: int
    t_hdr: int | None = None
    t_first: int | None = None
    t_first_visible: int | None = None
    t_last: int | None = None
    t_end: int | None = None
    chunks: int = 0
    build_ns: int = 0
    lag_max_ns: int | None = None
    error_bound_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a model call: its instants, the error that ended it (if any), the wait after it."""

    t_start: int
    t_end: int
    error: str | None = None
    status: int | None = None
    wait_ns: int = 0  # back-off slept after this attempt before the next one


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What the runner asks of a model client for one step."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    step: int


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One finished model turn: output, usage, timing of the successful attempt, all attempts."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    timing: CallTiming
    attempts: tuple[Attempt, ...] = ()
    model: str = ""
    service_tier: str | None = None
    finish_reason: str | None = None
    reasoning: tuple[ReasoningItem, ...] = ()  # Responses reasoning items, sent back next turn
    reasoning_text: str = ""  # Chat ``reasoning_content`` deltas (llama.cpp, vLLM, DeepSeek)
    server_timings: dict[str, Any] | None = None  # the server's own ``timings`` (llama.cpp)

    def as_message(self) -> Message:
        return Message(
            role="assistant",
            content=self.text,
            tool_calls=self.tool_calls,
            reasoning=self.reasoning,
        )
