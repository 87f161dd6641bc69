"""The analysis a client can ask the service for: the JSON of ``report``, ``whatif`` and ``route --json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentloop.analysis.graph import build_graph
from agentloop.analysis.mix import options
from agentloop.analysis.report import report_document, unsplit_json
from agentloop.analysis.route_plan import candidate_tiers, plan_document
from agentloop.analysis.whatif import Scenario, whatif, whatif_json, with_lateness
from agentloop.config.tiers import get_tier, load_tiers, require_profile
from agentloop.errors import ConfigError, RequestError
from agentloop.trace.reader import load_trace


def report_for(path: Path) -> dict[str, Any]:
    """``agentloop report TRACE --json`` of the trace at ``path``."""
    return report_document(load_trace(path))


def whatif_for(path: Path, tier: str, tiers_file: Path | None = None) -> dict[str, Any]:
    """``agentloop whatif TRACE --tier NAME --json`` of the trace at ``path``."""
    try:
        the_tier = get_tier(load_tiers(tiers_file), tier, tiers_file or "tiers.toml")
        scenario = Scenario.tier(the_tier.name, require_profile(the_tier))
    except ConfigError as exc:
        raise RequestError(exc.message, field="tier") from None
    trace = load_trace(path)  # the CLI's answer: the re-timing and the calls' lateness
    w = with_lateness(whatif(build_graph(trace), scenario), trace)
    return {**whatif_json(w), **unsplit_json(trace)}


def route_for(
    path: Path,
    tiers: str,
    within_pct: float | None = None,
    budget_usd: float | None = None,
    tiers_file: Path | None = None,
) -> dict[str, Any]:
    """``agentloop route TRACE --tiers A,B --within PCT --json`` (or ``--budget-usd X``)."""
    if (within_pct is None) == (budget_usd is None):
        raise RequestError("give one of within_pct or budget_usd", field="within_pct")
    for name, v in (("within_pct", within_pct), ("budget_usd", budget_usd)):
        if v is not None and not 0 <= v < float("inf"):
            raise RequestError(f"{name} {v}: must be a number >= 0", field=name)
    try:
        candidates = candidate_tiers(tiers, tiers_file)
    except ConfigError as exc:
        raise RequestError(exc.message, field="tiers") from None
    o = options(build_graph(load_trace(path)), candidates)
    if not o.calls:
        raise RequestError(f"{path}: no finished model calls to route", field="trace")
    return plan_document(o, within_pct, budget_usd)
