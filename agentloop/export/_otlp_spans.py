"""What one foreign span is for an import (run, agent, model call, tool call) and its attributes.

The kinds: OpenInference's spans (openai-agents, through ``openinference-instrumentation-openai-
agents``) by their ``openinference.span.kind`` (``AGENT`` an agent, ``LLM`` a model call,
``TOOL`` a tool call); OpenTelemetry GenAI spans by ``gen_ai.operation.name`` or their name
(``invoke_agent``, ``chat`` / ``text_completion`` / ``generate_content``, ``execute_tool``).
A model call's attributes (tokens, models, the first chunk, the estimated phases) and a tool
call's (name, arguments, result) are agentloop's own names; :mod:`agentloop.export.otlp_import`
says how the phases are estimated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA

from agentloop.analysis.report import UNSPLIT
from agentloop.export._otlp_json import OtelSpan
from agentloop.trace import attrs as A

MODEL_OPS = frozenset({"chat", "text_completion", "generate_content"})
# OpenInference's conventions: the span's kind in one attribute, tokens and names of their own
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
_COUNTS = (
    A.GEN_AI_USAGE_INPUT_TOKENS,
    A.GEN_AI_USAGE_OUTPUT_TOKENS,
    A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    A.GEN_AI_USAGE_CACHED_INPUT_TOKENS,
)


def kind(s: OtelSpan) -> str | None:
    """``run`` (an agent), ``model``, ``tool``, or None (a span the import drops)."""
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


def agent_name(s: OtelSpan) -> str:
    """An agent span's agent: ``gen_ai.agent.name``, OpenInference's ``agent.name``, its name."""
    name = (
        s.attrs.get(GA.GEN_AI_AGENT_NAME)
        or s.attrs.get("agent.name")
        or s.name.removeprefix("invoke_agent").strip()
    )
    return str(name) if name else "agent"


def count(v: Any) -> int | None:
    """A token count as the schema holds it: a whole number >= 0 (spans are hostile input)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return int(v) if v >= 0 and v == int(v) else None


def model_attrs(
    s: OtelSpan, step: int, rel: Callable[[int], int], tps: float | None
) -> dict[str, Any]:
    """A model call's end attributes: tokens, models, timing, and what is estimated or unknown."""
    a = s.attrs
    out: dict[str, Any] = {A.STEP: step, "unknown": list(UNKNOWN_MODEL)}
    for k in (
        *_COUNTS,
        A.GEN_AI_REQUEST_MODEL,
        A.GEN_AI_RESPONSE_MODEL,
        A.GEN_AI_RESPONSE_FINISH_REASONS,
        GA.GEN_AI_PROVIDER_NAME,
        GA.GEN_AI_SYSTEM,
    ):
        if a.get(k) is not None:
            out[k] = a[k]
    for ours, theirs in _ALIASES:
        if ours not in out and a.get(theirs) is not None:
            out[ours] = a[theirs]
    for k in _COUNTS:
        n = count(out.pop(k, None))
        if n is None:  # missing or not a count: said unknown, never guessed
            out["unknown"].append(k)
        else:
            out[k] = n
    out[A.TIMING] = _timing(s, out, rel, tps)
    out[A.CALL_S] = (s.t1 - s.t0) / 1e9
    return out


def _timing(
    s: OtelSpan, out: dict[str, Any], rel: Callable[[int], int], tps: float | None
) -> dict[str, Any]:
    """The call's instants, its phases estimated where the span allows (``out`` says how)."""
    timing: dict[str, Any] = {A.T_SEND: rel(s.t0), A.T_END: rel(s.t1)}
    ttfc = s.attrs.get(A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
    first_visible: int | None = None
    if (
        isinstance(ttfc, int | float)
        and not isinstance(ttfc, bool)
        and math.isfinite(ttfc)
        and ttfc >= 0
    ):
        out[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = ttfc
        timing[A.T_FIRST] = rel(min(s.t1, s.t0 + round(ttfc * 1e9)))
        first_visible = timing[A.T_FIRST]
        source = "gen_ai.response.time_to_first_chunk (decode from the first chunk to the end)"
    else:
        out["unknown"].append(A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
        source = ""
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
    return timing


def tool_attrs(s: OtelSpan, step: int) -> dict[str, Any]:
    """A tool call's end attributes: its name, id, arguments and result as given."""
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
