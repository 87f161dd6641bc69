"""``agentloop whatif TRACE``: what a recorded run would take on a faster tier."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from agentloop.analysis.graph import build_graph, load_quickly
from agentloop.analysis.whatif import Scenario, render_whatif, whatif, whatif_json
from agentloop.commands.report import emit_json
from agentloop.errors import ConfigError
from agentloop.tiers import get_tier, load_tiers


def register(sub: Any) -> None:
    p = sub.add_parser("whatif", help="predict a recorded run on another tier", description=(
        "Re-time the recorded dependency graph with new model durations (tools and framework "
        "gaps unchanged): predicted time, speedup, Amdahl ceiling, where the saving comes "
        "from, and the speedup curve as output speed grows."))
    p.add_argument("trace", type=Path, help="trace file (JSONL)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--tier", help="predict on this tier's speed profile")
    how.add_argument("--speedup", type=float, metavar="K",
                     help="divide the measured reasoning + decode time by K")
    p.add_argument("--tiers", type=Path, metavar="FILE", help="tiers file (with --tier)")
    p.add_argument("--prefill-speedup", type=float, default=1.0, metavar="P",
                   help="with --speedup: divide the measured base (queue+prefill) time by P")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    if args.tier is not None:
        if args.prefill_speedup != 1.0:
            raise ConfigError("--prefill-speedup goes with --speedup; a tier's profile already "
                              "says its prefill speed")
        tiers = await asyncio.to_thread(load_tiers, args.tiers)
        tier = get_tier(tiers, args.tier, args.tiers or "tiers.toml")
        scenario = Scenario.tier(tier.name, tier.profile)
    else:
        scenario = Scenario.multipliers(args.speedup, args.prefill_speedup)
    trace = await asyncio.to_thread(load_quickly, args.trace)
    result = whatif(build_graph(trace), scenario)
    if args.json:
        emit_json(whatif_json(result))
    else:
        print(render_whatif(result))
    return 0
