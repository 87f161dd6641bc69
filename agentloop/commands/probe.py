"""``agentloop probe --tier NAME``: measure an endpoint's TTFT, output speed and prefill rate.

Like llmperf: fixed prompts of two input sizes, each asking for a long answer, ``n`` rounds of
one short and one long call (after one warm-up call that opens the connection). Per call
``output_tps = (V - 1) / decode`` with V visible tokens from the server's usage, and
``base = ttft_visible - R / output_tps`` (hidden reasoning is not prefill). Medians over rounds;
``prefill_tps`` = extra input tokens of the long prompt / extra base latency it cost. A simulated
tier is probed through a simulator started with that tier's profile, so the probe checks the
simulator's pacing end to end. ``--write`` puts the measured profile into the tiers file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from agentloop.errors import ModelError
from agentloop.log import configure
from agentloop.tiers import (
    SpeedProfile,
    Tier,
    default_tiers_path,
    get_tier,
    load_tiers,
    require_profile,
)
from agentloop.types import Message, ModelRequest, ModelResponse

_FILLER = ("The probe reads this background paragraph about harbours, tides, ledgers and the "
           "slow work of counting crates before the ships leave at dawn. ")
_ASK = ("Write a long, plain-prose story about a lighthouse keeper who keeps careful logs. "
        "Keep writing for at least {words} words; no headings, no lists.")


def register(sub: Any) -> None:
    p = sub.add_parser("probe", help="measure a tier's TTFT, output tok/s and prefill rate",
                       description=(
                           "Measure an endpoint's time to first token, output tokens/s and "
                           "prefill rate with a few calls (llmperf-style); --write stores the "
                           "medians as the tier's speed profile."))
    p.add_argument("--tier", required=True, help="tier to probe")
    p.add_argument("--tiers", dest="tiers_file", type=Path,
                   help="tiers file (default: ./tiers.toml, else the shipped one)")
    p.add_argument("-n", type=int, default=5, help="rounds of (short, long) calls (default 5)")
    p.add_argument("--tokens", type=int,
                   help="answer length asked for (default: about 1 s at the tier's profile speed)")
    p.add_argument("--long-tokens", type=int, default=8000,
                   help="approximate input tokens of the long prompt (default 8000)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logs on stderr")
    p.add_argument("--write", action="store_true",
                   help="rewrite the tier's profile in the tiers file with the measured one")
    p.set_defaults(func=main)


def prompts(round_id: str, words: int, long_tokens: int) -> tuple[Message, Message]:
    """The short and the long prompt; ``round_id`` first, so no prompt cache can serve them."""
    ask = _ASK.format(words=words)
    short = Message("user", f"[probe {round_id}] {ask}")
    reps = max(1, long_tokens // 25)  # the filler sentence is about 25 tokens
    long = Message("user", f"[probe {round_id}] Background notes:\n{_FILLER * reps}\n\n{ask}")
    return short, long


def call_figures(r: ModelResponse) -> dict[str, Any] | None:
    """One call's TTFT, output speed and base latency (reasoning time taken out); None if mute."""
    t, u = r.timing, r.usage
    if t.t_first_visible is None or t.t_last is None:
        return None
    ttft = (t.t_first_visible - t.t_send) / 1e9
    decode = (t.t_last - t.t_first_visible) / 1e9
    v = u.visible_tokens
    tps = (v - 1) / decode if v >= 2 and decode > 0 else float("nan")
    reasoning_s = u.reasoning_tokens / tps if tps == tps and tps > 0 else 0.0
    return {"ttft_s": ttft, "output_tps": tps, "base_s": ttft - reasoning_s,
            "input_tokens": u.input_tokens, "cached_input_tokens": u.cached_input_tokens,
            "output_tokens": u.output_tokens, "reasoning_tokens": u.reasoning_tokens,
            "attempts": len(r.attempts)}


