"""``agentloop probe --tier NAME``: measure an endpoint's TTFT, output speed and prefill rate.

The measuring (prompts, rounds, fits) is :mod:`agentloop.model.probe`'s; here the tier picks the
endpoint: a simulated tier is probed through a simulator started with that tier's profile (so the
probe checks the simulator's pacing end to end), a local tier through its own llama-server, any
other at its ``base_url``. ``--write`` puts the measured profile into the tiers file.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from agentloop.config.tiers import Tier, default_tiers_path, get_tier, load_tiers, require_profile
from agentloop.log import configure
from agentloop.model import local
from agentloop.model.probe import answer_tokens, measure, measured_profile, server_context
from agentloop.protocols import ModelClient

__all__ = ["measured_profile", "probe", "register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="measure a tier's TTFT, output tok/s and prefill rate",
        description=(
            "Measure an endpoint's time to first token, output tokens/s and "
            "prefill rate with a few calls (llmperf-style); --write stores the "
            "medians as the tier's speed profile."
        ),
    )
    p.add_argument("--tier", required=True, help="tier to probe")
    p.add_argument(
        "--tiers",
        dest="tiers_file",
        type=Path,
        help="tiers file (default: ./tiers.toml, else the shipped one)",
    )
    p.add_argument("-n", type=int, default=5, help="rounds of (short, long) calls (default 5)")
    p.add_argument(
        "--tokens",
        type=int,
        help="answer length asked for (default: about 1 s at the tier's profile speed)",
    )
    p.add_argument(
        "--long-tokens",
        type=int,
        default=8000,
        help="approximate input tokens of the long prompt (default 8000)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logs on stderr")
    p.add_argument(
        "--write",
        action="store_true",
        help="rewrite the tier's profile in the tiers file with the measured one",
    )
    p.set_defaults(func=main)


async def probe(
    tier: Tier, n: int = 5, tokens: int | None = None, long_tokens: int = 8000
) -> dict[str, Any]:
    """Measure ``tier`` with ``n`` rounds; a simulated tier gets its own simulator, a local
    tier its own llama-server."""
    from agentloop.clients.openai_client import OpenAIClient

    tokens = tokens or answer_tokens(tier.profile)
    if tier.simulated:
        from agentloop.sim import SimServer

        async with SimServer(
            profile=require_profile(tier, "to pace its simulator"), filler_tokens=tokens
        ) as sim:
            client = OpenAIClient(tier, base_url=sim.base_url, server_on_loop=True)
            return await _measured(client, tier, n, tokens, long_tokens, tier.context_window)
    reasons = tier.options.get("reasoning_effort") not in (None, "none", "minimal")
    asked = replace(
        tier, options={**tier.options, "max_output_tokens": tokens + (4096 if reasons else 0)}
    )
    if tier.local is not None:
        async with local.serve(tier.local) as server:
            client = OpenAIClient(asked, base_url=server.base_url, stall_timeout_s=120.0)
            window = tier.context_window or server.context_window
            return await _measured(client, asked, n, tokens, long_tokens, window)
    window = tier.context_window or await server_context(tier.base_url)
    client = OpenAIClient(asked, base_url=None, stall_timeout_s=120.0)
    return await _measured(client, asked, n, tokens, long_tokens, window)


async def _measured(
    client: ModelClient, tier: Tier, n: int, tokens: int, long_tokens: int, window: int | None
) -> dict[str, Any]:
    """The engine's figures for ``tier`` (the client closed after), with the tier's names."""
    try:
        figures = await measure(
            client, name=tier.name, n=n, tokens=tokens, long_tokens=long_tokens, window=window
        )
    finally:
        await client.aclose()
    samples = figures.pop("samples")
    return {
        "tier": tier.name,
        "model": tier.model,
        "base_url": tier.base_url,
        "api": tier.api,
        **figures,
        "configured": tier.summary()["profile"],
        "samples": samples,
    }


def _print(res: dict[str, Any]) -> None:
    c = res["configured"]
    prefill = f"{res['prefill_tps']:.0f} tok/s" if res["prefill_tps"] else "too fast to measure"
    print(
        f"probe {res['tier']} ({res['base_url']}, model {res['model']}, {res['api']}): "
        f"{res['n']} rounds, {res['output_tokens']:.0f} output tokens "
        f"({res['reasoning_tokens']:.0f} reasoning), prompts of "
        f"{res['input_tokens_short']:.0f} and {res['input_tokens_long']:.0f} input tokens"
    )
    print(f"  ttft, short prompt   {res['ttft_s']:8.3f} s")
    print(f"  ttft, long prompt    {res['ttft_long_s']:8.3f} s")
    print(
        f"  output speed         {res['output_tps']:8.1f} tok/s at context "
        f"{res['context_short']:.0f}, {res['output_tps_long']:.1f} tok/s at "
        f"{res['context_long']:.0f}"
    )
    if res["tpot_ms_per_1k"]:
        print(
            f"  decode slows         {res['tpot_ms_per_1k']:8.3f} ms per token per 1,000 "
            f"tokens of context ({res['output_tps_at_0']:.1f} tok/s at context 0)"
        )
    if res["server_output_tps"]:
        print(f"  server's own figure  {res['server_output_tps']:8.1f} tok/s (short prompt)")
    print(f"  prefill              {prefill}")
    print(f"  base latency         {res['base_latency_s']:8.3f} s")
    if res["prefill_ms_per_1k"]:
        print(
            f"  prefill slows        {res['prefill_ms_per_1k']:8.3f} ms per token per 1,000 "
            "tokens of context"
        )
    if res["cached_tokens"]:
        print(
            f"  behind a cache       ttft {res['ttft_cached_s']:.3f} s for "
            f"{res['fresh_tokens_cached_call']:.0f} fresh tokens after "
            f"{res['cached_tokens']:.0f} cached ones (cached input itself costs nothing)"
        )
    if res["context_window"]:
        print(
            f"  context window       {res['context_window']} tokens (long prompt sized "
            f"{res['long_prompt_tokens']})"
        )
    if c is None:
        print("  configured profile:  none yet (--write stores the measured one)")
        return
    print(
        f"  configured profile:  base {c['base_latency_s']:g} s, prefill {c['prefill_tps']:g} "
        f"tok/s, output {c['output_tps']:g} tok/s"
    )


async def main(args: argparse.Namespace) -> int:
    configure(args.verbose)  # logs (retries ...) go to stderr, never into --json output
    path = args.tiers_file or default_tiers_path()
    tier = get_tier(load_tiers(path), args.tier, source="--tier")
    res = await probe(tier, args.n, args.tokens, args.long_tokens)
    if args.json:
        sys.stdout.write(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print(res)
    if args.write:
        from agentloop.config.tier_write import write_profile

        profile = measured_profile(res, tier.profile.prefill_tps if tier.profile else 0.0)
        write_profile(path, tier.name, profile)
        print(f"wrote the measured profile of {tier.name} to {path}", file=sys.stderr)
    return 0
