"""The probe's measuring engine: fixed prompts sent through any model client, fitted to a speed profile.

Like llmperf: fixed prompts, each asking for a long answer, ``n`` rounds of three calls (after
one warm-up call that opens the connection): a short prompt, a long one, and a follow-up that
repeats the long one as its prefix (a prompt cache can serve it) and adds a third as much fresh
input, the shape of an agent's next request. Per call ``output_tps = (V - 1) / decode`` with V
visible tokens from the server's usage, and ``base = ttft_visible - R / output_tps`` (hidden
reasoning is not prefill). The median wait of each kind of call fits base latency, prefill rate
and how prefill slows behind a context; their median (context, tok/s) fit decode speed and how
it slows (both in :mod:`agentloop.model.speed`).

:func:`measure` takes a :class:`agentloop.protocols.ModelClient` (the CLI's ``agentloop probe``,
:mod:`agentloop.commands.probe`, picks and starts the endpoint: a simulator for a simulated tier,
llama-server for a local one), so a service or a notebook can measure any client it holds.
"""

from __future__ import annotations

import contextlib
import statistics
import uuid
from typing import Any

import orjson

from agentloop.errors import ModelAPIError, ModelError
from agentloop.model import local
from agentloop.model.speed import SpeedProfile, fit_decode, fit_prefill
from agentloop.model.timing import base_seconds, call_metrics
from agentloop.protocols import ModelClient
from agentloop.types import Message, ModelRequest, ModelResponse

_FILLER = (
    "The probe reads this background paragraph about harbours, tides, ledgers and the "
    "slow work of counting crates before the ships leave at dawn. "
)
_ASK = (
    "Write a long, plain-prose story about a lighthouse keeper who keeps careful logs. "
    "Keep writing for at least {words} words; no headings, no lists."
)
_AGAIN = "Now write another such story, at least {words} words, about the keeper's daughter."
_NOTES = (
    "Later notes from the night shift about the north pier, the winch that sticks in the "
    "cold and the tally of barrels that came back short. "
)


