"""Scripted model turns: what the simulator says when it plays a task file or a recorded trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class ScriptToolCall:
    """A tool call in a scripted turn; ``arguments`` is the exact JSON text to stream."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ScriptTurn:
    """One model turn: hidden reasoning tokens elapse first, then ``text``, then the tool calls."""

    text: str = ""
    reasoning_tokens: int = 0
    tool_calls: tuple[ScriptToolCall, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ScriptTurn:
        """Build from the task-file / trace shape; tool arguments may be a mapping or JSON text."""
        calls = []
        for c in raw.get("tool_calls") or ():
            args = c.get("arguments", {})
            text = args if isinstance(args, str) else orjson.dumps(args).decode()
            calls.append(ScriptToolCall(name=c["name"], arguments=text))
        return cls(
            text=raw.get("text") or "",
            reasoning_tokens=int(raw.get("reasoning_tokens") or 0),
            tool_calls=tuple(calls),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "reasoning_tokens": self.reasoning_tokens,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in self.tool_calls],
        }
