"""``agentloop import FILE -o TRACE``: another framework's OTLP JSON GenAI spans as a trace."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from agentloop.config.tiers import get_tier, load_tiers
from agentloop.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="turn OTLP JSON GenAI spans into an agentloop trace",
        description=(
            "Read an OTLP/JSON export (ExportTraceServiceRequest) of an agent's OpenTelemetry "
            "GenAI spans (invoke_agent, chat, execute_tool) and write an agentloop trace that "
            "report, whatif and compare read. Dependency edges are inferred (marked in the "
            "header); what the spans do not say (first-token time, reasoning split) stays unknown."
        ),
    )
    p.add_argument("file", type=Path, help="OTLP JSON file")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        metavar="TRACE",
        help="trace file to write (JSONL)",
    )
    p.add_argument(
        "--tier",
        help="the tier the spans ran on, if known: its speed profile goes "
        "in the header (compare needs one)",
    )
    p.add_argument("--tiers", type=Path, metavar="FILE", help="tiers file (with --tier)")
    p.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    from agentloop.export.otlp_import import import_otlp, write_trace

    tier = None
    if args.tier is not None:
        tiers = await asyncio.to_thread(load_tiers, args.tiers)
        tier = get_tier(tiers, args.tier, "--tier").summary()
    records = await asyncio.to_thread(import_otlp, args.file, tier)
    try:
        await asyncio.to_thread(write_trace, records, args.output)
    except OSError as exc:
        raise ConfigError(f"{args.output}: cannot write: {exc.strerror}") from None
    steps = records[-1]["steps"]
    print(
        f"wrote {args.output}: {len(records) - 2} records, {steps} steps "
        f"(edges inferred; unknown: first-token time and reasoning split)"
    )
    return 0
