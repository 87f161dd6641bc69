"""The production model client: Responses or Chat Completions over the official ``openai`` SDK.

The SDK's ``AsyncOpenAI`` supplies auth headers, base URL, connection pool and its error types;
the body is built here as JSON bytes (``_wire``) and the SSE stream is read raw (``_stream``), so
the per-call parameter transform and the per-event pydantic models stay off the hot path.
Retries (tenacity) live here too: every attempt comes back in ``ModelResponse.attempts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from time import perf_counter_ns
from typing import Any

import httpx2
import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from agentloop.clients._errors import (
    RETRY_STATUS,
    Retryable,
    retry_after,
    scrub_sdk_error,
    server_message,
)
from agentloop.clients._lag import loop_lag
from agentloop.clients._rx import StampedStream, rx_clock
from agentloop.clients._silence import Bounds, Watch, first_token_timeout, reasons
from agentloop.clients._stream import (
    DEFAULT_MAX_CHARS,
    StreamBroken,
    StreamErrorEvent,
    StreamTooLarge,
    Turn,
    read_sse,
)
from agentloop.clients._tls import http_client
from agentloop.clients._turn import reasoning_items, timing_of, usage_of
from agentloop.clients._wire import BodyBuilder
from agentloop.config.tiers import Tier
from agentloop.errors import ConfigError, ModelAPIError, ModelRetryError
from agentloop.events import watch_stream
from agentloop.log import get_logger
from agentloop.redact import Redactor, looks_like_key
from agentloop.types import Attempt, ModelRequest, ModelResponse

SIM_PLACEHOLDER_KEY = "sim-no-key"  # the simulator and key-less local servers need no secret
# after a stream's terminal event, the body's end is read (see _drain) up to this much, this long
DRAIN_BYTES = 4096
DRAIN_S = 0.25


def make_sdk_client(
    tier: Tier,
    *,
    base_url: str | None = None,
    timeout: float = 30.0,
    connect_timeout_s: float = 10.0,
) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` for ``tier``: key from ``tier.api_key_env``, SDK retries off."""
    url = base_url or tier.base_url
    if url == "sim":
        raise ConfigError(
            f"tier '{tier.name}' is simulated: start a SimServer and pass its "
            "base_url (or use a tier with a real endpoint)"
        )
    if tier.api_key_env and looks_like_key(tier.api_key_env):
        raise ConfigError(
            f"tier '{tier.name}': api_key_env holds what looks like an API key, "
            "not the name of an environment variable (the value is not shown): "
            "put the key in a variable and name that variable here"
        )
    if tier.api_key_env:
        key = os.environ.get(tier.api_key_env)
        if not key:
            raise ModelAPIError(
                f"tier '{tier.name}': environment variable {tier.api_key_env} "
                "is not set (it must hold the API key for this endpoint)"
            )
    else:
        key = SIM_PLACEHOLDER_KEY
    limit = httpx2.Timeout(timeout, connect=connect_timeout_s)
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=url,
        max_retries=0,
        timeout=limit,
        http_client=http_client(limit, stamped=url.startswith("http://")),
    )


