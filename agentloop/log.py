"""Logging: structlog set-up for the CLI, and the quiet default loggers of the library.

The library never configures structlog. Where the embedding program has configured it, agentloop
logs through that configuration; where nobody has, ``get_logger`` returns a logger that writes
warnings and errors only, to stderr, so an embedded run never prints to the service's stdout.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

from agentloop.redact import scrub_text, secret_values


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at the time of writing (it may be swapped later)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _processors(secrets: list[str]) -> list[Any]:
    import structlog

    def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        return {k: scrub_text(v, secrets) if isinstance(v, str) else v for k, v in event.items()}

    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=False)
        if sys.stderr.isatty()
        else structlog.processors.JSONRenderer()
    )
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact,
        renderer,
    ]


def get_logger(name: str, **bound: Any) -> Any:
    """A logger for library code: the program's structlog set-up if any, else warnings to stderr
    (structlog imported here, when a module first logs: a command that never does, such as an
    analysis of a big trace, is spared its 90 ms of imports)."""
    import structlog

    if structlog.is_configured():
        return structlog.get_logger(name).bind(**bound)
    return structlog.wrap_logger(
        structlog.PrintLogger(_Stderr()),  # type: ignore[arg-type]
        processors=_processors(secret_values()),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_name=name,
    ).bind(**bound)


def configure(verbosity: int = 0) -> None:
    """Configure logging once, from the CLI (the library never configures logging itself)."""
    import structlog

    level = logging.WARNING - 10 * verbosity
    structlog.configure(
        processors=_processors(secret_values()),
        wrapper_class=structlog.make_filtering_bound_logger(max(level, logging.DEBUG)),
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