def summarize(short: list[dict[str, Any]], long: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians, and the prefill rate from the long prompt's extra base latency."""
    med = statistics.median
    tps = med([c["output_tps"] for c in short + long if c["output_tps"] == c["output_tps"]]
              or [float("nan")])
    in_s, in_l = med([c["input_tokens"] for c in short]), med([c["input_tokens"] for c in long])
    base_s, base_l = med([c["base_s"] for c in short]), med([c["base_s"] for c in long])
    prefill = (in_l - in_s) / (base_l - base_s) if base_l > base_s and in_l > in_s else None
    base = max(0.0, base_s - in_s / prefill) if prefill else max(0.0, base_s)
    return {"ttft_s": med([c["ttft_s"] for c in short]),
            "ttft_long_s": med([c["ttft_s"] for c in long]),
            "output_tps": tps, "prefill_tps": prefill, "base_latency_s": base,
            "input_tokens_short": in_s, "input_tokens_long": in_l,
            "output_tokens": med([c["output_tokens"] for c in short + long]),
            "reasoning_tokens": med([c["reasoning_tokens"] for c in short + long])}


async def probe(tier: Tier, n: int = 5, tokens: int | None = None,
                long_tokens: int = 8000) -> dict[str, Any]:
    """Measure ``tier`` with ``n`` rounds; a simulated tier gets its own simulator."""
    from agentloop.clients.openai_client import OpenAIClient

    tokens = tokens or (int(min(1000, max(64, tier.profile.output_tps))) if tier.profile else 256)
    if tier.simulated:
        from agentloop.sim import SimServer

        async with SimServer(profile=require_profile(tier, "to pace its simulator"),
                             filler_tokens=tokens) as sim:
            client = OpenAIClient(tier, base_url=sim.base_url)
            try:
                return await _rounds(client, tier, n, tokens, long_tokens)
            finally:
                await client.aclose()
    reasons = tier.options.get("reasoning_effort") not in (None, "none", "minimal")
    asked = replace(tier, options={**tier.options,
                                   "max_output_tokens": tokens + (4096 if reasons else 0)})
    client = OpenAIClient(asked, stall_timeout_s=120.0)
    try:
        return await _rounds(client, tier, n, tokens, long_tokens)
    finally:
        await client.aclose()


async def _rounds(client: Any, tier: Tier, n: int, tokens: int,
                  long_tokens: int) -> dict[str, Any]:
    words = int(tokens * 0.8)
    short_calls: list[dict[str, Any]] = []
    long_calls: list[dict[str, Any]] = []
    warm, _ = prompts(uuid.uuid4().hex[:8], words, long_tokens)
    await client.complete(ModelRequest((warm,), (), 0))
    for _ in range(max(1, n)):
        short, long = prompts(uuid.uuid4().hex[:8], words, long_tokens)
        for prompt, calls in ((short, short_calls), (long, long_calls)):
            figures = call_figures(await client.complete(ModelRequest((prompt,), (), 0)))
            if figures is not None:
                calls.append(figures)
    if not short_calls or not long_calls:
        raise ModelError(f"tier '{tier.name}': the probe calls produced no visible output "
                         "(all tokens went to reasoning?); try a larger --tokens")
    return {"tier": tier.name, "model": tier.model, "base_url": tier.base_url, "api": tier.api,
            "n": len(short_calls), **summarize(short_calls, long_calls),
            "configured": tier.summary()["profile"],
            "samples": {"short": short_calls, "long": long_calls}}


def _print(res: dict[str, Any]) -> None:
    c = res["configured"]
    prefill = f"{res['prefill_tps']:.0f} tok/s" if res["prefill_tps"] else "too fast to measure"
    print(f"probe {res['tier']} ({res['base_url']}, model {res['model']}, {res['api']}): "
          f"{res['n']} rounds, {res['output_tokens']:.0f} output tokens "
          f"({res['reasoning_tokens']:.0f} reasoning), prompts of "
          f"{res['input_tokens_short']:.0f} and {res['input_tokens_long']:.0f} input tokens")
    print(f"  ttft, short prompt   {res['ttft_s']:8.3f} s")
    print(f"  ttft, long prompt    {res['ttft_long_s']:8.3f} s")
    print(f"  output speed         {res['output_tps']:8.1f} tok/s")
    print(f"  prefill              {prefill}")
    print(f"  base latency         {res['base_latency_s']:8.3f} s")
    if c is None:
        print("  configured profile:  none yet (--write stores the measured one)")
        return
    print(f"  configured profile:  base {c['base_latency_s']:g} s, prefill {c['prefill_tps']:g} "
          f"tok/s, output {c['output_tps']:g} tok/s")


async def main(args: argparse.Namespace) -> int:
    configure(args.verbose)  # logs (retries ...) go to stderr, never into --json output
    path = args.tiers_file or default_tiers_path()
    tier = get_tier(load_tiers(path), args.tier, source=path)
    res = await probe(tier, args.n, args.tokens, args.long_tokens)
    if args.json:
        sys.stdout.write(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print(res)
    if args.write:
        from agentloop.tiers import write_profile

        profile = SpeedProfile(base_latency_s=res["base_latency_s"],
                               prefill_tps=res["prefill_tps"] or (
                                   tier.profile.prefill_tps if tier.profile else 0.0),
                               output_tps=res["output_tps"])
        write_profile(path, tier.name, profile)
        print(f"wrote the measured profile of {tier.name} to {path}", file=sys.stderr)
    return 0
