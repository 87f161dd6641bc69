"""Helpers to test your own tools and tasks the way agentloop tests itself (public, stable).

- :class:`ScriptedClient`: a model client that answers with scripted turns, no HTTP, so the
  runner's control flow (and your tools) run for real while the model's answers are fixed;
- :class:`MemorySink`: an in-memory span sink, and :func:`trace_of` to read its records back as
  a typed :class:`agentloop.trace.reader.Trace` (the same reader the CLI uses);
- :func:`run_and_trace`: run a task with :func:`agentloop.run_task` and get the result together
  with its parsed trace.

Example::

    from agentloop.script import ScriptTurn, ScriptToolCall
    from agentloop.testing import ScriptedClient, run_and_trace

    client = ScriptedClient([ScriptTurn(tool_calls=(ScriptToolCall("mytool", "{}"),)),
                             ScriptTurn(text="done")])
    result, trace = await run_and_trace(task, client=client, tools={"mytool": MyTool()})
    (span,) = trace.of_kind("tool")
    assert span.tool is not None and span.tool.ok

For timing fidelity (pacing, retries, faults over real HTTP) use the simulator,
:class:`agentloop.sim.SimServer`, with the real OpenAI client instead.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Unpack

import orjson

from agentloop.api import RunConfig, RunOptions, configure, run_task
from agentloop.clients.scripted import ScriptedClient
from agentloop.config.tasks import Task
from agentloop.loop.ending import RunResult
from agentloop.trace.reader import Trace, load_trace, parse_lines
from agentloop.trace.writer import MemorySink

__all__ = ["MemorySink", "ScriptedClient", "run_and_trace", "trace_of"]


def trace_of(records: list[dict[str, Any]]) -> Trace:
    """Read a :class:`MemorySink`'s records as a trace file would be read (checked, typed)."""
    return parse_lines([orjson.dumps(r) for r in records], "<memory>")


async def run_and_trace(
    task: Task | str | Path,
    *,
    config: RunConfig | None = None,
    **options: Unpack[RunOptions],
) -> tuple[RunResult, Trace]:
    """Run ``task`` (a config and keyword arguments as :func:`agentloop.run_task` takes them)
    and return its result and its trace, parsed. Without ``trace_dir`` (a keyword, or the
    ``config``'s) the trace file lives in a temporary folder removed once it is read (the
    returned Trace is in memory)."""
    the_config = configure(config, **options)
    if config is not None or "trace_dir" in options:
        result = await run_task(task, config=the_config)
        return result, load_trace(result.trace_path or "")
    with tempfile.TemporaryDirectory(prefix="agentloop-test-") as tmp:
        result = await run_task(task, config=replace(the_config, trace_dir=tmp))
        return result, load_trace(result.trace_path or "")
