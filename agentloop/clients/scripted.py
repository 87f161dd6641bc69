"""A scripted in-process model client for unit tests of the runner (no HTTP, no SDK)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from agentloop.errors import ModelAPIError
from agentloop.script import ScriptTurn
from agentloop.types import (
    Attempt,
    CallTiming,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)


class ScriptedClient:
    """Answers turn i of ``turns`` for the i-th call, after ``delay_s`` of simulated latency.

    It exists to test the runner's control flow; timing fidelity is the simulator's job.
    """

    def __init__(
        self, turns: Sequence[ScriptTurn], delay_s: float = 0.0, output_tokens: int = 10
    ) -> None:
        self.turns = list(turns)
        self.delay_s = delay_s
        self.output_tokens = output_tokens
        self.requests: list[ModelRequest] = []
        self.closed = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        i = len(self.requests)
        self.requests.append(request)
        if i >= len(self.turns):
            raise ModelAPIError(
                f"scripted client has no turn {i + 1} (script has {len(self.turns)})", status=400
            )
        turn = self.turns[i]
        t_send = time.perf_counter_ns()
        await asyncio.sleep(self.delay_s)
        t_end = time.perf_counter_ns()
        calls = tuple(
            ToolCall(id=f"call_{i}_{k}", name=c.name, arguments=c.arguments)
            for k, c in enumerate(turn.tool_calls)
        )
        usage = Usage(
            input_tokens=sum(len(m.content) // 4 for m in request.messages),
            output_tokens=self.output_tokens + turn.reasoning_tokens,
            reasoning_tokens=turn.reasoning_tokens,
        )
        timing = CallTiming(
            t_send=t_send,
            t_hdr=t_send,
            t_first=t_end,
            t_first_visible=t_end,
            t_last=t_end,
            t_end=t_end,
            chunks=1,
        )
        return ModelResponse(
            text=turn.text,
            tool_calls=calls,
            usage=usage,
            timing=timing,
            attempts=(Attempt(t_start=t_send, t_end=t_end),),
            model="scripted",
            finish_reason="tool_calls" if calls else "stop",
        )

    async def aclose(self) -> None:
        self.closed = True
