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
  the nearest kept ancestor (kinds and attributes: :mod:`agentloop.export._otlp_spans`);
- agents: a run of several (openai-agents' agents as tools and handoffs) keeps its nesting
  (:mod:`agentloop.export._otlp_agents`): an agent called as a tool is an ``agent`` span under
  that tool span, one deeper; an agent handed off to is an ``agent`` span after the last step
  of the one it took over from, at its depth (``agent.handoff_from``); their spans carry the
  agent's name, invocation and depth, as a sub-agent's do in agentloop's own traces;
- each model call opens a step of its agent, holding it and the tool calls that start before
  the agent's next model call (agentloop's own shape);
- dependency edges are inferred: a span waits for the latest span of its agent that ended
  before it started; a step waits for the previous step, a handoff's agent for the agent
  before it. The header says so under
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA

from agentloop._version import __version__
from agentloop.errors import TraceFileError
from agentloop.export._otlp_agents import Scope, agent_tree
from agentloop.export._otlp_json import OtelSpan, read_otlp_json
from agentloop.export._otlp_spans import UNKNOWN_MODEL, count, kind, model_attrs, tool_attrs
from agentloop.trace import attrs as A
from agentloop.trace.fields import MAX_INSTANT_NS
from agentloop.trace.header import TierRecord
from agentloop.trace.schema import end_record, end_span_record, header_record, start_record

INFERRED = (
    "edges: a span waits for the latest sibling (same parent) that ended before it "
    "started; a step waits for the previous step; steps: one per model call, with the "
    "tool calls that start before the next"
)


class _Builder:
    """Writes the agentloop records of one imported run, in start order."""

    def __init__(self, t_origin: int) -> None:
        self.t_origin = t_origin
        self.records: list[tuple[int, int, dict[str, Any]]] = []  # (t, order, record)
        self.n = 0
        self.ids = itertools.count(2)  # s1 is the run

    def rel(self, t: int) -> int:
        return max(0, t - self.t_origin)

    def span(
        self,
        parent: str | None,
        kind: str,
        name: str,
        t: tuple[int, int],
        after: list[str],
        attrs: tuple[dict[str, Any], dict[str, Any]],
        status: str,
        sid: str | None = None,
    ) -> str:
        """Records of one span (``t``: its start and end, ``attrs``: its start and end
        attributes); its id."""
        sid = sid or f"s{next(self.ids)}"
        self.n += 1
        t0, t1 = self.rel(t[0]), self.rel(t[1])
        self.records.append(
            (t0, 2 * self.n, start_record(sid, parent, kind, name, t0, after, attrs[0]))
        )
        self.records.append((t1, 2 * self.n + 1, end_span_record(sid, t1, status, attrs[1])))
        return sid


