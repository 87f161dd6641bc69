"""The process's one TLS context for model clients: the trust store is loaded once, not per run.

Making an SSL context loads the system trust store: about 0.1 s of blocked event loop, and every
``AsyncOpenAI`` built without an ``http_client`` makes one. Two hundred runs starting together on
a real tier each paid it on the loop that times the others' streams (issue 28), so every client
agentloop builds shares this one (a context is safe to share between connections).
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx2
import openai
from openai import DEFAULT_CONNECTION_LIMITS

from agentloop.clients import _rx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS context for model endpoints (made on first use)."""
    return httpx2.create_ssl_context()


def http_client(
    timeout: httpx2.Timeout | float | None = None, *, stamped: bool = False
) -> httpx2.AsyncClient:
    """An HTTP client as the SDK would make it (its limits and redirects), on the shared TLS
    context; ``stamped``: for a plain-HTTP endpoint, its reads carry kernel receive stamps
    (:mod:`agentloop.clients._rx`). Closed with the ``AsyncOpenAI`` it is given to."""
    kw: dict[str, Any] = {"verify": tls_context()}
    if timeout is not None:
        kw["timeout"] = timeout
    if stamped and _rx.enabled():
        kw["transport"] = _rx.stamped_transport(kw["verify"], DEFAULT_CONNECTION_LIMITS)
    return openai.DefaultAsyncHttpxClient(**kw)
