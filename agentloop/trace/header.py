"""The trace's run header (line 1) as written: the typed record its writers build.

Writers build line 1 with :func:`header_record`, whose fields are the TypedDicts below
(:class:`HeaderFields`: what a writer gives; the clock, type and schema are filled in), so a
writer that forgets a field or misnames one fails mypy, not a reader months later. The typed
view a reader gets is :mod:`agentloop.trace.run_header`.

The records on disk are what agentloop has always written: a field a writer does not give is
left out (``NotRequired``), not written as null.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, Unpack

from agentloop.model.prices import PricesRecord

SCHEMA_VERSION = 1
READABLE_SCHEMAS = frozenset({1})


# -- what a writer writes ------------------------------------------------------------------------


class ClockRecord(TypedDict):
    wall: str  # ISO wall-clock time of the run clock's 0, for display
    unit: Literal["ns"]


class TaskRecord(TypedDict):
    name: str
    prompt: str
    system: str
    source: str | None


class ProfileRecord(TypedDict):
    """A speed profile (:class:`~agentloop.model.speed.SpeedProfile`); optional fields only
    when set, so old readers see the three they know."""

    base_latency_s: float
    prefill_tps: float
    output_tps: float
    cached_prefill_tps: NotRequired[float]
    tpot_ms_per_1k: NotRequired[float]
    prefill_ms_per_1k: NotRequired[float]


class LocalRecord(TypedDict):
    model: str
    ctx_size: int
    threads: int | None


class TierRecord(TypedDict):
    """The recorded tier (``Tier.summary()``): no secrets, only the key variable's name."""

    name: str
    base_url: str
    model: str
    api: str
    api_key_env: str | None
    options: dict[str, Any]  # extra header values redacted
    stall_timeout_s: NotRequired[float]
    first_token_timeout_s: NotRequired[float]
    max_attempts: NotRequired[int]
    profile: NotRequired[ProfileRecord | None]  # None (or absent): not measured
    prices: NotRequired[PricesRecord | None]
    context_window: NotRequired[int]
    local: NotRequired[LocalRecord]


class ToolRecord(TypedDict):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema


class LimitsRecord(TypedDict, total=False):
    """The task's limits (``Limits.record()``); an imported trace has none (``{}``)."""

    max_steps: int
    max_output_tokens: int
    timeout_s: float
    max_parallel_tools: int
    tool_timeout_s: float
    max_cost_usd: float | None


class ImportedRecord(TypedDict):
    """Where an imported trace came from (``agentloop import``)."""

    format: str
    trace_id: str
    service: Any
    spans: int
    notes: list[str]


class AgentRecord(TypedDict):
    """A sub-agent as the header lists it: its name, description, default tier and tools."""

    name: str
    description: str
    tier: str
    tools: list[str]


class HeaderFields(TypedDict):
    """What a writer gives :func:`header_record` (or ``Tracer.header``)."""

    run_id: str
    agentloop: str  # the writer's version
    task: TaskRecord
    tier: TierRecord
    tools: list[ToolRecord]
    limits: LimitsRecord
    workspace: NotRequired[str | None]
    sandbox: NotRequired[dict[str, Any] | None]  # the jail's confinement; None: no jail
    imported: NotRequired[ImportedRecord]
    inferred: NotRequired[dict[str, Any]]  # what an import inferred (e.g. the edges)
    unknown: NotRequired[list[str]]  # what an import could not know
    # issue 23: every tier the run may route to (main's first), its sub-agents, its routing
    tiers: NotRequired[list[TierRecord]]
    agents: NotRequired[list[AgentRecord]]
    routing: NotRequired[dict[str, Any]]  # the plan as JSON (agentloop.config.routing.as_plan)
    # the run's MCP servers as set up: name, transport, command or url, setup_s, tools, error
    mcp_servers: NotRequired[list[dict[str, Any]]]


def header_record(clock: ClockRecord, **fields: Unpack[HeaderFields]) -> dict[str, Any]:
    """Line 1 as written (``type``, ``schema`` and ``clock`` first): typed going in, a plain
    record for the sinks coming out."""
    return {"type": "run", "schema": SCHEMA_VERSION, "clock": clock, **fields}
