"""The trace's run header (line 1) as read: :class:`RunHeader`, checked and typed once at load.

Everything a report, an export, a cost tally or a suite needs (task, tier with profile and
prices, tools, limits, sandbox, whether the spans' edges were inferred by an import) is checked
and typed here, so none of them reads the raw dict. ``raw`` keeps the record as written (fields
added later ride along there). What a writer writes is :mod:`agentloop.trace.header`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from agentloop.model.prices import Prices
from agentloop.model.speed import SpeedProfile
from agentloop.trace.fields import Where, json_kind, num, obj, opt_str, str_
from agentloop.trace.header import READABLE_SCHEMAS

# The recorded tier's speed profile (the trace header's ``tier.profile``): the speed model's own
# record type, with the optional fields a trace carries only when set.
Profile = SpeedProfile
# its optional fields, each with whether it must be > 0 (a rate) or may be 0 (a slope)
_OPTIONAL_PROFILE = {
    "cached_prefill_tps": True,
    "tpot_ms_per_1k": False,
    "prefill_ms_per_1k": False,
}


@dataclass(frozen=True, slots=True)
class TaskInfo:
    name: str
    prompt: str = ""
    system: str = ""
    source: str | None = None


@dataclass(frozen=True, slots=True)
class TierInfo:
    name: str
    model: str = ""
    base_url: str = ""
    api: str = ""
    profile: Profile | None = None  # None: an old or foreign trace without one
    prices: Prices | None = None  # None: the tier had no prices (or an old trace)
    api_key_env: str | None = None

    @property
    def simulated(self) -> bool:
        return self.base_url == "sim"


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LimitsInfo:
    """The recorded limits; a field the trace does not record is None."""

    max_steps: int | None = None
    max_output_tokens: int | None = None
    timeout_s: float | None = None
    max_parallel_tools: int | None = None
    tool_timeout_s: float | None = None
    max_cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """Where the run's commands ran (the jail's ``confinement``): its kind, and what was and
    was not confined, in words."""

    kind: str
    jail: bool
    confined: str = ""
    not_confined: str = ""


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """A sub-agent of the run (header ``agents``)."""

    name: str
    description: str = ""
    tier: str = ""
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunHeader:
    """Line 1, typed. ``raw`` keeps every field as written (fields added later ride along)."""

    type: ClassVar[Literal["run"]] = "run"
    schema: int
    run_id: str
    task: TaskInfo
    tier: TierInfo
    tools: tuple[ToolInfo, ...]
    workspace: str | None
    wall: str
    raw: dict[str, Any]
    agentloop: str = ""  # the writer's version ("" in a foreign trace)
    limits: LimitsInfo = LimitsInfo()
    sandbox: SandboxInfo | None = None  # None: no jail, or an older trace
    inferred: dict[str, Any] = field(default_factory=dict)  # what an import inferred ({}: none)
    # issue 23; an older trace has none: its one tier is ``tier``, its one agent the main one
    tiers: tuple[TierInfo, ...] = ()  # every tier the run may route to, main's first
    agents: tuple[AgentInfo, ...] = ()
    routing: dict[str, Any] | None = None  # the plan as JSON

    @property
    def all_tiers(self) -> tuple[TierInfo, ...]:
        """Every tier of the run: ``tiers``, or for an older trace its one ``tier``."""
        return self.tiers or (self.tier,)


def _profile(w: Where, prof: object, at: str = "tier") -> Profile | None:
    if prof is None:
        return None
    if type(prof) is not dict:
        w.fail(f"{at}.profile", f"must be an object, not {json_kind(prof)}")
    return Profile(
        num(w, prof, "base_latency_s", f"{at}.profile.base_latency_s"),
        num(w, prof, "prefill_tps", f"{at}.profile.prefill_tps"),
        num(w, prof, "output_tps", f"{at}.profile.output_tps", positive=True),
        **{
            k: num(w, prof, k, f"{at}.profile.{k}", positive=positive)
            for k, positive in _OPTIONAL_PROFILE.items()
            if prof.get(k) is not None
        },
    )


def _prices(w: Where, p: object, at: str = "tier") -> Prices | None:
    if not p:
        return None
    if type(p) is not dict:
        w.fail(f"{at}.prices", f"must be an object or null, not {json_kind(p)}")
    placeholder = p.get("placeholder", False)
    if type(placeholder) is not bool:
        w.fail(f"{at}.prices.placeholder", f"must be true or false, not {json_kind(placeholder)}")
    return Prices(
        num(w, p, "input", f"{at}.prices.input"),
        num(w, p, "cached_input", f"{at}.prices.cached_input"),
        num(w, p, "output", f"{at}.prices.output"),
        placeholder,
    )


_LIMIT_KINDS: dict[str, type] = {
    "max_steps": int,
    "max_output_tokens": int,
    "timeout_s": float,
    "max_parallel_tools": int,
    "tool_timeout_s": float,
    "max_cost_usd": float,
}


def _limits(w: Where, rec: Mapping[str, Any]) -> LimitsInfo:
    lim = obj(w, rec, "limits", "limits")
    got: dict[str, Any] = {}
    for k, kind in _LIMIT_KINDS.items():
        v = lim.get(k)
        if v is None:
            continue
        if kind is int and type(v) is not int:
            w.fail(f"limits.{k}", f"must be an integer, not {json_kind(v)}")
        got[k] = v if kind is int else num(w, lim, k, f"limits.{k}")
    return LimitsInfo(**got)


def _sandbox(w: Where, rec: Mapping[str, Any]) -> SandboxInfo | None:
    if rec.get("sandbox") is None:
        return None
    sb = obj(w, rec, "sandbox", "sandbox")
    jail = sb.get("jail", False)
    if type(jail) is not bool:
        w.fail("sandbox.jail", f"must be true or false, not {json_kind(jail)}")
    return SandboxInfo(
        str_(w, sb, "kind", "sandbox.kind", None),
        jail,
        str_(w, sb, "confined", "sandbox.confined"),
        str_(w, sb, "not_confined", "sandbox.not_confined"),
    )


def _objects(w: Where, rec: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The header's array ``key`` (absent: empty), each entry an object, with its place."""
    items = rec.get(key) or []
    if type(items) is not list:
        w.fail(key, f"must be an array, not {json_kind(items)}")
    out: list[tuple[str, Mapping[str, Any]]] = []
    for k, item in enumerate(items):
        if type(item) is not dict:
            w.fail(f"{key}[{k}]", f"must be an object, not {json_kind(item)}")
        out.append((f"{key}[{k}]", item))
    return out


