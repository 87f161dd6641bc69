"""``agentloop tiers [--check]``: list the configured model tiers, optionally asking each endpoint.

``--check`` calls each endpoint's ``models.list()`` (a simulated tier: a simulator started for the
check) and says per tier whether its model id is served; a self-started local tier's llama-server
is started once with its model and stopped (a crash is reported with its signal and likely cause).
A missing key, an unreachable endpoint or a server that will not start is reported on that tier's
line, never as a crash; any tier not ok makes the exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from agentloop.config.tiers import (
    Tier,
    get_tier,
    load_tiers,
    public_options,
    require_profile,
    tier_sources,
)
from agentloop.log import configure
from agentloop.redact import scrub_text


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tiers",
        help="list model tiers (and check their endpoints)",
        description=(
            "List the tiers of a tiers file: endpoint, model, API, options and speed profile. "
            "With --check, ask each endpoint which models it serves."
        ),
    )
    p.add_argument(
        "--tiers",
        dest="tiers_file",
        type=Path,
        help="a tiers file layered on top of the built-in tiers and ./tiers.toml",
    )
    p.add_argument(
        "--tier",
        dest="only",
        action="append",
        metavar="NAME",
        help="only this tier (repeatable), e.g. --check --tier local-smollm2",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help=(
            "ask each endpoint's models list whether the tier's model is enabled; start a local "
            "tier's server once to see that it runs here"
        ),
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        help="seconds per endpoint for --check (default 5; a local server: its startup_timeout_s)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logs on stderr")
    p.set_defaults(func=main)


async def check_tier(tier: Tier, timeout_s: float = 5.0) -> dict[str, Any]:
    """``{"ok": bool, "status": text}`` for one tier; never raises for endpoint trouble."""
    from agentloop.clients.openai_client import SIM_PLACEHOLDER_KEY

    if tier.local is not None:  # self-started (agentloop/model/local.py): does it start here?
        from agentloop.model.local import start_check

        return await start_check(tier.local)
    if tier.simulated:
        from agentloop.sim import SimServer

        profile = require_profile(tier, "to pace its simulator")
        async with SimServer(profile=profile, profiles={tier.model: profile}) as sim:
            return await _ask(tier, sim.base_url, SIM_PLACEHOLDER_KEY, timeout_s)
    if tier.api_key_env and not os.environ.get(tier.api_key_env):
        return {"ok": False, "status": f"no key: environment variable {tier.api_key_env} not set"}
    key = os.environ.get(tier.api_key_env) if tier.api_key_env else None
    return await _ask(tier, tier.base_url, key or SIM_PLACEHOLDER_KEY, timeout_s)


async def _ask(tier: Tier, base_url: str, key: str, timeout_s: float) -> dict[str, Any]:
    import httpx2
    import openai

    client = openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        max_retries=0,
        timeout=httpx2.Timeout(timeout_s, connect=min(timeout_s, 3.0)),
    )
    try:
        async with asyncio.timeout(timeout_s + 1.0):
            ids = [m.id async for m in client.models.list()]
    except openai.APIStatusError as exc:
        text = scrub_text(exc.message, [key])
        return {"ok": False, "status": f"endpoint refused: HTTP {exc.status_code}: {text[:160]}"}
    except (openai.APIConnectionError, TimeoutError) as exc:
        what = (
            "timed out"
            if isinstance(exc, (TimeoutError, openai.APITimeoutError))
            else f"unreachable ({type(exc.__cause__ or exc).__name__})"
        )
        return {"ok": False, "status": f"{what}: {base_url}"}
    except openai.OpenAIError as exc:
        return {"ok": False, "status": f"error: {type(exc).__name__}"}
    finally:
        await client.close()
    if tier.model in ids:
        return {"ok": True, "status": f"enabled ({len(ids)} models served)"}
    near = ", ".join(sorted(ids)[:5]) + (" ..." if len(ids) > 5 else "")
    return {"ok": False, "status": f"model '{tier.model}' not served (serves: {near or 'none'})"}


def _options(tier: Tier) -> str:
    return ", ".join(f"{k}={v}" for k, v in public_options(tier.options).items()) or "-"


def _profile(tier: Tier) -> str:
    p = tier.profile
    if p is None:
        return f"not measured (agentloop probe --tier {tier.name} --write)"
    return (
        f"base {p.base_latency_s:g} s, prefill {p.prefill_tps:g} tok/s, out {p.output_tps:g} tok/s"
    )


async def main(args: argparse.Namespace) -> int:
    configure(args.verbose)  # logs (retries ...) go to stderr, never into --json output
    tiers = load_tiers(args.tiers_file)
    sources = tier_sources(args.tiers_file)
    if args.only:
        tiers = {n: get_tier(tiers, n, "--tier") for n in args.only}
    checks: dict[str, dict[str, Any]] = {}
    if args.check:
        async with asyncio.TaskGroup() as tg:
            tasks = {name: tg.create_task(check_tier(t, args.timeout)) for name, t in tiers.items()}
        checks = {name: task.result() for name, task in tasks.items()}
    if args.json:
        out = [
            {**t.summary(), "source": sources[n], **({"check": checks[n]} if n in checks else {})}
            for n, t in tiers.items()
        ]
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0 if all(c["ok"] for c in checks.values()) else 1
    print("tiers, layered: built-in < ./tiers.toml < --tiers (SOURCE: where each came from)")
    rows = [("TIER", "ENDPOINT", "MODEL", "API", "OPTIONS", "SOURCE", "PROFILE")]
    rows += [
        (n, t.base_url, t.model, t.api, _options(t), sources[n], _profile(t))
        for n, t in tiers.items()
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:6], widths, strict=True)) + "  " + r[6])
    if checks:
        print()
        for n, c in checks.items():
            first, *more = str(c["status"]).splitlines() or [""]
            print(f"{'ok ' if c['ok'] else 'NO '} {n:<{widths[0]}}  {first}")
            for line in more:  # a crashed server's last log lines, indented under its tier
                print(f"    {'':<{widths[0]}}  {line}")
    return 0 if all(c["ok"] for c in checks.values()) else 1
