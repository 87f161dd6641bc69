"""Routing values: per-call over per-agent over default, stacking, plans round-trip, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentloop.config.routing import CallKey, Routing, load_plan, parse_routes
from agentloop.errors import ConfigError


def test_tier_for_prefers_the_call_then_the_agent_then_the_default() -> None:
    r = Routing(agents={"main": "fast", "logs": "slow"}, calls={CallKey("logs", 2, 3): "fast"})
    assert r.tier_for("logs", 2, 3, "dflt") == "fast"
    assert r.tier_for("logs", 2, 2, "dflt") == "slow"
    assert r.tier_for("logs", 1, 3, "dflt") == "slow"
    assert r.tier_for("main", 1, 1, "dflt") == "fast"
    assert r.tier_for("other", 1, 1, "dflt") == "dflt"
    assert not Routing() and r


def test_over_lets_the_other_routing_win() -> None:
    task = Routing(agents={"main": "a", "logs": "a"}, calls={CallKey("logs", 1, 1): "a"})
    plan = Routing(agents={"logs": "b"}, calls={CallKey("logs", 1, 1): "b"}, task="t", trace="r")
    both = task.over(plan)
    assert dict(both.agents) == {"main": "a", "logs": "b"}
    assert both.calls[CallKey("logs", 1, 1)] == "b"
    assert (both.task, both.trace) == ("t", "r")
    assert task.over(Routing()).agents == task.agents


def test_routing_is_frozen_against_the_caller_s_dict() -> None:
    agents = {"main": "a"}
    r = Routing(agents=agents)
    agents["main"] = "b"
    assert r.tier_for("main", 1, 1, "x") == "a"
    with pytest.raises(TypeError):
        r.agents["main"] = "c"  # type: ignore[index]


def test_plan_round_trips_through_a_file(tmp_path: Path) -> None:
    r = Routing(
        agents={"main": "fast"},
        calls={CallKey("logs", 1, 2): "slow", CallKey("db", 3, 1): "fast"},
        task="fleet-triage",
        trace="run-1",
    )
    plan = r.as_plan()
    assert plan["agentloop_plan"] == 1
    assert plan["calls"][0] == {"agent": "db", "invocation": 3, "step": 1, "tier": "fast"}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    back = load_plan(path)
    assert back == r
    assert dict(back.calls) == dict(r.calls)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("{not json", "line 1: not JSON"),
        ("[1]", "JSON object"),
        ('{"agentloop_plan": 2}', "field 'agentloop_plan'"),
        ('{"agentloop_plan": 1, "colour": 1}', "field 'colour': unknown field"),
        ('{"agentloop_plan": 1, "agents": {"main": 3}}', "field 'agents.main'"),
        ('{"agentloop_plan": 1, "calls": [{"agent": "a", "tier": "t"}]}', "calls[0].invocation"),
        (
            '{"agentloop_plan": 1, "calls": [{"agent": "a", "invocation": 0, "step": 1,'
            ' "tier": "t"}]}',
            "calls[0].invocation",
        ),
        (
            '{"agentloop_plan": 1, "calls": [{"agent": "a", "invocation": 1, "step": 1}]}',
            "calls[0].tier",
        ),
        ('{"agentloop_plan": 1, "task": 5}', "field 'task'"),
    ],
)
def test_bad_plans_name_the_file_and_the_field(tmp_path: Path, body: str, needle: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_plan(path)
    assert str(path) in info.value.message
    assert needle in info.value.message
    assert info.value.exit_code == 2


def test_a_missing_plan_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_plan(tmp_path / "nope.json")


def test_parse_routes_reads_agent_equals_tier_and_names_a_bad_value() -> None:
    r = parse_routes(["main=fast", "logs = slow", "main=slower"])
    assert dict(r.agents) == {"main": "slower", "logs": "slow"}
    for bad in ("main", "=fast", "main="):
        with pytest.raises(ConfigError, match=f"--route '{bad}'"):
            parse_routes([bad])


def test_check_names_an_unknown_agent_or_tier() -> None:
    r = Routing(agents={"main": "fast", "logs": "slow"})
    r.check({"logs"}, {"fast", "slow"}, "t.yaml")  # main is always known
    with pytest.raises(ConfigError, match=r"t.yaml: field 'agents.logs': unknown agent 'logs'"):
        r.check(set(), {"fast", "slow"}, "t.yaml")
    with pytest.raises(ConfigError, match=r"field 'agents.logs': unknown tier 'slow'"):
        r.check({"logs"}, {"fast"}, "t.yaml")
    calls = Routing(calls={CallKey("ghost", 1, 1): "fast"})
    with pytest.raises(ConfigError, match=r"plan.json: field 'calls\[0\]': unknown agent 'ghost'"):
        calls.check({"logs"}, {"fast"}, "plan.json")