def _tools(w: Where, rec: Mapping[str, Any]) -> tuple[ToolInfo, ...]:
    return tuple(
        ToolInfo(
            str_(w, t, "name", f"{at}.name", None),
            str_(w, t, "description", f"{at}.description"),
            obj(w, t, "parameters", f"{at}.parameters"),
        )
        for at, t in _objects(w, rec, "tools")
    )


def _tier(w: Where, tier: Mapping[str, Any], at: str) -> TierInfo:
    return TierInfo(
        str_(w, tier, "name", f"{at}.name", "?"),
        str_(w, tier, "model", f"{at}.model"),
        str_(w, tier, "base_url", f"{at}.base_url"),
        str_(w, tier, "api", f"{at}.api"),
        _profile(w, tier.get("profile"), at),
        _prices(w, tier.get("prices"), at),
        opt_str(w, tier, "api_key_env", f"{at}.api_key_env"),
    )


def _tiers(w: Where, rec: Mapping[str, Any]) -> tuple[TierInfo, ...]:
    return tuple(_tier(w, t, at) for at, t in _objects(w, rec, "tiers"))


def _agents(w: Where, rec: Mapping[str, Any]) -> tuple[AgentInfo, ...]:
    out = []
    for at, a in _objects(w, rec, "agents"):
        tools = a.get("tools") or []
        if type(tools) is not list or any(type(t) is not str for t in tools):
            w.fail(f"{at}.tools", "must be an array of tool names")
        out.append(
            AgentInfo(
                str_(w, a, "name", f"{at}.name", None),
                str_(w, a, "description", f"{at}.description"),
                str_(w, a, "tier", f"{at}.tier"),
                tuple(tools),
            )
        )
    return tuple(out)


def parse_header(rec: object, path: object) -> RunHeader:
    """Check and type line 1 of a trace."""
    w = Where(path, 1)
    if type(rec) is not dict or rec.get("type") != "run":
        w.fail("type", "missing the run header (field 'type' must be \"run\")")
    schema = rec.get("schema")
    if type(schema) is not int or schema not in READABLE_SCHEMAS:  # a list is not hashable
        w.fail(
            "schema",
            f"is {schema!r}; this agentloop reads schema "
            f"{', '.join(map(str, sorted(READABLE_SCHEMAS)))}",
        )
    task = obj(w, rec, "task", "task")
    tier = obj(w, rec, "tier", "tier")
    clock = obj(w, rec, "clock", "clock")
    return RunHeader(
        schema,
        str_(w, rec, "run_id", "run_id"),
        TaskInfo(
            str_(w, task, "name", "task.name", "?"),
            str_(w, task, "prompt", "task.prompt"),
            str_(w, task, "system", "task.system"),
            opt_str(w, task, "source", "task.source"),
        ),
        _tier(w, tier, "tier"),
        _tools(w, rec),
        opt_str(w, rec, "workspace", "workspace"),
        str_(w, clock, "wall", "clock.wall"),
        rec,
        str_(w, rec, "agentloop", "agentloop"),
        _limits(w, rec),
        _sandbox(w, rec),
        obj(w, rec, "inferred", "inferred"),
        _tiers(w, rec),
        _agents(w, rec),
        obj(w, rec, "routing", "routing") if rec.get("routing") is not None else None,
    )
