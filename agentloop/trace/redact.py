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


def _map_strings(obj: Any, fn: Callable[[str], str], hide_keys: tuple[str, ...] = ()) -> Any:
    """``obj`` with ``fn`` applied to every string inside it (values of ``hide_keys`` hidden)."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: REDACTED if isinstance(k, str) and k.lower() in hide_keys
                else _map_strings(v, fn, hide_keys) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_map_strings(v, fn, hide_keys) for v in obj]
    return obj


def redactor(secrets: Iterable[str]) -> Processor:
    """Replace known secret values, bearer tokens and sk- keys anywhere in a record."""
    values = list(secrets)

    def process(record: dict[str, Any]) -> dict[str, Any]:
        return _map_strings(record, lambda s: scrub_text(s, values), ("authorization", "api_key"))

    return process


def truncator(max_chars: int) -> Processor:
    """Cut any string longer than ``max_chars``, saying how much was cut."""

    def cut(s: str) -> str:
        if len(s) <= max_chars:
            return s
        return s[:max_chars] + f"... [cut {len(s) - max_chars} chars]"

    def process(record: dict[str, Any]) -> dict[str, Any]:
        return _map_strings(record, cut)

    return process
