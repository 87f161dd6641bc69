"""The one error tree of agentloop; every failure a user can see is one of these.

    AgentloopError                     base: carries a one-paragraph, user-facing message
    ├── ConfigError                    bad input the user wrote (exit code 2)
    │   ├── TaskFileError              task file: names file, line and field
    │   ├── TierFileError              tiers file: names file, line and field
    │   └── RequestError               a service request: names the body field (HTTP 4xx)
    ├── TraceFileError                 a trace file that cannot be read as a trace (exit 2)
    ├── ModelError                     a model call failed for good (after retries)
    │   ├── ModelAPIError              the endpoint refused: 400/401/404 ... (not retried)
    │   └── ModelRetryError            retryable failures outlasted the retry budget
    ├── SimulatorError                 the embedded simulator could not start or serve
    ├── ExportError                    an export's receiver (an OTLP collector) did not take it
    └── ToolError                      a tool refused or failed (sandbox escape, bad path ...):
                                       tools turn it into ToolResult(ok=False); never reaches
                                       the runner

A tool failure the model should see is not an exception: it is a ToolResult with ok=False.
Ending a run is not an exception either: the loop returns an ``agentloop.loop.ending.Ending``.
Errors declare their payload as keyword arguments (``ModelError(message, *, attempts=())``);
nothing is patched onto an exception after it is raised.
Third-party errors (openai, subprocess, playwright) are translated where they are caught, with
``raise ... from exc`` so the cause is kept for logs but never printed as a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentloop.types import Attempt


class AgentloopError(Exception):
    """Base of every error agentloop raises on purpose."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(AgentloopError):
    """Input the user wrote is invalid; the message says where and why."""

    exit_code = 2


class FileLocatedError(ConfigError):
    """Bad input in a file: the message starts with the file, then line and field when known."""

    def __init__(
        self, path: object, message: str, line: int | None = None, field: str | None = None
    ) -> None:
        where = f"{path}"
        if line is not None:
            where += f", line {line}"
        if field:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field = path, line, field


class TaskFileError(FileLocatedError):
    """A task file is malformed or invalid."""


class TierFileError(FileLocatedError):
    """A tiers file is malformed or invalid, or names an unknown tier."""


class RequestError(ConfigError):
    """A request to the HTTP service is invalid; ``field`` names the part at fault, ``status``
    the HTTP status it answers with (400 bad input, 409 not possible yet, 413 body too large,
    429 queue full)."""

    def __init__(self, message: str, *, field: str, status: int = 400) -> None:
        super().__init__(message)
        self.field, self.status = field, status


class TraceFileError(AgentloopError):
    """A file is not a readable agentloop trace."""

    exit_code = 2


class ModelError(AgentloopError):
    """A model call failed for good. ``attempts``: every try made (``agentloop.types.Attempt``,
    ``time.perf_counter_ns`` instants, each with the back-off slept after it), for the trace."""

    def __init__(self, message: str, *, attempts: tuple[Attempt, ...] = ()) -> None:
        super().__init__(message)
        self.attempts = attempts


class ModelAPIError(ModelError):
    """The endpoint refused the request (not retryable): bad key, bad request, unknown model."""

    def __init__(
        self, message: str, status: int | None = None, *, attempts: tuple[Attempt, ...] = ()
    ) -> None:
        super().__init__(message, attempts=attempts)
        self.status = status


class ModelRetryError(ModelError):
    """Retryable failures went on past the retry budget."""


class SimulatorError(AgentloopError):
    """The embedded simulator could not start or serve."""


class ExportError(AgentloopError):
    """An export could not be delivered: the OTLP collector was unreachable or refused it."""


class ToolError(AgentloopError):
    """A tool refused or failed; the tool wrapper turns it into ``ToolResult(ok=False)``."""
