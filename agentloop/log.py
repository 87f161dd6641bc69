"""structlog set-up for the CLI: JSON lines when stderr is not a terminal, secrets redacted."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from agentloop.trace.redact import scrub_text, secret_values


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at the time of writing (it may be swapped later)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(verbosity: int = 0) -> None:
    """Configure logging once, from the CLI (the library never configures logging itself)."""
    level = logging.WARNING - 10 * verbosity
    secrets = secret_values()

    def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        return {k: scrub_text(v, secrets) if isinstance(v, str) else v for k, v in event.items()}

    renderer: Any = (structlog.dev.ConsoleRenderer(colors=False) if sys.stderr.isatty()
                     else structlog.processors.JSONRenderer())
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), redact, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(max(level, logging.DEBUG)),
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
