"""``agentloop run TASK``: run a task file, showing each step, and summarise where time went."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TextIO, TypeVar

from agentloop import api
from agentloop.commands._args import add_routing, positive_float, positive_int, routing_from
from agentloop.commands.progress import Progress
from agentloop.config.tiers import Tier, load_tiers, require_key
from agentloop.errors import AgentloopError
from agentloop.log import configure
from agentloop.loop.ending import RunResult
from agentloop.redact import Redactor, redactor
from agentloop.wiring.execute import CANCELLED_IN_SETUP

T = TypeVar("T")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a task file",
        description=(
            "Run a task file end to end. The default tier is the embedded simulator: no API key, "
            "no network. Progress goes to stdout, logs to stderr, the trace to --trace-dir."
        ),
    )
    p.add_argument(
        "task",
        type=Path,
        help="task file (YAML), or the name of a shipped task (`agentloop tasks` lists them)",
    )
    p.add_argument("--tier", help="model tier (default: the task's, else sim-standard)")
    add_routing(p)
    p.add_argument(
        "--tiers",
        dest="tiers_file",
        type=Path,
        help="a tiers file layered on top of the built-in tiers and ./tiers.toml",
    )
    p.add_argument("--max-steps", type=positive_int, help="override the task's step limit (>= 1)")
    p.add_argument(
        "--timeout", type=positive_float, help="override the task's wall-time limit, seconds (> 0)"
    )
    p.add_argument(
        "--trace-dir",
        type=Path,
        default=Path("traces"),
        help="where the trace file goes (default: ./traces)",
    )
    p.add_argument(
        "--keep-workspace",
        action="store_true",
        help="keep the run's working copy and print its path",
    )
    p.add_argument(
        "--otlp",
        metavar="URL",
        help="also stream each span as it ends to this "
        "OTLP/HTTP collector (e.g. http://127.0.0.1:4318); never slows or fails the run",
    )
    p.add_argument(
        "--unconfined",
        action="store_true",
        help="where no jail can be had, run a real model's commands on the host anyway "
        "(refused without this: a model's output is hostile)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logs on stderr")
    p.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    configure(args.verbose)
    out = sys.stdout
    task = api.open_task(args.task)
    tier = api.resolve_tier(task, args.tier, args.tiers_file, asked_by="--tier")
    require_key(tier)  # before the header and the set-up: exit 2 naming the variable
    where = "embedded simulator" if tier.simulated else tier.base_url
    speed = f"{tier.profile.output_tps:g} tok/s" if tier.profile else "speed not profiled"
    print(
        redactor().text(
            f"agentloop run {task.name}  tier {tier.name} ({tier.model} via {where}, {speed})"
        ),
        file=out,
        flush=True,
    )
    started = time.monotonic()  # the wall time: the run's set-up and success check included
    progress = Progress(out, args.quiet)
    config = api.RunConfig(
        tier=tier,
        trace_dir=args.trace_dir,
        max_steps=args.max_steps,
        timeout_s=args.timeout,
        events=progress,
        keep_workspace=args.keep_workspace,
        otlp=args.otlp,
        unconfined=args.unconfined,
        routing=routing_from(args, task.name),
    )
    plan = api.plan_run(task, config)  # the trace's path, known before the run starts
    try:
        result = await cancellable_on_sigterm(api.execute(plan, config))
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancelled this task; the run is closed
        progress.close()
        if (me := asyncio.current_task()) is not None:
            me.uncancel()
        print(f"agentloop: interrupted; {_trace_kept(plan.trace_path)}", file=sys.stderr)
        return 130
    if result is None:
        progress.close()
        print(f"agentloop: terminated; {_trace_kept(plan.trace_path)}", file=sys.stderr)
        return 143
    wall_s = time.monotonic() - started
    print_summary(result, out, load_tiers(args.tiers_file, extra=task.tiers), wall_s=wall_s)
    if result.status != "ok":
        return 1
    return 0 if result.success is not False else 1


def _trace_kept(path: Path) -> str:
    """Where an ended run's trace is, said for the line after an interrupt."""
    if not path.is_file():
        return "no trace (the run had not started)"
    from agentloop.trace.reader import load_trace

    try:
        trace = load_trace(path)
    except AgentloopError:  # cut mid-write: still the run's trace
        return f"trace at {path} (cut short)"
    end = trace.end_record
    if end is not None and end.reason == CANCELLED_IN_SETUP:
        return f"trace at {path} (stopped in its set-up: closed with status cancelled, no run span)"
    if end is not None:
        return f"trace at {path} (closed with status cancelled)"
    return f"trace at {path} (stopped in its set-up: the setup span, no run span)"


async def cancellable_on_sigterm(job: Awaitable[T]) -> T | None:
    """Await ``job``; SIGTERM cancels it cleanly (the trace gets its end record) -> None."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    terminated = False

    def on_term() -> None:
        nonlocal terminated
        terminated = True
        if task is not None:
            task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    try:
        return await job
    except asyncio.CancelledError:
        if not terminated or task is None:
            raise
        task.uncancel()
        return None
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def print_summary(
    result: RunResult,
    out: TextIO,
    tiers: dict[str, Tier] | None = None,
    redact: Redactor | None = None,
    *,
    wall_s: float | None = None,
) -> None:
    """The run's ending, time by category and the what-if hint; every line redacted. Two times,
    named (issue 24): the agent's (the run span, what the what-if re-times) and, when the caller
    measured it, ``wall_s``, the command's wall time with the set-up and the success check."""
    from agentloop.trace.reader import load_trace

    scrub = redact or redactor()

    def say(text: str) -> None:
        print(scrub.text(text), file=out)

    say("")
    say(f"status   {result.status} ({result.reason})")
    if result.success is not None:
        say(f"check    {'passed' if result.success else 'FAILED'}: {result.success_detail}")
    say(f"steps    {result.steps}")
    say(
        f"time     agent {result.elapsed_s:.2f} s (model calls, tools, framework: what the what-if re-times)"
    )
    if wall_s is not None:
        say(f"         wall  {wall_s:.2f} s (with the workspace's set-up and the success check)")
    if result.trace_path:
        for line in analysis_lines(load_trace(result.trace_path), tiers):
            say(line)
        say(f"trace    {result.trace_path}")
    if result.workspace:
        say(f"workspace {result.workspace}")
    out.flush()


def analysis_lines(trace: Any, tiers: dict[str, Tier] | None = None) -> list[str]:
    """Time by category on the critical path, and what the fastest faster tier would buy."""
    from agentloop.analysis import build_graph, build_report
    from agentloop.analysis.whatif import category_order, faster_tier_line

    graph = build_graph(trace)
    report = build_report(graph)
    total = report.measured_ns or 1
    lines = ["by category (critical path):"]
    for cat in category_order(set(report.critical)):
        ns = report.critical[cat]
        if ns >= 500_000:  # under half a millisecond rounds to nothing here; `report` lists all
            lines.append(f"  {cat:<22} {ns / 1e9:8.2f} s  {100 * ns / total:5.1f}%")
    lines.append(f"  model share of the critical path: {100 * report.model_share:.1f}%")
    lines.append(faster_tier_line(graph, tiers))
    return lines
