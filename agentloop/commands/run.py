"""``agentloop run TASK``: run a task file, showing each step, and summarise where time went."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TextIO, TypeVar

from agentloop import api
from agentloop.log import configure
from agentloop.trace.redact import redactor

T = TypeVar("T")


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run a task file", description=(
        "Run a task file end to end. The default tier is the embedded simulator: no API key, "
        "no network. Progress goes to stdout, logs to stderr, the trace to --trace-dir."))
    p.add_argument("task", type=Path, help="task file (YAML)")
    p.add_argument("--tier", help="model tier (default: the task's, else sim-standard)")
    p.add_argument("--tiers", dest="tiers_file", type=Path, help="tiers file (default tiers.toml)")
    p.add_argument("--max-steps", type=int, help="override the task's step limit")
    p.add_argument("--timeout", type=float, help="override the task's wall-time limit, seconds")
    p.add_argument("--trace-dir", type=Path, default=Path("traces"),
                   help="where the trace file goes (default: ./traces)")
    p.add_argument("--keep-workspace", action="store_true",
                   help="keep the run's working copy and print its path")
    p.add_argument("--otlp", metavar="URL", help="also stream each span as it ends to this "
                   "OTLP/HTTP collector (e.g. http://127.0.0.1:4318); never slows or fails the run")
    p.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logs on stderr")
    p.set_defaults(func=main)


class Progress:
    """Prints one line per model call and per tool, as the run goes."""

    def __init__(self, out: TextIO, quiet: bool = False) -> None:
        self.out, self.quiet = out, quiet
        self.redact = redactor()  # the trace's redactor: a secret a tool printed stays hidden

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if self.quiet:
            return
        if event == "model_end":
            u = data["usage"]
            what = f"{len(data['tool_calls'])} tool call(s)" if data["tool_calls"] else "answer"
            retry = f", {data['attempts'] - 1} retr{'y' if data['attempts'] == 2 else 'ies'}" \
                if data["attempts"] > 1 else ""
            self.line(f"step {data['step']:>2}  model {data['seconds']:7.2f} s  "
                      f"{u.output_tokens:>5} tok ({u.reasoning_tokens} reasoning){retry}  -> {what}")
        elif event == "tool_end":
            mark = "ok" if data["ok"] else "FAILED"
            first = (data["output"].strip().splitlines() or [""])[0][:70]
            self.line(f"          {data['name']:<21} {data['seconds']:7.3f} s  {mark}  {first}")

    def line(self, text: str) -> None:
        print(self.redact.text(text), file=self.out, flush=True)


async def main(args: argparse.Namespace) -> int:
    configure(args.verbose)
    out = sys.stdout
    task = api.open_task(args.task)
    tier = api.resolve_tier(task, args.tier, args.tiers_file)
    where = "embedded simulator" if tier.simulated else tier.base_url
    print(f"agentloop run {task.name}  tier {tier.name} ({tier.model} via {where}, "
          f"{tier.profile.output_tps:g} tok/s)", file=out, flush=True)
    result = await cancellable_on_sigterm(api.run_task(
        task, tier=tier, trace_dir=args.trace_dir, max_steps=args.max_steps,
        timeout_s=args.timeout, observer=Progress(out, args.quiet),
        keep_workspace=args.keep_workspace, otlp=args.otlp))
    if result is None:
        print("agentloop: terminated; the trace was closed with status cancelled",
              file=sys.stderr)
        return 143
    print_summary(result, out)
    if result.status != "ok":
        return 1
    return 0 if result.success is not False else 1


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


def print_summary(result: api.RunResult, out: TextIO) -> None:
    from agentloop.trace.reader import load_trace

    print("", file=out)
    print(f"status   {result.status} ({result.reason})", file=out)
    if result.success is not None:
        print(f"check    {'passed' if result.success else 'FAILED'}: {result.success_detail}",
              file=out)
    print(f"steps    {result.steps}", file=out)
    print(f"time     {result.elapsed_s:.2f} s end to end", file=out)
    if result.trace_path:
        for line in analysis_lines(load_trace(result.trace_path)):
            print(line, file=out)
        print(f"trace    {result.trace_path}", file=out)
    if result.workspace:
        print(f"workspace {result.workspace}", file=out)


# the per-token speedup the mission quotes: 68 -> 750 output tokens/s
WHATIF_K = 11.0


def analysis_lines(trace: Any) -> list[str]:
    """Time by category on the critical path, and what faster output would buy this run."""
    from agentloop.analysis import build_graph, build_report, whatif
    from agentloop.analysis.whatif import Scenario, category_order

    graph = build_graph(trace)
    report = build_report(graph)
    total = report.measured_ns or 1
    lines = ["by category (critical path):"]
    for cat in category_order(set(report.critical)):
        ns = report.critical[cat]
        if ns >= 500_000:  # under half a millisecond rounds to nothing here; `report` lists all
            lines.append(f"  {cat:<22} {ns / 1e9:8.2f} s  {100 * ns / total:5.1f}%")
    lines.append(f"  model share of the critical path: {100 * report.model_share:.1f}%")
    w = whatif(graph, Scenario.multipliers(WHATIF_K), curve=())
    lines.append(f"what-if  output {WHATIF_K:g}x faster: {w.predicted_ns / 1e9:.2f} s "
                 f"({w.speedup:.2f}x); ceiling at infinite output speed "
                 f"{w.ceiling_ns / 1e9:.2f} s ({w.ceiling:.2f}x)")
    return lines