def _pick_trace(spans: list[OtelSpan]) -> tuple[list[OtelSpan], list[str]]:
    by_trace: dict[str, list[OtelSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    ranked = sorted(
        by_trace.values(),
        key=lambda ss: (not any(kind(s) == "run" for s in ss), min(s.t0 for s in ss)),
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
    run = _run_span(spans)
    level = agent_tree(run)
    scopes = [s for sc in level for s in sc.all()]
    _check_instants(run, scopes, path)
    models = [s for sc in scopes for s, k in sc.items if k == "model"]
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
    main = level[0]
    tier = tier or _unknown_tier(model_name)
    header = _header(run, main.agent, len(spans), notes, tier, path, scopes)
    b = _Builder(run.t0)
    status = "error" if run.error else "ok"
    attrs: tuple[dict[str, Any], dict[str, Any]] = ({}, {GA.GEN_AI_AGENT_NAME: main.agent})
    b.span(None, "run", f"invoke_agent {main.agent}", (run.t0, run.t1), [], attrs, status, "s1")
    profile = tier["profile"]
    tps = profile["output_tps"] if profile is not None else None
    _Placer(b, model_name, float(tps) if tps else None).level(level, "s1", run.t0)
    out_tokens = sum(count(m.attrs.get(A.GEN_AI_USAGE_OUTPUT_TOKENS)) or 0 for m in models)
    end = end_record(
        status,
        b.rel(run.t1),
        reason=f"imported from {Path(path).name}",
        steps=sum(k == "model" for _, k in main.items),
        totals={"output_tokens": out_tokens, "elapsed_s": (run.t1 - run.t0) / 1e9},
        success=None,
    )
    body = [r for _, _, r in sorted(b.records, key=lambda x: (x[0], x[1]))]
    return [header, *body, end]


def _run_span(spans: list[OtelSpan]) -> OtelSpan:
    """The run: the earliest agent span, else the earliest root; each span's children linked."""
    by_id = {s.span_id: s for s in spans}
    for s in spans:
        if s.parent in by_id:
            by_id[s.parent].children.append(s)
    roots = [s for s in spans if s.parent not in by_id]
    return next(
        (s for s in sorted(spans, key=lambda s: s.t0) if kind(s) == "run"),
        min(roots, key=lambda s: s.t0),
    )


def _check_instants(run: OtelSpan, scopes: list[Scope], path: str | Path) -> None:
    """Every kept span within what a trace can hold of the run's start (before the run's start
    is clamped to it)."""
    kept = [run, *(sc.span for sc in scopes), *(s for sc in scopes for s, _ in sc.items)]
    for s in kept:
        if s.t1 - run.t0 > MAX_INSTANT_NS:
            raise TraceFileError(
                f"{path}: span {s.span_id} ('{s.name}') lies outside its agent "
                f"run ({run.name}) by more than a trace can hold; "
                f"startTimeUnixNano / endTimeUnixNano look damaged"
            )


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
    run: OtelSpan,
    agent: str,
    n_spans: int,
    notes: list[str],
    tier: TierRecord,
    path: str | Path,
    scopes: list[Scope],
) -> dict[str, Any]:
    """The imported trace's run header: where it came from, what was inferred, what is not
    known; the agents besides the main one, if any."""
    agents: dict[str, dict[str, Any]] = {}
    for sc in scopes[1:]:
        how = (
            f"took over from {sc.handoff_from} (a handoff)"
            if sc.handoff_from
            else "an agent called as a tool"
        )
        rec = agents.setdefault(
            sc.agent, {"name": sc.agent, "description": how, "tier": tier["name"], "tools": []}
        )
        for s, k in sc.items:
            name = str(tool_attrs(s, 0)[A.GEN_AI_TOOL_NAME]) if k == "tool" else None
            if name is not None and name not in rec["tools"]:
                rec["tools"].append(name)
    more: dict[str, Any] = {"tiers": [tier], "agents": list(agents.values())} if agents else {}
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
        **more,
    )


class _Placer:
    """Places each agent's steps (a step span per model call, holding it and its tools) under
    its container; each span waits for the latest one of its agent that ended before it
    started, each step for the previous step, a handoff's agent for the agent before it."""

    def __init__(self, b: _Builder, model_name: str, tps: float | None) -> None:
        self.b, self.model_name, self.tps = b, model_name, tps

    def level(self, level: list[Scope], container: str, t_min: int) -> None:
        """One level's agents in ``container`` (started at ``t_min``), one after another."""
        prev: list[str] = []
        for sc in level:
            if sc.main:
                prev = self.steps(sc, container, {})
                continue
            who = {
                A.GEN_AI_AGENT_NAME: sc.agent,
                A.AGENT_INVOCATION: sc.invocation,
                A.AGENT_DEPTH: sc.depth,
            }
            end = {A.AGENT_HANDOFF_FROM: sc.handoff_from} if sc.handoff_from else {}
            t = (max(t_min, sc.span.t0), max(t_min, sc.span.t1))
            status = "error" if sc.span.error else "ok"
            aid = self.b.span(
                container,
                "agent",
                f"invoke_agent {sc.agent}",
                t,
                prev,
                (who, {**who, **end}),
                status,
            )
            self.steps(sc, aid, who)
            prev = [aid]

    def steps(self, sc: Scope, container: str, who: dict[str, Any]) -> list[str]:
        """``sc``'s steps under ``container``; the last step's id (none: [])."""
        groups: list[tuple[OtelSpan, list[OtelSpan]]] = []
        for s, k in sc.items:
            if k == "model":
                groups.append((s, []))
            elif groups:
                groups[-1][1].append(s)
        prev: list[str] = []
        done: list[tuple[int, str]] = []  # (end, agentloop id) of this agent's spans so far
        for n, (m, tools) in enumerate(groups, start=1):
            t = (m.t0, max([m.t1, *(x.t1 for x in tools)]))
            st = self.b.span(
                container, "step", f"step {n}", t, prev, ({A.STEP: n, **who}, {A.STEP: n}), "ok"
            )
            prev = [st]
            for s in (m, *tools):
                before = [(e, x) for e, x in done if e <= s.t0]
                sid = self.call(s, s is m, n, st, [max(before)[1]] if before else [], who)
                done.append((s.t1, sid))
                if s.span_id in sc.subs:  # an agent called as this tool
                    self.level(sc.subs[s.span_id], sid, s.t0)
        return prev

    def call(
        self, s: OtelSpan, is_model: bool, n: int, step: str, after: list[str], who: dict[str, Any]
    ) -> str:
        """One model or tool span of step ``n``."""
        attrs = model_attrs(s, n, self.b.rel, self.tps) if is_model else tool_attrs(s, n)
        if s.error:
            attrs[A.ERROR] = s.status_message or "error"
        kind_ = "model" if is_model else "tool"
        name = (
            s.name
            if s.name.startswith(("chat", "execute_tool"))
            else (
                f"chat {self.model_name}"
                if is_model
                else f"execute_tool {attrs[A.GEN_AI_TOOL_NAME]}"
            )
        )
        status = "error" if s.error else "ok"
        return self.b.span(
            step, kind_, name, (s.t0, s.t1), after, ({A.STEP: n, **who}, attrs), status
        )


def write_trace(records: list[dict[str, Any]], out: str | Path) -> Path:
    """Write records as an agentloop JSONL trace file."""
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return p
