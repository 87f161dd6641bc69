"""Builds traces in the real record format from explicit instants: for tests and benchmarks.

Records have exactly the shape :class:`agentloop.trace.tracer.Tracer` writes (and the model
span end attributes the runner writes), but every instant is given by the caller, so a test
knows the answer in advance. Runs shaped like the runner's, built from these, are
:mod:`agentloop.analysis.synthetic_runs`'.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace, parse_lines
from agentloop.trace.schema import end_record, end_span_record, header_record, start_record

S = 1_000_000_000  # ns per second


def tier_record(
    name: str,
    base_latency_s: float = 0.3,
    prefill_tps: float = 20000,
    output_tps: float = 60,
    prices: tuple[float, float, float] | None = None,
) -> dict[str, Any]:
    """A tier summary as a header records it (``Tier.summary()``), with a speed profile and,
    if given, prices (input, cached input, output; USD per million tokens)."""
    rec: dict[str, Any] = {
        "name": name,
        "base_url": "sim",
        "model": name,
        "api": "responses",
        "api_key_env": None,
        "options": {},
        "profile": {
            "base_latency_s": base_latency_s,
            "prefill_tps": prefill_tps,
            "output_tps": output_tps,
        },
    }
    if prices is not None:
        rec["prices"] = dict(zip(("input", "cached_input", "output"), prices, strict=True))
    return rec


def header(
    task: str = "demo",
    tier: str = "sim-standard",
    base_latency_s: float = 0.3,
    prefill_tps: float = 20000,
    output_tps: float = 60,
    tiers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A run header record for ``task`` recorded on ``tier`` with the given speed profile;
    ``tiers`` (tier records, :func:`tier_record`): the header's list of every tier the run may
    route to (issue 23), main's first; None: an older header without one."""
    rec = header_record(
        run_id="synthetic",
        agentloop="0",
        task={"name": task, "prompt": "", "system": "", "source": None},
        tier={
            "name": tier,
            "base_url": "sim",
            "model": tier,
            "api": "responses",
            "api_key_env": None,
            "options": {},
            "profile": {
                "base_latency_s": base_latency_s,
                "prefill_tps": prefill_tps,
                "output_tps": output_tps,
            },
        },
        tools=[],
        limits={},
        clock={"wall": "2026-01-01T00:00:00+00:00", "unit": "ns"},
    )
    if tiers is not None:
        rec["tier"], rec["tiers"] = tiers[0], tiers
    return rec


def model_attrs(
    t_send: int,
    base_ns: int,
    reasoning: int,
    visible: int,
    tps: float,
    *,
    input_tokens: int = 1000,
    tail_ns: int = 0,
    step: int = 1,
    attempts: list[dict[str, Any]] | None = None,
    tier: str = "synthetic",
) -> dict[str, Any]:
    """End attributes of a model span whose successful attempt sends at ``t_send``.

    The first visible token comes ``base_ns + reasoning / tps`` after ``t_send``, the last one
    ``(visible - 1) / tps`` later, the terminal event ``tail_ns`` after that.
    """
    t_fv = t_send + base_ns + round(reasoning * S / tps)
    t_last = t_fv + round(max(0, visible - 1) * S / tps)
    t_end = t_last + tail_ns
    att = attempts if attempts is not None else []
    att = [*att, dict(zip(A.ATTEMPT_KEYS, (t_send, t_end, None, 200, 0), strict=True))]
    timing = (t_send, t_send + base_ns // 2, t_send + base_ns, t_fv, t_last, t_end, visible, 0)
    return {
        A.STEP: step,
        A.TIER: tier,
        A.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: reasoning + visible,
        A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: reasoning,
        A.GEN_AI_USAGE_CACHED_INPUT_TOKENS: 0,
        A.TIMING: dict(zip(A.TIMING_KEYS, timing, strict=True)),
        A.ATTEMPTS: att,
        A.WAIT_NS: sum(a.get(A.WAIT_NS, 0) for a in att),
        A.OUTPUT: {
            A.OUTPUT_TEXT: "",
            A.OUTPUT_REASONING_TOKENS: reasoning,
            A.OUTPUT_TOOL_CALLS: [],
        },
    }


class TraceBuilder:
    """Collects records in the order the caller opens and closes spans."""

    def __init__(self, **header_fields: Any) -> None:
        self.records: list[dict[str, Any]] = [header(**header_fields)]
        self._ids = itertools.count(1)

    def start(
        self,
        kind: str,
        name: str,
        t: int,
        parent: str | None = None,
        after: list[str] | tuple[str, ...] = (),
        **attrs: Any,
    ) -> str:
        sid = f"s{next(self._ids)}"
        self.records.append(start_record(sid, parent, kind, name, t, after, attrs))
        return sid

    def end(self, sid: str, t: int, status: str = "ok", **attrs: Any) -> None:
        self.records.append(end_span_record(sid, t, status, attrs))

    def finish(self, t: int, status: str = "ok", steps: int = 0) -> None:
        self.records.append(
            end_record(status, t, reason="done", steps=steps, totals={}, success=None)
        )

    def lines(self) -> list[bytes]:
        return [orjson.dumps(r) for r in self.records]

    def trace(self) -> Trace:
        return parse_lines(self.lines(), "<built>")

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(line + b"\n" for line in self.lines()))
        return path


