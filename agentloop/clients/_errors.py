"""What a failed attempt says: the retryable error, the server's own message, the wait it asked for.

The SDK's error may carry the API key a server echoed back (in its message, args or body): it is
redacted here, with the one redactor (:mod:`agentloop.redact`), before it is chained or shown.
"""

from __future__ import annotations

import email.utils
import time

import httpx2
import openai
import orjson

from agentloop.redact import Redactor

RETRY_STATUS = frozenset({408, 409, 429})  # and every 5xx


class Retryable(Exception):
    """One attempt failed in a way worth another try."""

    def __init__(
        self, error: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(error)
        self.error, self.status, self.retry_after = error, status, retry_after


def server_message(exc: openai.APIStatusError) -> str:
    """The error message the server put in its body (else the SDK's)."""
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        return str(body)[:300]
    if isinstance(body, str) and body:
        return body[:300]
    return exc.message


def retry_after(headers: httpx2.Headers) -> float | None:
    """The wait a server asked for: retry-after-ms, or Retry-After in seconds or as an HTTP date."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
        if name == "retry-after":  # RFC 9110: an HTTP-date is allowed too
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                continue
            if when.tzinfo is not None:
                return max(0.0, when.timestamp() - time.time())
    return None


def scrub_sdk_error(exc: openai.APIStatusError, redact: Redactor) -> None:
    """Take secrets out of an SDK error a server echoed them into, before it is chained."""
    if redact.text(str(exc)) == str(exc) and redact.text(repr(exc.body)) == repr(exc.body):
        return
    exc.message = redact.text(exc.message)
    exc.args = tuple(redact.text(a) if isinstance(a, str) else a for a in exc.args)
    if isinstance(exc.body, str):
        exc.body = redact.text(exc.body)
    elif exc.body is not None:
        exc.body = orjson.loads(redact.text(orjson.dumps(exc.body).decode()))