class OpenAIClient:
    """Implements :class:`agentloop.protocols.ModelClient` for one tier.

    ``client``: an injected ``AsyncOpenAI`` (not closed by :meth:`aclose`); built from the tier
    when ``None``. ``stall_timeout_s``: longest silence tolerated between events once the first
    token is in, before the attempt is abandoned and retried; before it, the longer first-token
    bound of ``agentloop.clients._silence`` (the prompt's prefill and expected hidden reasoning,
    or the tier's ``first_token_timeout_s``). ``max_attempts`` counts the first try. Both default
    to the tier's (``stall_timeout_s`` / ``max_attempts`` in tiers.toml). ``server_on_loop``:
    the server writes on this event loop (the embedded simulator), so the loop's lag bounds
    each call's timing even where its reader thread stamped the bytes as they arrived.

    A call that fails for good raises ModelAPIError (refused: not retried) or ModelRetryError
    (retry budget spent); either declares the attempts made (``ModelError.attempts``).
    """

    def __init__(
        self,
        tier: Tier,
        client: openai.AsyncOpenAI | None = None,
        *,
        stall_timeout_s: float | None = None,
        max_attempts: int | None = None,
        connect_timeout_s: float = 10.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
        retry_after_cap_s: float = 60.0,
        base_url: str | None = None,
        max_response_chars: int = DEFAULT_MAX_CHARS,
        server_on_loop: bool = False,
    ) -> None:
        self.tier = tier
        self._server_on_loop = server_on_loop  # the embedded simulator: see _turn.timing_of
        # the tier's own settings unless the caller overrides them
        stall_timeout_s = tier.stall_timeout_s if stall_timeout_s is None else stall_timeout_s
        max_attempts = tier.max_attempts if max_attempts is None else max_attempts
        self._owns = client is None
        self._client = (
            client
            if client is not None
            else make_sdk_client(
                tier,
                base_url=base_url,
                timeout=stall_timeout_s,
                connect_timeout_s=connect_timeout_s,
            )
        )
        key = self._client.api_key
        self._redact = Redactor([key] if key else [])  # the key a server may echo back
        self.max_attempts = max(1, max_attempts)
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self.retry_after_cap_s = retry_after_cap_s
        self.stall_timeout_s = stall_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._reasons = reasons(tier)
        self.max_response_chars = max_response_chars  # what one call may buffer
        self._builder = BodyBuilder(tier.api, tier.model, tier.options)
        self._path = "responses" if tier.api == "responses" else "chat/completions"
        self.endpoint = f"{str(self._client.base_url).rstrip('/')}/{self._path}"
        self._options: Any = {
            "security": {"bearer_auth": True},
            "timeout": httpx2.Timeout(stall_timeout_s, connect=connect_timeout_s),
        }
        if tier.options.get("extra_headers"):
            self._options["headers"] = dict(tier.options["extra_headers"])

    async def aclose(self) -> None:
        if self._owns:
            await self._client.close()

    def bounds(self, body: bytes) -> Bounds:
        """The silence bounds of a request with this body (``agentloop.clients._silence``)."""
        first = first_token_timeout(self.tier, self.stall_timeout_s, len(body))
        return Bounds(first, self.stall_timeout_s, self._reasons)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        t0 = perf_counter_ns()
        body = self._builder.build(request.messages, request.tools)
        limits = self.bounds(body)
        options = self._options
        if limits.first_s != limits.stall_s:  # the HTTP read timeout bounds the header wait
            options = {
                **options,
                "timeout": httpx2.Timeout(limits.first_s, connect=self._connect_timeout_s),
            }
        build_ns = perf_counter_ns() - t0
        attempts: list[Attempt] = []

        async def sleep(seconds: float) -> None:
            t = perf_counter_ns()
            await asyncio.sleep(seconds)
            attempts[-1] = replace(attempts[-1], wait_ns=perf_counter_ns() - t)

        retrying = AsyncRetrying(
            sleep=sleep,
            stop=stop_after_attempt(self.max_attempts),
            wait=self._wait,
            retry=retry_if_exception_type(Retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(body, build_ns, attempts, limits, options)
        except Retryable as exc:
            raise ModelRetryError(
                f"tier '{self.tier.name}': {self.endpoint} still failing after "
                f"{len(attempts)} attempts; last error: {self._scrub(exc.error)}",
                attempts=tuple(attempts),
            ) from exc
        except ModelAPIError as exc:  # the same error, now with every attempt (for the trace)
            raise ModelAPIError(exc.message, exc.status, attempts=tuple(attempts)) from exc
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Retryable) and exc.retry_after is not None:
            wait = min(exc.retry_after, self.retry_after_cap_s)
        else:
            n = state.attempt_number - 1
            wait = min(self.backoff_max_s, self.backoff_initial_s * 2.0**n)
            wait *= 1.0 - 0.25 * random.random()  # jitter so concurrent callers spread out
        # a fresh logger each time (retries are rare): it follows the configuration of the moment;
        # a broken log sink must never break a retry
        with contextlib.suppress(ValueError, OSError):
            get_logger("agentloop.client").warning(
                "model_retry",
                tier=self.tier.name,
                attempt=state.attempt_number,
                error=self._scrub(getattr(exc, "error", str(exc))),
                wait_s=round(wait, 3),
            )
        return wait

    def _scrub(self, text: str) -> str:
        """``text`` with the tier's key (and anything secret-shaped) hidden: the one redactor."""
        return self._redact.text(text)

    async def _attempt(
        self,
        body: bytes,
        build_ns: int,
        attempts: list[Attempt],
        limits: Bounds,
        options: Any,
    ) -> ModelResponse:
        lag = loop_lag()
        watch = lag.watch()  # the loop's own lateness while this attempt runs
        t_send = perf_counter_ns()
        try:
            resp = await self._send(body, limits, options)
            rx = rx_clock(resp)  # receive stamps, where the stream has them
            t_hdr = (rx.rx_ns if rx is not None else None) or perf_counter_ns()
            turn = Turn(self.tier.api, self.max_response_chars)
            watch_stream(turn)  # live token progress for the run's events (read by a ticker)
            try:
                await self._read(resp, turn, limits, rx)
            finally:
                lag.done(watch)
                await resp.aclose()
        except Retryable as exc:
            attempts.append(Attempt(t_send, perf_counter_ns(), exc.error, exc.status))
            raise
        except ModelAPIError as exc:
            attempts.append(Attempt(t_send, perf_counter_ns(), exc.message, exc.status))
            raise
        finally:
            lag.done(watch)  # (once: a second call changes nothing)
        timing = timing_of(turn, t_send, t_hdr, build_ns, watch, rx, self._server_on_loop)
        end = turn.t_end or perf_counter_ns()
        attempts.append(Attempt(timing.t_send, end, None, resp.status_code))
        text, calls, thought = "".join(turn.text), turn.tool_calls(), "".join(turn.reasoning_text)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=usage_of(turn, body, text, calls, thought),
            timing=timing,
            attempts=tuple(attempts),
            model=turn.model or self.tier.model,
            service_tier=turn.service_tier,
            finish_reason=turn.finish_reason,
            reasoning=reasoning_items(turn.reasoning),
            reasoning_text=thought,
            server_timings=turn.server_timings,
        )

    async def _send(self, body: bytes, limits: Bounds, options: Any) -> httpx2.Response:
        """POST the prebuilt body; returns the open streaming response once headers are in."""
        try:
            return await self._client.post(
                self._path,
                cast_to=httpx2.Response,
                content=body,
                options=options,
                stream=True,
            )
        except openai.APIStatusError as exc:
            status = exc.status_code
            scrub_sdk_error(exc, self._redact)
            message = server_message(exc)
            if status in RETRY_STATUS or status >= 500:
                raise Retryable(
                    f"HTTP {status}: {message}", status, retry_after(exc.response.headers)
                ) from exc
            raise ModelAPIError(
                f"tier '{self.tier.name}': {self.endpoint} refused the request "
                f"(HTTP {status}): {message}",
                status=status,
            ) from exc
        except openai.APITimeoutError as exc:
            raise Retryable(
                f"timeout: no response headers within {round(limits.first_s, 2):g} s"
                + (" (first-token bound)" if limits.first_s != limits.stall_s else "")
            ) from exc
        except httpx2.DecodingError as exc:  # e.g. a gzip body that does not decompress
            raise Retryable(f"undecodable response body: {exc}") from exc
        except openai.APIConnectionError as exc:
            cause = exc.__cause__
            raise Retryable(f"connection error: {type(cause).__name__ if cause else exc}") from exc

    async def _read(
        self, resp: httpx2.Response, turn: Turn, limits: Bounds, rx: StampedStream | None
    ) -> None:
        """Read the body's events into ``turn``, stamped by ``rx`` where the stream has stamps."""
        chunks = resp.aiter_bytes()
        try:
            if limits.first_s == limits.stall_s:  # one bound: the HTTP read timeout is it
                await read_sse(chunks, turn, rx)
            else:
                with Watch(limits, turn):
                    await read_sse(chunks, turn, rx)
        except (httpx2.TimeoutException, TimeoutError) as exc:
            raise Retryable(limits.stall_error(turn), resp.status_code) from exc
        except httpx2.TransportError as exc:
            raise Retryable(f"stream broken: {type(exc).__name__}", resp.status_code) from exc
        except httpx2.DecodingError as exc:  # e.g. a gzip body that does not decompress
            raise Retryable(
                f"undecodable response body ({resp.headers.get('content-encoding')}): {exc}",
                resp.status_code,
            ) from exc
        except StreamTooLarge as exc:
            raise ModelAPIError(
                f"tier '{self.tier.name}': {self.endpoint} sent {exc}; the "
                "attempt was ended there (max_response_chars "
                f"{self.max_response_chars}) and is not retried",
                status=resp.status_code,
            ) from exc
        except StreamBroken as exc:
            raise Retryable(f"stream broken: {exc}", resp.status_code) from exc
        except StreamErrorEvent as exc:
            message = self._scrub(str(exc))
            if exc.retryable:
                raise Retryable(f"error event ({exc.code}): {message}", resp.status_code) from exc
            raise ModelAPIError(
                f"tier '{self.tier.name}': {self.endpoint} failed the response "
                f"({exc.code}): {message}",
                status=resp.status_code,
            ) from exc
        await _drain(chunks)


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read the body's end after the terminal event (the chunked ``0\\r\\n\\r\\n``, mostly
    received with it), so the connection goes back to the pool for the next call: closed mid-body,
    it would be dropped, and every call would connect (and on TLS, handshake) anew. A server
    that sends on past ``DRAIN_BYTES`` or ``DRAIN_S`` keeps nothing: its connection is closed."""
    size = 0
    with contextlib.suppress(TimeoutError, httpx2.HTTPError):
        async with asyncio.timeout(DRAIN_S):
            async for chunk in chunks:
                size += len(chunk)
                if size > DRAIN_BYTES:
                    return
