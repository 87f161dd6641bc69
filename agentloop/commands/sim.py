"""``agentloop sim serve``: run the paced OpenAI-compatible simulator on a port until stopped.

Ctrl-C (SIGINT, exit 130) and SIGTERM (exit 143) both stop it cleanly, saying what it served. An
inherited ignored SIGINT (a job started in the background by a shell) is left ignored, as the
shell meant: SIGTERM is the stop signal for programs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

from agentloop.commands.run import cancellable_on_sigterm
from agentloop.errors import ConfigError
from agentloop.script import ScriptTurn


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sim",
        help="run the paced OpenAI-compatible simulator",
        description=(
            "The simulator agentloop embeds for offline runs, as a standalone server: point any "
            "OpenAI client at the printed base URL (any API key)."
        ),
    )
    actions = p.add_subparsers(dest="sim_action", required=True, metavar="ACTION")
    s = actions.add_parser(
        "serve",
        help="serve until Ctrl-C or SIGTERM",
        description=(
            "Serve POST /v1/responses and /v1/chat/completions paced at a tier's speed profile, "
            "answering with a task's script, a recorded trace's turns, or filler text."
        ),
    )
    _where(s)
    _what(s)
    _how(s)
    s.set_defaults(func=main)


def _where(s: Any) -> None:
    """Where it listens and which tier paces it."""
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free)")
    s.add_argument(
        "--tier",
        default="sim-standard",
        help="tier whose speed profile paces the answers (default sim-standard)",
    )
    s.add_argument("--tiers", dest="tiers_file", type=Path, help="tiers file")


def _what(s: Any) -> None:
    """What it answers with: a task's script, a trace's turns, or filler."""
    src = s.add_mutually_exclusive_group()
    src.add_argument(
        "--script",
        type=Path,
        metavar="TASK_FILE",
        help="answer with the scripted turns of this task file",
    )
    src.add_argument(
        "--trace",
        type=Path,
        metavar="TRACE_FILE",
        help="answer with the model turns recorded in this trace",
    )
    src.add_argument(
        "--filler", type=int, metavar="N", help="answer every request with N tokens of filler text"
    )


def _how(s: Any) -> None:
    """How it writes: speed override, chunking, jitter, a real server's dialect, strictness."""
    s.add_argument("--output-tps", type=float, help="override the profile's output tokens/s")
    s.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens per SSE chunk")
    s.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        help="scale each token interval by 1 ± this fraction (seeded)",
    )
    s.add_argument("--seed", type=int, default=0, help="seed for jitter and filler text")
    s.add_argument(
        "--dialect",
        default="",
        metavar="NAME[,FLAG...]",
        help=(
            "speak Chat Completions as a real server does: llama.cpp, vllm, deepseek, bare, or "
            "flags (reasoning_content, usage_without_reasoning, no_usage, no_done, "
            "whole_tool_args, timings)"
        ),
    )
    s.add_argument(
        "--require-reasoning",
        action="store_true",
        help=("refuse (400) a Responses request that does not pass back earlier reasoning items"),
    )


def _script(args: argparse.Namespace) -> list[ScriptTurn] | None:
    if args.script is not None:
        from agentloop.config.tasks import load_task

        task = load_task(args.script)
        if not task.script:
            raise ConfigError(f"{args.script}: the task file has no 'script' to serve")
        return list(task.script)
    if args.trace is not None:
        from agentloop.sim import script_from_trace
        from agentloop.trace.reader import load_trace

        turns = script_from_trace(load_trace(args.trace))
        if not turns:
            raise ConfigError(f"{args.trace}: the trace records no finished model turn")
        return turns
    return None


async def main(args: argparse.Namespace) -> int:
    from agentloop.config.tiers import get_tier, load_tiers, require_profile
    from agentloop.sim import SimServer

    tier = get_tier(load_tiers(args.tiers_file), args.tier, "--tier")
    profile = require_profile(tier, "to pace the simulator")
    if args.output_tps is not None:
        if args.output_tps <= 0:
            raise ConfigError("--output-tps must be > 0")
        profile = dataclasses.replace(profile, output_tps=args.output_tps)
    script = _script(args)
    if args.filler is not None and args.filler < 0:
        raise ConfigError("--filler must be >= 0")
    sim = SimServer(
        profile=profile,
        script=script,
        filler_tokens=args.filler,
        tokens_per_chunk=args.tokens_per_chunk,
        jitter=args.jitter,
        seed=args.seed,
        host=args.host,
        port=args.port,
        models=[tier.model],
        dialect=args.dialect,
        require_reasoning=args.require_reasoning,
    )
    async with sim:
        what = (
            f"{len(script)} scripted turn{'' if len(script) == 1 else 's'}"
            if script is not None
            else f"{args.filler if args.filler is not None else 'default'} filler tokens"
        )
        print(
            f"agentloop sim: serving {sim.base_url} (tier {tier.name}: base "
            f"{profile.base_latency_s:g} s, prefill {profile.prefill_tps:g} tok/s, output "
            f"{profile.output_tps:g} tok/s; {what}); Ctrl-C to stop",
            flush=True,
        )
        stopped = "agentloop sim: stopped after {} requests"
        try:
            await cancellable_on_sigterm(sim.serve_forever())
        except asyncio.CancelledError:  # Ctrl-C: the CLI says "interrupted", exits 130
            print(stopped.format(sim.requests), file=sys.stderr, flush=True)
            raise
        print(stopped.format(sim.requests), file=sys.stderr, flush=True)  # SIGTERM
    return 143
