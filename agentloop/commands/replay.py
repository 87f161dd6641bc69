"""``agentloop replay TRACE``: re-run a recorded run's model turns at another tier."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentloop.commands._args import add_routing, positive_int, routing_from
from agentloop.commands.progress import Progress
from agentloop.commands.run import cancellable_on_sigterm, print_summary
from agentloop.config.tiers import load_tiers
from agentloop.log import configure
from agentloop.redact import redactor


def register(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="re-run a trace's model turns at a tier",
        description=(
            "Serve the recorded model turns from the simulator at the chosen tier's pacing and run "
            "the tools again (tool time measured anew), reporting where results diverge from the "
            "recording; --offline feeds the recorded tool outputs instead."
        ),
    )
    p.add_argument("trace", type=Path, help="trace file (JSONL)")
    p.add_argument("--tier", help="tier to replay at (default: the recorded tier)")
    add_routing(p)
    p.add_argument(
        "--tiers",
        dest="tiers_file",
        type=Path,
        help="a tiers file layered on top of the built-in tiers and ./tiers.toml",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="feed the recorded tool outputs instead of running the tools again",
    )
    p.add_argument(
        "--until-step", type=positive_int, metavar="N", help="replay the first N steps only (>= 1)"
    )
    p.add_argument(
        "--trace-dir",
        type=Path,
        default=Path("traces"),
        help="where the replay's own trace goes (default: ./traces)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logs on stderr")
    p.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    from agentloop.api import RunConfig
    from agentloop.replay import replay

    configure(args.verbose)
    out = sys.stdout
    res = await cancellable_on_sigterm(
        replay(
            args.trace,
            offline=args.offline,
            until_step=args.until_step,
            config=RunConfig(
                tier=args.tier,
                tiers_file=args.tiers_file,
                routing=routing_from(args),
                trace_dir=args.trace_dir,
                events=Progress(out, args.quiet),
            ),
        )
    )
    if res is None:
        print("agentloop: terminated; the trace was closed with status cancelled", file=sys.stderr)
        return 143
    print_summary(res.run, out, load_tiers(args.tiers_file))
    if res.divergences:
        # the differing text is tool output: hostile, so it is redacted like every other line
        print(
            redactor().text(
                f"diverged {len(res.divergences)} time(s); first at {res.divergences[0].describe()}"
            ),
            file=out,
        )
    elif not args.offline:
        print("diverged  no: every tool result matched the recording", file=out)
    if res.run.success is False:  # a failed success check fails the replay, as it fails a run
        return 1
    return 0 if res.run.status in ("ok", "budget") else 1
