"""Another framework's OpenTelemetry GenAI spans (OTLP JSON) as an agentloop trace.

The file is an ``ExportTraceServiceRequest`` in OTLP/JSON (one object, or one per line as a
collector's file exporter writes them), parsed by protobuf's own JSON mapping into the OTLP
message, so a malformed file is refused with the field at fault. Then, for one trace id:

- the run is the ``invoke_agent`` span (``gen_ai.operation.name`` or the name), else the root;
- model calls are ``chat`` spans (operation ``chat`` / ``text_completion`` /
  ``generate_content``, or a name starting with ``chat ``): tokens from ``gen_ai.usage.*``,
  models from ``gen_ai.request.model`` / ``gen_ai.response.model``, and the first chunk from
  ``gen_ai.response.time_to_first_chunk`` when the framework recorded it;
- OpenInference's spans (openai-agents, through ``openinference-instrumentation-openai-agents``)
  by their ``openinference.span.kind``: the first ``AGENT`` is the run, ``LLM`` a model call
  (tokens from ``llm.token_count.*``, the model from ``llm.model_name``), ``TOOL`` a tool call
  (``tool.name``, ``input.value``, ``output.value``);
- tool calls are ``execute_tool`` spans; every other span is dropped and its children hang from
  the nearest kept ancestor;
- each model call opens a step, holding it and the tool calls that start before the next model
  call (agentloop's own shape);
- dependency edges are inferred: a span waits for the latest sibling (same kept parent) that
  ended before it started; a step waits for the previous step. The header says so under
  ``inferred``.

A call's phases (queueing/prefill, hidden reasoning, visible decode) are estimated from what is
there and marked so (``phases_estimated`` on the span names the source): the producer's
``time_to_first_chunk`` (visible decode from the first chunk to the end), else the ``--tier``
profile's ``output_tps`` and the call's visible output tokens (decode ``(V - 1) / output_tps``
before the end); the analysis splits hidden reasoning from the rest as for its own calls. A call
with neither stays unsplit (``timing.t_first_visible`` under ``unknown``): the analysis books it
all as base, and ``report`` and ``whatif`` name it with the fix (:data:`agentloop.analysis.report.UNSPLIT_FIX`). What the
spans do not say, reasoning tokens when not reported, stays unknown (``unknown`` in the header
and on each model span).
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA

from agentloop._version import __version__
from agentloop.analysis.report import UNSPLIT
from agentloop.errors import TraceFileError
from agentloop.export._otlp_json import OtelSpan, read_otlp_json
from agentloop.trace import attrs as A
from agentloop.trace.fields import MAX_INSTANT_NS
from agentloop.trace.header import TierRecord
from agentloop.trace.schema import end_record, end_span_record, header_record, start_record

MODEL_OPS = frozenset({"chat", "text_completion", "generate_content"})
# OpenInference's conventions (openai-agents through openinference-instrumentation-openai-agents):
# the span's kind in one attribute, tokens and names under names of their own
OI_KIND = "openinference.span.kind"
_OI_KINDS = {"AGENT": "run", "LLM": "model", "TOOL": "tool"}
# other spellings of the same counts (pydantic-ai's ``gen_ai.usage.details.*``, semconv's
# ``cache_read``, OpenInference's ``llm.*``): the first one present is taken
_ALIASES = (
    (A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, "gen_ai.usage.details.reasoning_tokens"),
    (A.GEN_AI_USAGE_CACHED_INPUT_TOKENS, "gen_ai.usage.cache_read.input_tokens"),
    (A.GEN_AI_USAGE_INPUT_TOKENS, "llm.token_count.prompt"),
    (A.GEN_AI_USAGE_OUTPUT_TOKENS, "llm.token_count.completion"),
    (A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, "llm.token_count.completion_details.reasoning"),
    (A.GEN_AI_USAGE_CACHED_INPUT_TOKENS, "llm.token_count.prompt_details.cache_read"),
    (A.GEN_AI_REQUEST_MODEL, "llm.model_name"),
)
UNKNOWN_MODEL = ("timing.t_first_visible", "timing.t_last", "reasoning split")
INFERRED = (
    "edges: a span waits for the latest sibling (same parent) that ended before it "
    "started; a step waits for the previous step; steps: one per model call, with the "
    "tool calls that start before the next"
)


def _kind(s: OtelSpan) -> str | None:
    oi = s.attrs.get(OI_KIND)
    if isinstance(oi, str) and oi in _OI_KINDS:
        return _OI_KINDS[oi]
    op = s.operation
    if op == "invoke_agent" or s.name.startswith("invoke_agent") or s.name == "agent run":
        return "run"
    if op in MODEL_OPS or s.name.startswith("chat "):
        return "model"
    if op == "execute_tool" or s.name.startswith("execute_tool "):
        return "tool"
    return None


def _int(v: Any) -> int | None:
    """A token count as the schema holds it: a whole number >= 0 (spans are hostile input)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return int(v) if v >= 0 and v == int(v) else None


