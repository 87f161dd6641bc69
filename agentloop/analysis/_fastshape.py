"""The record shapes the fast cold builder (fastcols.py) accepts, as msgspec Structs.

These (for :mod:`agentloop.analysis.fastcols`) are a screen, not a schema: each Struct is the shape the writer writes
(:mod:`agentloop.trace.schema`, the runner's model and tool end attributes), typed so that
msgspec decodes a trace's span records in C with no Python dict per record. Every field here is
at least as strict as the checked reader's fast paths (:func:`agentloop.trace.reader.
parse_lines`, :mod:`agentloop.trace.span_attrs`): a key they need is required here, an instant
is an integer in ``0 .. MAX_INSTANT_NS``, a count an integer in ``0 .. MAX_COUNT`` (int64, as
the reader bounds it), a step within ``MAX_COUNT`` either side, a boolean a boolean. What a
Struct rejects is not an error of its own: the builder hands the whole file to the checked
reader, which says what is wrong in its words, or accepts an unusual shape these leave out.

One end-attributes Struct serves every span kind (the records are tagged by ``type``, not by
kind), so a key means one thing for all: ``output`` is a model's object or a tool's text, the
rest of a kind's checks are the builder's, per kind, on the decoded columns.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from agentloop.trace import attrs as A
from agentloop.trace.fields import MAX_COUNT, MAX_INSTANT_NS


class NotClean(Exception):
    """The trace is not one the screen recognises: the checked path decides what it is."""


# the span kinds and statuses the writer writes, as literals: msgspec hands back one shared
# string per value, not one per record
KINDS = ("run", "agent", "step", "model", "tool", "setup", "check")
STATUSES = ("ok", "error", "cancelled", "in_flight")  # the last: a span still open at the end
Kind = Literal["run", "agent", "step", "model", "tool", "setup", "check"]
Status = Literal["ok", "error", "cancelled"]
Instant = Annotated[int, Meta(ge=0, le=MAX_INSTANT_NS)]
# where a step's number goes in a label's form: the step and call labels are made once per
# agent and invocation with this mark, then filled in per span (an agent name holding it is
# labelled span by span)
MARK = "\x00"
Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
Int = Annotated[int, Meta(ge=-MAX_COUNT, le=MAX_COUNT)]


class StartAttrs(
    Struct, gc=False, rename={"agent": A.GEN_AI_AGENT_NAME, "inv": A.AGENT_INVOCATION}
):
    """What the columns read of a span's start attributes (a step's label: step, agent)."""

    step: Int | None = None
    agent: str | None = None
    inv: Int | None = None


class SpanStart(Struct, tag="span_start", tag_field="type", gc=False):
    """A span_start record."""

    id: Annotated[str, Meta(min_length=1)]
    parent: str | None
    after: list[str]
    kind: Kind
    name: str
    t: Instant
    attrs: StartAttrs | None = None


class Timing(Struct, gc=False):
    t_send: Instant
    t_hdr: Instant | None
    t_first: Instant | None
    t_first_visible: Instant | None
    t_last: Instant | None
    t_end: Instant | None
    chunks: Count
    build_ns: Count


class Attempt(Struct, gc=False):
    t_start: Instant
    t_end: Instant
    error: str | None
    status: Count | None
    wait_ns: Count


class ToolCall(Struct, gc=False):
    id: str
    name: str
    arguments: str


class Output(Struct, gc=False):
    text: str
    reasoning_tokens: Count
    tool_calls: list[ToolCall]


class EndAttrs(
    Struct,
    gc=False,
    rename={
        "inp": A.GEN_AI_USAGE_INPUT_TOKENS,
        "out": A.GEN_AI_USAGE_OUTPUT_TOKENS,
        "rea": A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        "cac": A.GEN_AI_USAGE_CACHED_INPUT_TOKENS,
        "bound": A.TIMING_ERROR_S,
        "late": A.TIMING_UNDER_LOAD,
        "tool": A.GEN_AI_TOOL_NAME,
        "call_id": A.GEN_AI_TOOL_CALL_ID,
        "trimmed": A.CONTEXT_TRIMMED,
    },
):
    """A span's end attributes: a model's (UNSET: the key is missing) and a tool's."""

    step: Int | UnsetType | None = UNSET
    tier: str | None = None
    inp: Count | UnsetType = UNSET
    out: Count | UnsetType = UNSET
    rea: Count | UnsetType = UNSET
    cac: Count | UnsetType = UNSET
    timing: Timing | UnsetType | None = UNSET
    attempts: list[Attempt] | UnsetType = UNSET
    wait_ns: Count | UnsetType = UNSET
    output: Output | str | UnsetType = UNSET
    bound: float | None = None
    late: bool = False
    unknown: Any = UNSET  # an imported call's unsplit phases: the checked path notes those
    tool: str | UnsetType = UNSET
    ok: bool = False
    arguments: str = ""
    call_id: str = ""
    data: dict[str, Any] | None = None
    queued_ns: Count = 0
    trimmed: Any = UNSET  # an older trace's trims: the checked path reads those


class SpanEnd(Struct, tag="span_end", tag_field="type", gc=False):
    """A span_end record."""

    id: str
    t: Instant
    status: Status
    attrs: EndAttrs | None


class RunEnd(Struct, tag="end", tag_field="type", gc=False):
    """The end record: only found here; the checked :func:`~agentloop.trace.schema.
    parse_record` types it from its line."""


Record = SpanStart | SpanEnd | RunEnd


@functools.cache
def decoder() -> msgspec.json.Decoder[Record]:
    """The typed decoder of a span record line (made once, on first use)."""
    return msgspec.json.Decoder(Record)
