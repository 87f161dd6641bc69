"""``agentloop route TRACE``: which tier each model call should use, from a recorded run."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from agentloop.analysis._table import table
from agentloop.analysis.graph import build_graph
from agentloop.analysis.mix import TierModel, options
from agentloop.analysis.route_plan import candidate_tiers, plan_document
from agentloop.commands.report import emit_json, load_for_analysis
from agentloop.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "route",
        help="which tier each model call should use (cheapest within a time limit)",
        description=(
            "Predict every model call of a recorded run on every candidate tier, then find the "
            "cheapest assignment whose re-timed run is within PCT of the all-fastest one (or "
            "the fastest within a budget). Prints the time/cost frontier and the plan with the "
            "reason per call; -o writes the plan for `run --routing` and `whatif --routing`."
        ),
    )
    p.add_argument("trace", type=Path, help="trace file (JSONL), or a suite folder")
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="with a suite folder: runs at once (default: as the suite ran)",
    )
    p.add_argument("--tiers", required=True, metavar="A,B[,C]", help="candidate tiers")
    p.add_argument("--tiers-file", type=Path, metavar="FILE", help="tiers file")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--within", metavar="PCT", help="time limit: PCT above the all-fastest run")
    how.add_argument("--budget-usd", type=float, metavar="X", help="cost limit in USD")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("-o", "--output", type=Path, metavar="PLAN.json", help="write the plan")
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the trace's HTML report with the time/cost frontier (the plan marked)",
    )
    p.set_defaults(func=main)


def parse_pct(text: str) -> float:
    """``10%`` or ``10``: a percentage >= 0; ConfigError (exit 2) otherwise."""
    try:
        v = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ConfigError(f"--within '{text}': expected a percentage such as 10%") from None
    if not v >= 0 or v == float("inf"):
        raise ConfigError(f"--within '{text}': must be a percentage >= 0")
    return v


async def main(args: argparse.Namespace) -> int:
    within = parse_pct(args.within) if args.within is not None else None
    if args.budget_usd is not None and not args.budget_usd >= 0:
        raise ConfigError("--budget-usd must be >= 0")
    tiers = await asyncio.to_thread(candidate_tiers, args.tiers, args.tiers_file)
    if args.trace.is_dir():  # a suite folder: a tier per task for the suite's wall time
        return await _suite(args, tiers, within)
    trace = await asyncio.to_thread(load_for_analysis, args.trace)
    o = options(build_graph(trace), tiers)
    if not o.calls:
        raise ConfigError(f"{args.trace}: no finished model calls to route")
    doc = await asyncio.to_thread(plan_document, o, within, args.budget_usd)
    if args.output is not None:
        args.output.write_text(json.dumps(doc["plan"], indent=2) + "\n", encoding="utf-8")
    if args.html is not None:
        from agentloop.export.html import report_html, route_section, write_html

        section = route_section(doc)
        await asyncio.to_thread(
            write_html, args.html, lambda t: report_html(t, extra=section), trace
        )
    if args.json:
        emit_json(doc)
    else:
        print(render(doc))
        if args.output is not None:
            print(f"\nplan written to {args.output} (agentloop run --routing {args.output})")
    return 0


def render(doc: dict[str, Any]) -> str:
    """The document as plain aligned text."""
    names = doc["tiers"]
    out = [
        f"route: {doc['task']} on {', '.join(names)}: {doc['goal']}",
        f"  all-fastest   {doc['fastest_s']:9.3f} s   ${doc['fastest_cost_usd']:.6f}",
        f"  all-cheapest  {doc['cheapest_s']:9.3f} s   ${doc['cheapest_cost_usd']:.6f}",
        f"  plan          {doc['predicted_s']:9.3f} s   ${doc['predicted_cost_usd']:.6f}   "
        + ", ".join(f"{n} {k}" for n, k in doc["calls_per_tier"].items())
        + " calls",
    ]
    if doc["method"] == "exhaustive":
        out.append("  optimal: every assignment was tried")
    elif doc["gap_usd"] <= 1e-12:
        out.append("  optimal: the plan meets the lower bound")
    else:
        out.append(
            f"  within ${doc['gap_usd']:.6f} of the optimum (no plan in the limit costs less "
            f"than ${doc['lower_bound_usd']:.6f})"
        )
    out += ["", "Time/cost frontier (predicted):"]
    out.append(
        table(
            ["time s", "cost $", *[f"{n} calls" for n in names], ""],
            [
                [
                    f"{p['predicted_s']:.3f}",
                    f"{p['predicted_cost_usd']:.6f}",
                    *[str(p["calls"][n]) for n in names],
                    "<- plan"
                    if abs(p["predicted_s"] - doc["predicted_s"]) < 5e-4
                    and abs(p["predicted_cost_usd"] - doc["predicted_cost_usd"]) < 1e-9
                    else "",
                ]
                for p in doc["frontier"]
            ],
        )
    )
    out += ["", "Plan (per call):"]
    rows = [
        [
            c["agent"],
            str(c["invocation"]),
            str(c["step"]),
            c["tier"],
            f"{c['predicted_s']:.3f}",
            c["reason"],
        ]
        for c in doc["calls"]
    ]
    if len(rows) > 40:
        rows = [*rows[:30], ["...", "", "", "", "", f"{len(rows) - 35} calls more"], *rows[-5:]]
    out.append(table(["agent", "inv", "step", "tier", "call s", "why"], rows))
    return "\n".join(out)


async def _suite(args: argparse.Namespace, tiers: list[TierModel], within: float | None) -> int:
    from agentloop.suite.records import load_suite
    from agentloop.suite.route import render_suite_route, route_suite, suite_options

    n = args.concurrency
    if n is None:
        n = (await asyncio.to_thread(load_suite, args.trace)).concurrency
    o = await asyncio.to_thread(suite_options, args.trace, tiers, n)
    doc = route_suite(o, within, args.budget_usd)
    if args.output is not None:
        args.output.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if args.json:
        emit_json(doc)
    else:
        print(render_suite_route(doc))
    return 0
