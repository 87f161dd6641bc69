"""Record processors run before any sink: secrets out, oversized strings cut."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any

Processor = Callable[[dict[str, Any]], dict[str, Any]]

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}")
_SK = re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}")
REDACTED = "[REDACTED]"


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret (long enough to be worth hiding)."""
    env = os.environ if environ is None else environ
    return sorted({v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= 6},
                  key=len, reverse=True)


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    for s in secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    text = _BEARER.sub(r"\1" + REDACTED, text)
    return _SK.sub(REDACTED, text)


def redactor(secrets: Iterable[str]) -> Processor:
    """Replace known secret values, bearer tokens and sk- keys anywhere in a record."""
    values = list(secrets)

    def walk(obj: Any) -> Any:
        if isinstance(obj, str):
            return scrub_text(obj, values)
        if isinstance(obj, dict):
            return {k: (REDACTED if isinstance(k, str) and k.lower() in ("authorization", "api_key")
                        else walk(v)) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [walk(v) for v in obj]
        return obj

    def process(record: dict[str, Any]) -> dict[str, Any]:
        return walk(record)

    return process


def truncator(max_chars: int) -> Processor:
    """Cut any string longer than ``max_chars``, saying how much was cut."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, str) and len(obj) > max_chars:
            return obj[:max_chars] + f"... [cut {len(obj) - max_chars} chars]"
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [walk(v) for v in obj]
        return obj

    def process(record: dict[str, Any]) -> dict[str, Any]:
        return walk(record)

    return process