def agent_lines(
    steps: int, tools_per_step: int = 3, tps: float = 60.0, task: str = "synthetic"
) -> Iterator[bytes]:
    """JSONL lines of a long sequential agent run: each step a model call then parallel tools.

    Spans: 1 run + ``steps * (2 + tools_per_step)``. Durations vary deterministically.
    """
    yield orjson.dumps(header(task=task, output_tps=tps))
    ids = itertools.count(1)
    t = 1000
    run = f"s{next(ids)}"
    yield orjson.dumps(start_record(run, None, "run", f"invoke_agent {task}", t, (), {}))
    prev_step: list[str] = []
    prev_tools: list[str] = []
    for k in range(1, steps + 1):
        t, prev_step, prev_tools = yield from _agent_step(
            k, t, ids, run, prev_step, prev_tools, tools_per_step, tps
        )
    t += 10_000
    yield orjson.dumps(end_span_record(run, t, "ok", {}))
    yield orjson.dumps(
        end_record("ok", t + 5_000, reason="done", steps=steps, totals={}, success=None)
    )


def _agent_step(
    k: int,
    t: int,
    ids: Iterator[int],
    run: str,
    prev_step: list[str],
    prev_tools: list[str],
    tools_per_step: int,
    tps: float,
) -> Generator[bytes, None, tuple[int, list[str], list[str]]]:
    """Step ``k`` of :func:`agent_lines` from ``t``: the step's and its model call's lines, then
    its tools'. Returns the end instant, the step span, and the tools the next call waits for."""
    dumps = orjson.dumps
    t += 20_000
    st = f"s{next(ids)}"
    yield dumps(start_record(st, run, "step", f"step {k}", t, prev_step, {A.STEP: k}))
    t += 50_000
    m = f"s{next(ids)}"
    yield dumps(start_record(m, st, "model", "chat synthetic", t, prev_tools, {A.STEP: k}))
    r, v = (k * 37) % 200, 20 + (k * 13) % 100
    attrs = model_attrs(
        t + 2_000_000,
        300_000_000,
        r,
        v,
        tps,
        input_tokens=2000 + 10 * (k % 1000),
        tail_ns=1_000_000,
        step=k,
    )
    t = attrs[A.TIMING][A.T_END] + 500_000
    yield dumps(end_span_record(m, t, "ok", attrs))
    t, tools = yield from _tool_lines(k, t, ids, st, m, tools_per_step)
    yield dumps(end_span_record(st, t, "ok", {}))
    return t, [st], tools


def _tool_lines(
    k: int, t: int, ids: Iterator[int], st: str, m: str, tools_per_step: int
) -> Generator[bytes, None, tuple[int, list[str]]]:
    """Step ``k``'s parallel tool calls after model span ``m`` ends at ``t``: their lines, in
    start order then end order. Returns the step's end instant and the tool spans."""
    dumps = orjson.dumps
    tools = []
    ends = []
    for j in range(tools_per_step):
        tid = f"s{next(ids)}"
        tools.append(tid)
        t0 = t + 30_000 * (j + 1)
        yield dumps(start_record(tid, st, "tool", "execute_tool shell", t0, [m], {A.STEP: k}))
        ends.append((t0 + 5_000_000 * (1 + (k + j) % 7), tid))
    for te, tid in sorted(ends):
        yield dumps(
            end_span_record(
                tid,
                te,
                "ok",
                {
                    A.GEN_AI_TOOL_NAME: "shell",
                    A.OK: True,
                    A.OUTPUT: "",
                    A.DATA: {},
                    A.QUEUED_NS: 0,
                },
            )
        )
    return max(ends)[0] + 40_000, tools
