"""Span attribute names, as constants: the one spelling of every key a trace's spans carry.

OpenTelemetry GenAI names where they exist (``gen_ai.*``, as in the semantic-conventions
modules), agentloop's own names otherwise. Writers (the runner) and readers (the schema,
analysis, exports) import these rather than spelling the strings. docs/design.md lists what each
holds.
"""

from __future__ import annotations

from typing import Final

# -- both span kinds ------------------------------------------------------------------------
STEP: Final = "step"  # step number (start attrs of step, model and tool spans; model end attrs)
ERROR: Final = "error"  # set by the tracer when a span ends by an exception

# -- model spans (end attrs) ---------------------------------------------------------------
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"  # includes reasoning
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_USAGE_CACHED_INPUT_TOKENS: Final = "gen_ai.usage.cached_input_tokens"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"  # s
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
SERVICE_TIER: Final = "service_tier"
TIER: Final = "tier"
TIMING: Final = "timing"  # run-clock ns of the successful attempt: see TIMING_KEYS
ATTEMPTS: Final = "attempts"  # [{t_start, t_end, error, status, wait_ns}], run-clock ns
WAIT_NS: Final = "wait_ns"  # back-off slept between attempts, total
OUTPUT: Final = (
    "output"  # model: {text, tool_calls, reasoning_tokens}; tool: the text the model saw
)
COST_USD: Final = "cost_usd"  # the call's cost at the tier's prices (agentloop.model.prices)
# only when they apply
USAGE_ESTIMATED: Final = "usage_estimated"  # true: agentloop counted tokens the server did not
SERVER_TIMINGS: Final = "server_timings"  # the server's own timing object (llama.cpp), as sent
# the client's own lateness while the call ran (agentloop.clients._lag); absent: not measured
# (a scripted or replayed call, or a trace written before issue 28)
TIMING_ERROR_S: Final = "timing_error_s"  # bound on every duration of the call, either way
LOOP_LAG_MAX_S: Final = "loop_lag_max_s"  # the largest event-loop lag seen while it ran
TIMING_UNDER_LOAD: Final = "timing_under_load"  # true: the bound passed LATE_FRACTION of it
CONTEXT_ESTIMATED_TOKENS: Final = "context.estimated_tokens"  # the request's estimate, trimmed
CONTEXT_TRIMMED: Final = "context.trimmed"  # [{TRIM_KEYS}]: tool outputs dropped before the call

# keys inside a model span's OUTPUT object
OUTPUT_TEXT: Final = "text"
OUTPUT_TOOL_CALLS: Final = "tool_calls"  # [{id, name, arguments}], arguments as JSON text
OUTPUT_REASONING_TOKENS: Final = "reasoning_tokens"
OUTPUT_REASONING: Final = "reasoning"  # Responses items: [{id, summary: [text], encrypted}]
OUTPUT_REASONING_TEXT: Final = "reasoning_text"  # Chat reasoning_content, as streamed
TOOL_CALL_KEYS: Final = ("id", "name", "arguments")
REASONING_KEYS: Final = ("id", "summary", "encrypted")  # encrypted: bool, the content never
# derived seconds (agentloop.model.timing.CallMetrics field names)
TTFB_S: Final = "ttfb_s"
TTFT_S: Final = "ttft_s"
TTFT_VISIBLE_S: Final = "ttft_visible_s"
DECODE_S: Final = "decode_s"
TPOT_S: Final = "tpot_s"
OUTPUT_TPS: Final = "output_tps"
CALL_S: Final = "call_s"
TOKENS_PER_CHUNK: Final = "tokens_per_chunk"

# keys inside TIMING (run-clock ns; chunks a count, build_ns the request's build time)
T_SEND: Final = "t_send"
T_HDR: Final = "t_hdr"
T_FIRST: Final = "t_first"
T_FIRST_VISIBLE: Final = "t_first_visible"
T_LAST: Final = "t_last"
T_END: Final = "t_end"
CHUNKS: Final = "chunks"
BUILD_NS: Final = "build_ns"
TIMING_KEYS: Final = (T_SEND, T_HDR, T_FIRST, T_FIRST_VISIBLE, T_LAST, T_END, CHUNKS, BUILD_NS)
# keys of each ATTEMPTS entry (run-clock ns; error null on success; status the HTTP status)
ATTEMPT_START: Final = "t_start"
ATTEMPT_END: Final = "t_end"
ATTEMPT_ERROR: Final = "error"
ATTEMPT_STATUS: Final = "status"
ATTEMPT_KEYS: Final = (ATTEMPT_START, ATTEMPT_END, ATTEMPT_ERROR, ATTEMPT_STATUS, WAIT_NS)
TRIM_KEYS: Final = ("index", "call_id", "tool", "tokens")  # message index, its call, tokens dropped

# -- agents (issue 23: sub-agents as tools) ---------------------------------------------------
# An ``agent`` span (name ``invoke_agent NAME``) is the child of the tool span that invoked it;
# every step, model and tool span of a sub-run carries these start attrs. A span without them
# belongs to the main agent (invocation 1, depth 0): traces written before sub-agents read so.
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
AGENT_INVOCATION: Final = "agent.invocation"  # 1-based: the k-th invocation of that agent
AGENT_DEPTH: Final = "agent.depth"  # 0 the main agent, 1 its sub-agents, ...
MAIN_AGENT: Final = "main"  # the top agent's name in routing and plans
# an imported handoff (openai-agents): the agent that took over, an ``agent`` span beside its
# predecessor's (same depth, not under a tool), names the agent it took over from
AGENT_HANDOFF_FROM: Final = "agent.handoff_from"

# -- span events (``span_event`` records: a named instant inside a span) ------------------------
EVENT_CONTEXT_TRIM: Final = "context.trim"  # one tool output dropped: attrs are TRIM_KEYS

# -- tool spans (end attrs) ----------------------------------------------------------------
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
ARGUMENTS: Final = "arguments"  # JSON text, as the model wrote it
OK: Final = "ok"
DATA: Final = "data"  # tool-specific structured fields (exit_code, passed, failed ...)
MCP_SERVER: Final = "mcp.server"  # the task's name of the MCP server whose tool ran (start too)
MCP_TOOLS: Final = "mcp.tools"  # a setup part's: the tools its MCP server listed
QUEUED_NS: Final = "queued_ns"  # waited for the max_parallel_tools bound before the span opened
