"""One tool call of a model turn, run: every failure becomes a result the model sees.

A call names an unknown tool, brings arguments that are no JSON object, runs past the tool's
timeout or raises: each is a :class:`agentloop.types.ToolResult` with ``ok=False`` saying so,
never an exception into the loop (the model's output is hostile input; a tool bug must not end
the run). The ``finish`` tool, when the task offers it, is answered here and recognised as the
task's end by the runner. Nothing here opens a span: the runner does, around :func:`run_call`,
and sets :func:`tool_attrs` on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from agentloop.protocols import Tool
from agentloop.sandbox.context import RunContext
from agentloop.trace import attrs as A
from agentloop.types import ToolCall, ToolResult, ToolSpec

FINISH = ToolSpec(
    name="finish",
    description="End the task. Call this once the work is done and checked; say what you did.",
    parameters={
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "What was done and how it was checked."}
        },
        "required": ["summary"],
        "additionalProperties": False,
    },
)

CUT_SHORT = "; the answer was cut at the output-token limit in the middle of this call"


async def run_call(
    call: ToolCall,
    tools: dict[str, Tool],
    specs: tuple[ToolSpec, ...],
    ctx: RunContext,
    *,
    timeout_s: float,
    finish_tool: bool,
    log: Any,
    cut: bool = False,
) -> ToolResult:
    """Run one tool call with the run's ``tools`` (``specs``: every tool the model was offered;
    ``log``: the run's logger, told of a tool that raised). ``cut``: the turn ended at the
    output-token limit (said in a bad-arguments error)."""
    if call.name == "finish" and finish_tool:
        return ToolResult(ok=True, output="Task finished.")
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(s.name for s in specs)
        return ToolResult(
            ok=False, output=f"Error: unknown tool '{call.name}'. Available tools: {known}."
        )
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError as exc:
        why = CUT_SHORT if cut else ""
        return ToolResult(
            ok=False,
            output=f"Error: arguments of '{call.name}' are not valid JSON ({exc}){why}.",
        )
    if not isinstance(args, dict):
        return ToolResult(
            ok=False, output=f"Error: arguments of '{call.name}' must be a JSON object."
        )
    try:
        async with asyncio.timeout(timeout_s):
            return await tool(ctx, args)
    except TimeoutError:
        return ToolResult(
            ok=False, output=f"Error: tool '{call.name}' timed out after {timeout_s:g} s."
        )
    except Exception as exc:  # a tool bug must not crash the run: the model sees it
        log.warning("tool raised", tool=call.name, error=str(exc))
        return ToolResult(
            ok=False, output=f"Error: tool '{call.name}' failed: {type(exc).__name__}: {exc}"
        )


def finish_summary(call: ToolCall) -> str:
    """The ``summary`` argument of a ``finish`` call ('' when its arguments do not parse)."""
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return ""
    return str(args.get("summary", "")) if isinstance(args, dict) else ""


def tool_attrs(call: ToolCall, res: ToolResult, queued_ns: int) -> dict[str, Any]:
    """A tool span's end attributes: the call, its result, and how long it queued for a slot."""
    return {
        A.GEN_AI_TOOL_NAME: call.name,
        A.GEN_AI_TOOL_CALL_ID: call.id,
        A.ARGUMENTS: call.arguments,
        A.OK: res.ok,
        A.OUTPUT: res.output,
        A.DATA: res.data,
        A.QUEUED_NS: queued_ns,
    }
