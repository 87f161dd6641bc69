"""``agentloop whatif TRACE``: what a recorded run would take on a faster tier."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from agentloop.analysis.graph import gc_paused
from agentloop.analysis.report import unsplit_fields, unsplit_note
from agentloop.analysis.whatif import Scenario, WhatIf, whatif_json
from agentloop.analysis.whatif_text import render_whatif
from agentloop.commands.report import big_trace_columns, emit_json
from agentloop.config.tiers import get_tier, load_tiers, require_profile
from agentloop.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "whatif",
        help="predict a recorded run on another tier",
        description=(
            "Re-time the recorded dependency graph with new model durations (tools and framework "
            "gaps unchanged): predicted time, speedup, Amdahl ceiling, where the saving comes "
            "from, and the speedup curve as output speed grows."
        ),
    )
    p.add_argument("trace", type=Path, help="trace file (JSONL), or a suite folder")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--tier", help="predict on this tier's speed profile")
    how.add_argument(
        "--speedup",
        type=float,
        metavar="K",
        help="divide the measured reasoning + decode time by K",
    )
    how.add_argument(
        "--route",
        action="append",
        metavar="AGENT=TIER",
        help="re-time with this agent's calls on TIER ('main' for the top agent; repeatable); "
        "other calls keep the tier they used",
    )
    how.add_argument(
        "--routing", type=Path, metavar="PLAN.json", help="re-time with a plan (agentloop route -o)"
    )
    p.add_argument("--tiers", type=Path, metavar="FILE", help="tiers file (with --tier)")
    p.add_argument(
        "--prefill-speedup",
        type=float,
        default=1.0,
        metavar="P",
        help="with --speedup: divide the measured base (queue+prefill) time by P",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help=("with a suite folder: runs at once on the new tier (default: as the suite ran)"),
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    if args.trace.is_dir():  # a suite folder (agentloop suite): predicted wall time and cost
        return await _suite(args)
    if args.route or args.routing is not None:
        return await _mix(args)
    if args.tier is not None:
        if args.prefill_speedup != 1.0:
            raise ConfigError(
                "--prefill-speedup goes with --speedup; a tier's profile already "
                "says its prefill speed"
            )
        tiers = await asyncio.to_thread(load_tiers, args.tiers)
        tier = get_tier(tiers, args.tier, "--tier")
        scenario = Scenario.tier(tier.name, require_profile(tier))
    else:
        scenario = Scenario.multipliers(args.speedup, args.prefill_speedup)
    result, unsplit = await asyncio.to_thread(_whatif_file, args.trace, scenario)
    with gc_paused():  # a long run's result has a row per step: 200,000 dicts, no cycles
        if args.json:
            emit_json({**whatif_json(result), **unsplit})
        else:
            print(render_whatif(result))
            if unsplit:
                print("\n" + unsplit_note(unsplit["unsplit_calls"]))
    return 0


def _whatif_file(path: Path, scenario: Scenario) -> tuple[WhatIf, dict[str, Any]]:
    """A big trace on its columns (cached beside it), a small one with the loops: one result,
    with the client's lateness and the imported calls that could not be split
    (:func:`unsplit_fields`), the same from either."""
    with big_trace_columns(path) as columns:  # a cold trace's cache written meanwhile
        if columns is not None:
            from agentloop.analysis import vwhatif

            with gc_paused():  # a row per step: 200,000 objects in a long run, no cycles
                w = vwhatif.whatif_columns(columns, scenario)
            return dataclasses.replace(w, lateness=columns.lateness), unsplit_fields(
                list(columns.unsplit)
            )
    from agentloop.analysis.graph import build_graph
    from agentloop.analysis.report import unsplit_json
    from agentloop.analysis.whatif import whatif, with_lateness
    from agentloop.commands.report import load_for_analysis

    trace = load_for_analysis(path)
    return with_lateness(whatif(build_graph(trace), scenario), trace), unsplit_json(trace)


async def _suite(args: argparse.Namespace) -> int:
    from agentloop.suite.whatif import render_suite_whatif, suite_whatif, suite_whatif_json

    if args.tier is None:
        raise ConfigError("a suite folder is predicted on a tier: use --tier NAME")
    tiers = await asyncio.to_thread(load_tiers, args.tiers)
    tier = get_tier(tiers, args.tier, "--tier")
    w = await asyncio.to_thread(suite_whatif, args.trace, tier, args.concurrency)
    if args.json:
        emit_json(suite_whatif_json(w))
    else:
        print(render_suite_whatif(w))
    return 0


async def _mix(args: argparse.Namespace) -> int:
    """Each call on its own tier (a routing): predicted time and cost, per tier."""
    from agentloop.analysis.mix import (
        TierModel,
        check_plan,
        choice_of,
        options,
        predict,
        recorded_models,
    )
    from agentloop.config.routing import load_plan, parse_routes

    if args.routing is not None:
        routing, source = load_plan(args.routing), str(args.routing)
    else:
        routing, source = parse_routes(args.route), "--route"
    from agentloop.analysis.graph import build_graph
    from agentloop.commands.report import load_for_analysis
    from agentloop.config.routing import Routing

    trace = await asyncio.to_thread(load_for_analysis, args.trace)
    g = build_graph(trace)
    # the tiers file's profiles and prices (as `route` and `whatif --tier` use), else the
    # header's for a recorded tier the file does not know
    cands = {t.name: t for t in recorded_models(g)}
    known = await asyncio.to_thread(load_tiers, args.tiers)
    check_plan(g, routing, set(cands) | set(known), source)
    for name in sorted(routing.tiers() | set(cands)):
        if name in known or name not in cands:
            tier = get_tier(known, name, args.tiers or "tiers.toml")
            cands[name] = TierModel.of(tier.name, tier.profile, tier.prices)
    o = options(g, list(cands.values()))
    recorded = predict(o, choice_of(o, Routing()))
    p = predict(o, choice_of(o, routing))
    doc: dict[str, Any] = {
        "scenario": f"routing {source}",
        "measured_s": g.measured_ns / 1e9,
        "recorded_tiers_predicted_s": recorded.predicted_ns / 1e9,
        "predicted_s": p.predicted_ns / 1e9,
        "predicted_cost_usd": p.cost_usd,
        "recorded_cost_usd": recorded.cost_usd,
        "tiers": {
            n: {"calls": p.calls_per_tier[n], "cost_usd": p.cost_per_tier[n]}
            for n in p.calls_per_tier
            if p.calls_per_tier[n]
        },
    }
    if args.json:
        emit_json(doc)
        return 0
    print(f"what-if: {doc['scenario']}")
    print(f"  measured   {g.measured_ns / 1e9:.3f} s")
    print(
        f"  predicted  {p.predicted_ns / 1e9:.3f} s   cost ${p.cost_usd:.6f} "
        f"(the calls on the tiers they used: {recorded.predicted_ns / 1e9:.3f} s, "
        f"${recorded.cost_usd:.6f})"
    )
    for n, v in doc["tiers"].items():
        print(f"  {n:<16} {v['calls']:5d} calls  ${v['cost_usd']:.6f}")
    return 0