class _Builder:
    """Writes the agentloop records of one imported run, in start order."""

    def __init__(self, t_origin: int) -> None:
        self.t_origin = t_origin
        self.records: list[tuple[int, int, dict[str, Any]]] = []  # (t, order, record)
        self.n = 0

    def rel(self, t: int) -> int:
        return max(0, t - self.t_origin)

    def span(
        self,
        sid: str,
        parent: str | None,
        kind: str,
        name: str,
        t0: int,
        t1: int,
        after: list[str],
        start_attrs: dict[str, Any],
        end_attrs: dict[str, Any],
        status: str,
    ) -> None:
        self.n += 1
        self.records.append(
            (
                self.rel(t0),
                2 * self.n,
                start_record(sid, parent, kind, name, self.rel(t0), after, start_attrs),
            )
        )
        self.records.append(
            (self.rel(t1), 2 * self.n + 1, end_span_record(sid, self.rel(t1), status, end_attrs))
        )


def _model_attrs(s: OtelSpan, step: int, rel: Any, tps: float | None) -> dict[str, Any]:
    a = s.attrs
    out: dict[str, Any] = {A.STEP: step, "unknown": list(UNKNOWN_MODEL)}
    for k in (
        A.GEN_AI_REQUEST_MODEL,
        A.GEN_AI_RESPONSE_MODEL,
        A.GEN_AI_USAGE_INPUT_TOKENS,
        A.GEN_AI_USAGE_OUTPUT_TOKENS,
        A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        A.GEN_AI_USAGE_CACHED_INPUT_TOKENS,
        A.GEN_AI_RESPONSE_FINISH_REASONS,
        GA.GEN_AI_PROVIDER_NAME,
        GA.GEN_AI_SYSTEM,
    ):
        if a.get(k) is not None:
            out[k] = a[k]
    for ours, theirs in _ALIASES:
        if ours not in out and a.get(theirs) is not None:
            out[ours] = a[theirs]
    for k in (
        A.GEN_AI_USAGE_INPUT_TOKENS,
        A.GEN_AI_USAGE_OUTPUT_TOKENS,
        A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        A.GEN_AI_USAGE_CACHED_INPUT_TOKENS,
    ):
        n = _int(out.pop(k, None))
        if n is None:  # missing or not a count: said unknown, never guessed
            out["unknown"].append(k)
        else:
            out[k] = n
    timing: dict[str, Any] = {A.T_SEND: rel(s.t0), A.T_END: rel(s.t1)}
    ttfc = a.get(A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
    if (
        isinstance(ttfc, int | float)
        and not isinstance(ttfc, bool)
        and math.isfinite(ttfc)
        and ttfc >= 0
    ):
        out[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = ttfc
        timing[A.T_FIRST] = rel(min(s.t1, s.t0 + round(ttfc * 1e9)))
        first_visible: int | None = timing[A.T_FIRST]
        source = "gen_ai.response.time_to_first_chunk (decode from the first chunk to the end)"
    else:
        out["unknown"].append(A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
        first_visible, source = None, ""
        n_out = out.get(A.GEN_AI_USAGE_OUTPUT_TOKENS)
        if tps is not None and n_out is not None:
            visible = max(0, n_out - out.get(A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, 0))
            decode = round(max(0, visible - 1) * 1e9 / tps)
            first_visible = rel(max(s.t0, s.t1 - decode))
            source = f"the tier profile's output_tps {tps:g} and {visible} visible output tokens"
    if first_visible is not None:  # estimated: the last token at the span's end
        timing[A.T_FIRST_VISIBLE], timing[A.T_LAST] = first_visible, rel(s.t1)
        out["phases_estimated"] = source
        out["unknown"] = [k for k in out["unknown"] if k not in (UNSPLIT, "timing.t_last")]
    out[A.TIMING] = timing
    out[A.CALL_S] = (s.t1 - s.t0) / 1e9
    return out


def _tool_attrs(s: OtelSpan, step: int) -> dict[str, Any]:
    a = s.attrs
    name = (
        a.get(A.GEN_AI_TOOL_NAME)
        or a.get("tool.name")
        or s.name.removeprefix("execute_tool ").strip()
        or "?"
    )
    out: dict[str, Any] = {A.STEP: step, A.GEN_AI_TOOL_NAME: str(name), A.OK: not s.error}
    if a.get(A.GEN_AI_TOOL_CALL_ID) is not None:
        out[A.GEN_AI_TOOL_CALL_ID] = str(a[A.GEN_AI_TOOL_CALL_ID])
    args = a.get(GA.GEN_AI_TOOL_CALL_ARGUMENTS, a.get("tool_arguments", a.get("input.value")))
    if args is not None:
        out[A.ARGUMENTS] = args if isinstance(args, str) else orjson.dumps(args).decode()
    res = a.get(GA.GEN_AI_TOOL_CALL_RESULT, a.get("tool_response", a.get("output.value")))
    if res is not None:
        out[A.OUTPUT] = res if isinstance(res, str) else orjson.dumps(res).decode()
    return out


def _pick_trace(spans: list[OtelSpan]) -> tuple[list[OtelSpan], list[str]]:
    by_trace: dict[str, list[OtelSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    ranked = sorted(
        by_trace.values(),
        key=lambda ss: (not any(_kind(s) == "run" for s in ss), min(s.t0 for s in ss)),
    )
    notes = (
        [
            f"the file holds {len(ranked)} traces; imported the first agent run "
            f"(trace {ranked[0][0].trace_id})"
        ]
        if len(ranked) > 1
        else []
    )
    return ranked[0], notes


def import_otlp(path: str | Path, tier: TierRecord | None = None) -> list[dict[str, Any]]:
    """The agentloop trace records (header, spans, end) of the first agent run in an OTLP/JSON
    file. ``tier``: the tier the spans ran on, if the caller knows it (its summary, with the
    speed profile); else the tier is named after the model and its profile is unknown."""
    spans, notes = _pick_trace(read_otlp_json(path))
    run, kept = _agent_run(spans, path)
    models = [s for s, k in kept if k == "model"]
    model_name = next(
        (
            str(
                s.attrs.get(A.GEN_AI_RESPONSE_MODEL)
                or s.attrs.get(A.GEN_AI_REQUEST_MODEL)
                or s.attrs.get("llm.model_name")
            )
            for s in models
        ),
        "?",
    )
    agent = str(
        run.attrs.get(GA.GEN_AI_AGENT_NAME)
        or run.name.removeprefix("invoke_agent").strip()
        or "agent"
    )
    header = _header(run, agent, len(spans), notes, tier or _unknown_tier(model_name), path)
    b = _Builder(run.t0)
    b.span(
        "s1",
        None,
        "run",
        f"invoke_agent {agent}",
        run.t0,
        run.t1,
        [],
        {},
        {GA.GEN_AI_AGENT_NAME: agent},
        "error" if run.error else "ok",
    )
    # steps: each model call opens one, holding the tools that start before the next call
    steps: list[tuple[OtelSpan, list[OtelSpan]]] = []
    for s, k in kept:
        if k == "model":
            steps.append((s, []))
        elif steps:
            steps[-1][1].append(s)
    profile = tier["profile"] if tier is not None else None
    tps = profile["output_tps"] if profile is not None else None
    _place_steps(b, steps, model_name, float(tps) if tps else None)
    out_tokens = sum(_int(m.attrs.get(A.GEN_AI_USAGE_OUTPUT_TOKENS)) or 0 for m, _ in steps)
    end = end_record(
        "error" if run.error else "ok",
        b.rel(run.t1),
        reason=f"imported from {Path(path).name}",
        steps=len(steps),
        totals={"output_tokens": out_tokens, "elapsed_s": (run.t1 - run.t0) / 1e9},
        success=None,
    )
    body = [r for _, _, r in sorted(b.records, key=lambda x: (x[0], x[1]))]
    return [header, *body, end]


def _agent_run(
    spans: list[OtelSpan], path: str | Path
) -> tuple[OtelSpan, list[tuple[OtelSpan, str]]]:
    """The run span, and the model and tool spans under it (with their kind) in start order;
    every other span is dropped, its children hanging from the nearest kept ancestor."""
    by_id = {s.span_id: s for s in spans}
    for s in spans:
        if s.parent in by_id:
            by_id[s.parent].children.append(s)
    roots = [s for s in spans if s.parent not in by_id]
    run = next(
        (s for s in sorted(spans, key=lambda s: s.t0) if _kind(s) == "run"),
        min(roots, key=lambda s: s.t0),
    )
    kept: list[tuple[OtelSpan, str]] = []

    def walk(s: OtelSpan) -> None:
        for c in sorted(s.children, key=lambda c: c.t0):
            k = _kind(c)
            if k in ("model", "tool"):
                kept.append((c, k))
            if k != "tool":
                walk(c)

    walk(run)
    kept.sort(key=lambda x: x[0].t0)
    for s in [run, *(k for k, _ in kept)]:  # before the run's start is clamped to it
        if s.t1 - run.t0 > MAX_INSTANT_NS:
            raise TraceFileError(
                f"{path}: span {s.span_id} ('{s.name}') lies outside its agent "
                f"run ({run.name}) by more than a trace can hold; "
                f"startTimeUnixNano / endTimeUnixNano look damaged"
            )
    return run, kept


def _unknown_tier(model_name: str) -> TierRecord:
    """The tier of spans that do not say which: named after the model, profile unknown."""
    return {
        "name": model_name,
        "base_url": "",
        "model": model_name,
        "api": "",
        "api_key_env": None,
        "options": {},
        "profile": None,
    }


def _header(
    run: OtelSpan, agent: str, n_spans: int, notes: list[str], tier: TierRecord, path: str | Path
) -> dict[str, Any]:
    """The imported trace's run header: where it came from, what was inferred, what is not known."""
    return header_record(
        clock={"wall": datetime.fromtimestamp(run.t0 / 1e9, UTC).isoformat(), "unit": "ns"},
        run_id=f"otlp-{run.trace_id[:12]}",
        agentloop=__version__,
        task={"name": agent, "prompt": "", "system": "", "source": str(path)},
        tier=tier,
        tools=[],
        limits={},
        imported={
            "format": "otlp-json",
            "trace_id": run.trace_id,
            "service": run.resource.get("service.name"),
            "spans": n_spans,
            "notes": notes,
        },
        inferred={"edges": INFERRED},
        unknown=["per model call: " + ", ".join(UNKNOWN_MODEL) + " (no first-token instant)"],
    )


def _place_steps(
    b: _Builder,
    steps: list[tuple[OtelSpan, list[OtelSpan]]],
    model_name: str,
    tps: float | None,
) -> None:
    """A step span per model call, holding it and its tools; each span waits for the latest one
    that ended before it started, each step for the previous step."""
    next_id = itertools.count(2)
    prev_step: list[str] = []
    done: list[tuple[int, str]] = []  # (end, agentloop id) of model/tool spans placed so far
    for n, (m, tools) in enumerate(steps, start=1):
        sid = f"s{next(next_id)}"
        t_end = max([m.t1, *(t.t1 for t in tools)])
        b.span(
            sid, "s1", "step", f"step {n}", m.t0, t_end, prev_step, {A.STEP: n}, {A.STEP: n}, "ok"
        )
        prev_step = [sid]
        for s in (m, *tools):
            aid = f"s{next(next_id)}"
            before = [(e, x) for e, x in done if e <= s.t0]
            after = [max(before)[1]] if before else []
            kind = "model" if s is m else "tool"
            attrs = _model_attrs(s, n, b.rel, tps) if s is m else _tool_attrs(s, n)
            if s.error:
                attrs[A.ERROR] = s.status_message or "error"
            name = (
                s.name
                if s.name.startswith(("chat", "execute_tool"))
                else (
                    f"chat {model_name}"
                    if kind == "model"
                    else f"execute_tool {attrs[A.GEN_AI_TOOL_NAME]}"
                )
            )
            b.span(
                aid,
                sid,
                kind,
                name,
                s.t0,
                s.t1,
                after,
                {A.STEP: n},
                attrs,
                "error" if s.error else "ok",
            )
            done.append((s.t1, aid))


def write_trace(records: list[dict[str, Any]], out: str | Path) -> Path:
    """Write records as an agentloop JSONL trace file."""
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return p
