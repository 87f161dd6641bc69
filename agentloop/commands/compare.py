"""``agentloop compare A B``: measured vs predicted speedup between two runs of one task."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from agentloop.analysis.compare import compare, compare_json, render_compare
from agentloop.analysis.graph import build_graph
from agentloop.commands.report import emit_json, load_for_analysis
from agentloop.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="check a what-if prediction against a real run",
        description=(
            "Two traces of the same task on two tiers: measured speedup, the speedup predicted "
            "from A alone (re-timed to B's tier profile), the prediction error, and per-step and "
            "per-category differences."
        ),
    )
    p.add_argument("a", type=Path, help="trace of run A (the baseline), or a suite folder")
    p.add_argument("b", type=Path, help="trace of run B (the faster tier), or a suite folder")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a self-contained HTML "
        "page: both waterfalls on one time axis, measured vs predicted speedup",
    )
    p.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    if args.a.is_dir() or args.b.is_dir():  # two suite folders (agentloop suite)
        if args.html is not None:  # issue 13: the page draws two runs, not two suites
            raise ConfigError(
                "--html draws two traces; for suite folders use --json or the "
                "tables (or give --html two of their traces)"
            )
        from agentloop.suite.compare import compare_suites
        from agentloop.suite.compare_view import render_suite_compare, suite_compare_json

        sc = await asyncio.to_thread(compare_suites, args.a, args.b)
        if args.json:
            emit_json(suite_compare_json(sc))
        else:
            print(render_suite_compare(sc))
        return 0
    a = await asyncio.to_thread(load_for_analysis, args.a)
    b = await asyncio.to_thread(load_for_analysis, args.b)
    result = compare(build_graph(a), build_graph(b))
    if args.html is not None:  # issue 13: the comparison as one HTML file
        from agentloop.export.html import compare_html, write_html

        await asyncio.to_thread(write_html, args.html, compare_html, a, b)
    if args.json:
        emit_json(compare_json(result))
    else:
        print(render_compare(result))
    return 0
