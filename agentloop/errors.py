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
    ├── RunEnded                       control flow: the loop stops (caught in one place)
    │   ├── Finished                   the model ended the task
    │   └── LimitReached               steps / output tokens / wall time
    ├── SimulatorError                 the embedded simulator could not start or serve
    ├── ExportError                    an export's receiver (an OTLP collector) did not take it
    └── ToolError                      a tool refused or failed (sandbox escape, bad path ...):
                                       tools turn it into ToolResult(ok=False); never reaches
                                       the runner

A tool failure the model should see is not an exception: it is a ToolResult with ok=False.
Third-party errors (openai, subprocess, playwright) are translated where they are caught, with
``raise ... from exc`` so the cause is kept for logs but never printed as a traceback.
"""

from __future__ import annotations


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

    def __init__(self, path: object, message: str, line: int | None = None,
                 field: str | None = None) -> None:
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
    the HTTP status it answers with (400 bad input, 409 not possible yet)."""

    def __init__(self, message: str, *, field: str, status: int = 400) -> None:
        super().__init__(message)
        self.field, self.status = field, status


class TraceFileError(AgentloopError):
    """A file is not a readable agentloop trace."""

    exit_code = 2


class ModelError(AgentloopError):
    """A model call failed for good."""


class ModelAPIError(ModelError):
    """The endpoint refused the request (not retryable): bad key, bad request, unknown model."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ModelRetryError(ModelError):
    """Retryable failures went on past the retry budget."""


class RunEnded(AgentloopError):
    """Control flow: the loop ends. Caught in exactly one place, the runner."""

    status = "ok"


class Finished(RunEnded):
    """The model ended the task (a turn without tool calls, or the finish tool)."""

    status = "ok"


class LimitReached(RunEnded):
    """A limit (steps, output tokens, wall time) ended the run."""

    status = "budget"

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class SimulatorError(AgentloopError):
    """The embedded simulator could not start or serve."""


class ExportError(AgentloopError):
    """An export could not be delivered: the OTLP collector was unreachable or refused it."""


class ToolError(AgentloopError):
    """A tool refused or failed; the tool wrapper turns it into ``ToolResult(ok=False)``."""
