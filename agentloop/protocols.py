"""The seams of agentloop, all in one place: model client, tool, span sink."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agentloop.types import ModelRequest, ModelResponse, ToolResult, ToolSpec


@runtime_checkable
class ModelClient(Protocol):
    """Answers one model turn. Retries live inside; attempts and timings come back as data."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    async def aclose(self) -> None: ...


class ToolContext(Protocol):
    """What a tool may touch during a run: its workspace, limits, and run-scoped resources."""

    @property
    def workspace(self) -> Any: ...  # pathlib.Path, resolved

    @property
    def env(self) -> dict[str, str]: ...  # scrubbed environment for subprocesses

    @property
    def settings(
        self,
    ) -> Any: ...  # agentloop.sandbox.context.ToolSettings: test_command, output_cap ...

    async def the_jail(self) -> Any:
        """The run's :class:`agentloop.sandbox.jail.Jail`: where every command of the run executes."""
        ...

    async def resource(self, key: str, factory: Any) -> Any:
        """Return the run-scoped resource ``key``, creating it with ``await factory(stack)`` once.

        ``stack`` is the run's ``contextlib.AsyncExitStack``: what the factory enters there is
        closed when the run ends (the browser, for one).
        """
        ...


@runtime_checkable
class Tool(Protocol):
    """A callable the model can invoke by name. Bad arguments give ok=False, never an exception."""

    @property
    def spec(self) -> ToolSpec: ...

    async def __call__(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolResult: ...


class SpanSink(Protocol):
    """Receives trace records (plain dicts) one at a time, in order; a failure never fails a run."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...
