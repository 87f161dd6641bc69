"""The seams of agentloop, all in one place: model client, tool, span sink, simulator routes."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentloop.script import ScriptTurn
from agentloop.types import ModelRequest, ModelResponse, ToolResult, ToolSpec


@runtime_checkable
class ModelClient(Protocol):
    """Answers one model turn. Retries live inside; attempts and timings come back as data."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    async def aclose(self) -> None: ...


class ToolSettingsView(Protocol):
    """What a run tells its tools (:class:`agentloop.sandbox.context.ToolSettings`), read-only."""

    @property
    def test_command(self) -> str | None: ...  # what run_tests runs

    @property
    def allow_hosts(self) -> tuple[str, ...]: ...  # hosts the browser may reach besides loopback

    @property
    def output_cap(self) -> int: ...  # characters of a tool's text fed back to the model

    @property
    def tool_timeout_s(self) -> float: ...  # ceiling on one tool call

    @property
    def browser_executable(self) -> str | None: ...  # Chromium to drive (None: the system one)

    @property
    def browser_args(self) -> tuple[str, ...]: ...  # extra Chromium flags


# the run's jail: agentloop.sandbox.jail.Jail (the sandbox sits above this layer, so the seam
# names it where it is used: ToolContext[Jail], as Routes[SpeedProfile])
JailT_co = TypeVar("JailT_co", covariant=True)
R = TypeVar("R")


class ToolContext(Protocol[JailT_co]):
    """What a tool may touch during a run: its workspace, limits, and run-scoped resources
    (:class:`agentloop.sandbox.context.RunContext`)."""

    @property
    def workspace(self) -> Path: ...  # resolved

    @property
    def env(self) -> dict[str, str]: ...  # scrubbed environment for subprocesses

    @property
    def settings(self) -> ToolSettingsView: ...

    async def the_jail(self) -> JailT_co:
        """The run's :class:`agentloop.sandbox.jail.Jail`: where every command of the run executes."""
        ...

    async def resource(
        self, key: str, factory: Callable[[contextlib.AsyncExitStack], Awaitable[R]]
    ) -> R:
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

    async def __call__(self, ctx: ToolContext[Any], arguments: dict[str, Any]) -> ToolResult: ...


class SpanSink(Protocol):
    """Receives trace records (plain dicts) one at a time, in order; a failure never fails a run."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Route:
    """One run's share of a simulator (:class:`Routes`): its own base URL, and the key in it."""

    base_url: str
    key: str


# what a route is paced by: agentloop.model.speed.SpeedProfile (the model layer sits above this
# one, so the seam names it where it is used: Routes[SpeedProfile])
ProfileT_contra = TypeVar("ProfileT_contra", contravariant=True)


class Routes(Protocol[ProfileT_contra]):
    """Hands a run a base URL of its own on a shared simulator, serving ``script`` paced by
    ``profile`` while the context lasts: :class:`agentloop.sim.server.SimServer`, or the suite's
    simulator process (:class:`agentloop.sim.child.SimProcess`)."""

    def route(
        self,
        profile: ProfileT_contra,
        script: Sequence[ScriptTurn] | None = None,
        filler_tokens: int | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Route]: ...