def _pad(sentence: str, tokens: int) -> str:
    """About ``tokens`` tokens of ``sentence`` repeated (each filler sentence is ~25 tokens)."""
    return sentence * max(1, tokens // 25)


def prompts(round_id: str, words: int, long_tokens: int) -> tuple[Message, Message]:
    """The short and the long prompt; ``round_id`` first, so no prompt cache can serve them."""
    ask = _ASK.format(words=words)
    short = Message("user", f"[probe {round_id}] {ask}")
    long = Message(
        "user", f"[probe {round_id}] Background notes:\n{_pad(_FILLER, long_tokens)}\n\n{ask}"
    )
    return short, long


def cached_followup(long: Message, words: int, fresh_tokens: int) -> tuple[Message, ...]:
    """A request repeating the long prompt as its prefix (a prompt cache can serve it) and then
    about ``fresh_tokens`` new tokens: the request an agent sends next (its history cached, a
    tool's output new), which shows how a fresh token's prefill slows behind a long context."""
    return (
        long,
        Message("assistant", "The keeper opened the log."),
        Message(
            "user", f"Tool output:\n{_pad(_NOTES, fresh_tokens)}\n\n" + _AGAIN.format(words=words)
        ),
    )


def answer_tokens(profile: SpeedProfile | None) -> int:
    """The answer length asked for by default: about 1 s at the profile's speed (64..1000)."""
    return int(min(1000, max(64, profile.output_tps))) if profile else 256


def call_figures(r: ModelResponse) -> dict[str, Any] | None:
    """One call's TTFT, output speed and base latency (reasoning time taken out); None if mute.

    ``context`` is the mean context a visible token was decoded at (input, reasoning, half the
    visible tokens): what the decode speed depends on. ``server_output_tps`` is the server's
    own figure for the call (llama.cpp's ``timings.predicted_per_second``) when it sends one.
    """
    t, u = r.timing, r.usage
    if t.t_first_visible is None or t.t_last is None:
        return None
    m = call_metrics(t, u)
    ttft_visible = m.ttft_visible_s or 0.0
    tps = m.output_tps if m.output_tps else float("nan")
    timings = r.server_timings or {}
    server_tps = timings.get("predicted_per_second")
    return {
        "ttft_s": m.ttft_s,
        "ttft_visible_s": ttft_visible,
        "output_tps": tps,
        "base_s": base_seconds(ttft_visible, u.reasoning_tokens, m.output_tps),
        "input_tokens": u.input_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "output_tokens": u.output_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "context": u.input_tokens + u.reasoning_tokens + u.visible_tokens / 2,
        "server_output_tps": server_tps if isinstance(server_tps, int | float) else None,
        "attempts": len(r.attempts),
    }


def _tps_of(calls: list[dict[str, Any]]) -> float:
    """The median output speed of the calls that measured one (NaN marks a call that did not)."""
    return float(
        statistics.median(
            [c["output_tps"] for c in calls if c["output_tps"] == c["output_tps"]] or [float("nan")]
        )
    )


def _wait_point(calls: list[dict[str, Any]]) -> tuple[float, float, float]:
    """(fresh input tokens, cached input tokens, base wait): medians over one kind of call."""
    med = statistics.median
    return (
        med([c["input_tokens"] - c["cached_input_tokens"] for c in calls]),
        med([c["cached_input_tokens"] for c in calls]),
        med([c["base_s"] for c in calls]),
    )


def _decode_points(*kinds: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """One median (context, tok/s) point per kind of call: a call slowed by a busy machine
    moves no fit."""
    med = statistics.median
    points = []
    for calls in kinds:
        ok = [c for c in calls if c["output_tps"] == c["output_tps"]]
        if ok:
            points.append((med([c["context"] for c in ok]), med([c["output_tps"] for c in ok])))
    return points


def summarize(
    short: list[dict[str, Any]],
    long: list[dict[str, Any]],
    cached: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Medians; decode speed as a line through the median (context, tok/s) of each kind of
    call (:func:`agentloop.model.speed.fit_decode`); base latency, prefill rate and how prefill slows
    behind a context (:func:`agentloop.model.speed.fit_prefill`) from the median wait of each kind
    of call: short prompt, long prompt, and the follow-up behind the cached long prompt."""
    med = statistics.median
    cached = cached or []
    in_s, in_l = med([c["input_tokens"] for c in short]), med([c["input_tokens"] for c in long])
    base, prefill, prefill_slope = fit_prefill(
        [_wait_point(calls) for calls in (short, long, cached) if calls]
    )
    points = _decode_points(short, long, cached)
    tps0, slope = fit_decode(points) if points else (float("nan"), 0.0)
    server = [c["server_output_tps"] for c in short if c["server_output_tps"]]
    return {
        "ttft_s": med([c["ttft_s"] for c in short]),
        "ttft_long_s": med([c["ttft_s"] for c in long]),
        "output_tps": _tps_of(short),
        "output_tps_long": _tps_of(long),
        "output_tps_at_0": tps0,
        "tpot_ms_per_1k": slope,
        "context_short": med([c["context"] for c in short]),
        "context_long": med([c["context"] for c in long]),
        "server_output_tps": med(server) if server else None,
        "prefill_tps": prefill or None,
        "prefill_ms_per_1k": prefill_slope,
        "base_latency_s": base,
        "cached_tokens": med([c["cached_input_tokens"] for c in cached]) if cached else 0.0,
        "fresh_tokens_cached_call": (
            med([c["input_tokens"] - c["cached_input_tokens"] for c in cached]) if cached else 0.0
        ),
        "ttft_cached_s": med([c["ttft_s"] for c in cached]) if cached else None,
        "input_tokens_short": in_s,
        "input_tokens_long": in_l,
        "output_tokens": med([c["output_tokens"] for c in short + long]),
        "reasoning_tokens": med([c["reasoning_tokens"] for c in short + long]),
    }


def measured_profile(res: dict[str, Any], fallback_prefill: float = 0.0) -> SpeedProfile:
    """The profile ``--write`` stores: decode at context 0 and its slope when one was
    measured, base latency, prefill rate and its slope behind a context."""
    slope = res["tpot_ms_per_1k"]
    # a call whose visible tokens all came in one read measured no speed (NaN): under load a
    # fast server's short answers can; then the long calls', then the server's own figure
    speeds = (res["output_tps_at_0"] if slope else None, res["output_tps"], res["output_tps_long"])
    tps = next((v for v in (*speeds, res["server_output_tps"]) if v and v == v), None)
    if tps is None:
        raise ModelError(
            "the probe measured no output speed: every call's visible tokens arrived at once "
            "(a fast server on a busy machine); probe again with more --tokens"
        )
    return SpeedProfile(
        base_latency_s=res["base_latency_s"],
        prefill_tps=res["prefill_tps"] or fallback_prefill,
        output_tps=tps,
        tpot_ms_per_1k=slope if tps == speeds[0] else 0.0,
        prefill_ms_per_1k=res["prefill_ms_per_1k"],
    )


async def server_context(base_url: str) -> int | None:
    """The context window a server reports about itself (llama-server's ``/props``), if any.

    Asked only over plain http (local and LAN servers); no key is sent."""
    if not base_url.startswith("http://"):
        return None
    root = base_url.rstrip("/").removesuffix("/v1")
    with contextlib.suppress(OSError, TimeoutError, ValueError, IndexError, orjson.JSONDecodeError):
        status, body = await local.http_get(f"{root}/props")
        if status == 200:
            props = orjson.loads(body)
            return local.context_of(props) if isinstance(props, dict) else None
    return None


def long_prompt_tokens(asked: int, window: int | None, tokens: int) -> int:
    """The long prompt's size: as asked, but so that the follow-up (the long prompt, a third
    as much fresh input and the answer) stays well inside the context window (our token
    estimate may count fewer tokens than the model's tokenizer, so keep a third spare)."""
    if window is None:
        return asked
    return max(50, min(asked, int((window - tokens - 64) * 0.5)))


def _context_error(exc: ModelAPIError) -> bool:
    text = exc.message.lower()
    return "context" in text and any(
        w in text for w in ("exceed", "length", "too long", "maximum", "size")
    )


async def measure(
    client: ModelClient,
    *,
    name: str,
    n: int = 5,
    tokens: int = 256,
    long_tokens: int = 8000,
    window: int | None = None,
) -> dict[str, Any]:
    """Measure the endpoint behind ``client`` (called ``name`` in errors) with ``n`` rounds:
    the figures of :func:`summarize`, the round count, the long prompt's size and every call's
    figures (``samples``). Without a known ``window``, a long prompt the server refuses as too
    long for its context is halved and the round sent again."""
    words = int(tokens * 0.8)
    size = long_prompt_tokens(long_tokens, window, tokens)
    short_calls: list[dict[str, Any]] = []
    long_calls: list[dict[str, Any]] = []
    cached_calls: list[dict[str, Any]] = []
    warm, _ = prompts(uuid.uuid4().hex[:8], words, size)
    await client.complete(ModelRequest((warm,), (), 0))
    rounds = max(1, n)
    while len(short_calls) < rounds:
        short, long = prompts(uuid.uuid4().hex[:8], words, size)
        try:
            got = [
                call_figures(await client.complete(ModelRequest(msgs, (), 0)))
                for msgs in ((short,), (long,), cached_followup(long, words, size // 3))
            ]
        except ModelAPIError as exc:  # no window known and the long prompt is over it
            if not _context_error(exc) or size <= 100:
                raise
            size //= 2
            continue
        for figures, calls in zip(got, (short_calls, long_calls, cached_calls), strict=True):
            if figures is not None:
                calls.append(figures)
        if got[0] is None:
            break
    if not short_calls or not long_calls:
        raise ModelError(
            f"tier '{name}': the probe calls produced no visible output "
            "(all tokens went to reasoning?); try a larger --tokens"
        )
    return {
        "n": len(short_calls),
        "context_window": window,
        "long_prompt_tokens": size,
        **summarize(short_calls, long_calls, cached_calls),
        "samples": {"short": short_calls, "long": long_calls, "cached": cached_calls},
    }
