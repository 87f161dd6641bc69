"""``agentloop suite PATH...``: many task files, repeated, concurrently; a suite report and folder."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentloop.commands._args import add_routing, routing_from
from agentloop.commands.report import emit_json
from agentloop.config.shipped import find_suite_or_task, looks_like_name
from agentloop.errors import ConfigError
from agentloop.suite.records import SUITE_FILE, Suite, load_suite
from agentloop.suite.report import render_suite, suite_json
from agentloop.suite.run import Progress, run_suite


def register(sub: Any) -> None:
    p = sub.add_parser(
        "suite",
        help="run many tasks, repeated, concurrently",
        description=(
            "Run task files (or folders of them, or a shipped suite by name: hle, gdpval) "
            "concurrently in one process, each repeated R times; simulated tiers share one "
            "simulator. Traces go under DIR/traces, the report to DIR/suite.json and stdout; live "
            "progress on stderr. A failing run never stops the others. Then: agentloop compare "
            "DIR_A DIR_B, agentloop whatif DIR --tier NAME."
        ),
    )
    p.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="task files or folders, or a shipped suite or task by name (hle, gdpval, ...)",
    )
    p.add_argument("--tier", help="model tier for every task (default: each task's own)")
    add_routing(p)
    p.add_argument("--tiers", dest="tiers_file", type=Path, help="tiers file (default tiers.toml)")
    p.add_argument(
        "--concurrency", type=int, default=8, metavar="N", help="runs at once (default 8)"
    )
    p.add_argument(
        "--repeat", type=int, default=1, metavar="R", help="runs of each task (default 1)"
    )
    p.add_argument(
        "--out", type=Path, metavar="DIR", help="suite folder (default suites/<UTC time>-<tier>)"
    )
    p.add_argument("--max-steps", type=int, help="override every task's step limit")
    p.add_argument("--timeout", type=float, help="override every task's wall-time limit, s")
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help=(
            "run each run as a Ray task on this cluster (auto, HOST:PORT, ray://HOST:PORT, or "
            "local to start one here); needs agentloop[ray]"
        ),
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=main)


class ProgressLine:
    """The suite's live progress on stderr: one rewritten line on a terminal, else a line
    every ``every`` ticks."""

    def __init__(self, every: int = 10) -> None:
        self.tty = sys.stderr.isatty()
        self.every, self.n = every, 0
        self.open = False  # a rewritten line without its newline yet

    def close(self) -> None:
        """End the rewritten line, so a last line of the command's own starts a line."""
        if self.open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.open = False

    def __call__(self, state: Progress) -> None:
        self.n += 1
        finished = state.done == state.total
        if self.tty:
            sys.stderr.write("\r" + state.line() + ("\n" if finished else ""))
            sys.stderr.flush()
            self.open = not finished
        elif finished or self.n % self.every == 0:
            print(state.line(), file=sys.stderr, flush=True)


def _shipped_if_named(path: Path) -> Path:
    """``path`` as given, or, a bare name that is no file or folder here, the shipped suite
    (``tasks/suites/<name>/``) or task of that name: the same from a checkout or a wheel."""
    if path.exists() or not looks_like_name(str(path)):
        return path
    return find_suite_or_task(str(path))


async def main(args: argparse.Namespace) -> int:
    out = args.out or Path("suites") / (
        f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{args.tier or 'default'}"
    )
    progress = ProgressLine()
    try:
        suite = await _run(args, out, progress)
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancelled this task; suite.json is kept
        progress.close()
        if (me := asyncio.current_task()) is not None:
            me.uncancel()
        print(f"agentloop: interrupted; {_kept(out)}", file=sys.stderr)
        return 130
    if args.json:
        emit_json(suite_json(suite))
    else:
        print(render_suite(suite))
        print(f"folder      {out}  (suite.json, traces/)")
    return 0 if all(r.passed for r in suite.runs) else 1


def _kept(out: Path) -> str:
    """What an interrupted suite left, in one clause."""
    try:
        suite = load_suite(out)
    except ConfigError:
        return "nothing was run"
    cancelled = sum(r.status == "cancelled" for r in suite.runs)
    return (
        f"suite at {out / SUITE_FILE}: {len(suite.runs) - cancelled} runs ended, {cancelled} "
        f"cancelled (their traces kept), {suite.not_started} not started"
    )


async def _run(args: argparse.Namespace, out: Path, progress: ProgressLine) -> Suite:
    return await run_suite(
        [_shipped_if_named(p) for p in args.paths],
        out,
        tier=args.tier,
        tiers_file=args.tiers_file,
        routing=routing_from(args),
        concurrency=args.concurrency,
        repeat=args.repeat,
        max_steps=args.max_steps,
        timeout_s=args.timeout,
        ray=args.ray,
        progress=progress,
        # the process is the command's: what the first wave set up is kept out of the
        # collector's walks while it runs (agentloop.suite.gate)
        freeze_gc=True,
    )
