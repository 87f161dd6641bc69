"""The router: plans within the limit, optimal against brute force on small graphs, bounded on big."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import pytest

from agentloop.analysis.graph import build_graph
from agentloop.analysis.mix import TierModel, choice_of, options, predict
from agentloop.analysis.route_plan import plan_document
from agentloop.analysis.router import _greedy, fastest, lower_bound, route
from agentloop.analysis.synthetic import tier_record
from agentloop.analysis.synthetic_runs import fanout_run
from agentloop.config.routing import Routing, load_plan
from agentloop.model.prices import Prices
from agentloop.model.speed import SpeedProfile

STD = TierModel("std", SpeedProfile(0.3, 20000, 60), Prices(1.25, 0.125, 10.0))
FAST = TierModel("fast", SpeedProfile(0.2, 50000, 600), Prices(2.5, 0.25, 20.0))
MID = TierModel("mid", SpeedProfile(0.25, 30000, 150), Prices(1.75, 0.175, 14.0))
TIERS = [tier_record("std", output_tps=60, prices=(1.25, 0.125, 10.0))]
SHAPES = [[2, 1], [3, 1, 1], [1, 2, 1], [4, 2], [2, 2, 1, 1]]


@functools.cache
def every_assignment(
    sizes: tuple[int, ...], tiers: tuple[TierModel, ...]
) -> list[tuple[int, float]]:
    """The end (ns) and cost of every assignment of the fan-out's calls to ``tiers``: worked
    out once per graph and tiers, for every limit tried on them."""
    o = options(build_graph(fanout_run(list(sizes), visible=40, tiers=TIERS).trace()), list(tiers))
    every = itertools.product(range(len(o.tiers)), repeat=len(o.calls))
    return [(o.end(ch), o.total_cost(ch)) for ch in every]


def brute(sizes: list[int], tiers: list[TierModel], limit: int) -> float:
    """The cheapest assignment within ``limit``, trying every one."""
    return min(cost for end, cost in every_assignment(tuple(sizes), tuple(tiers)) if end <= limit)


@pytest.mark.parametrize("sizes", SHAPES)
@pytest.mark.parametrize("pct", [0, 5, 10, 30, 100])
def test_the_router_is_optimal_on_small_graphs(sizes, pct):
    """On graphs of at most 10 calls and 2 or 3 tiers the plan costs what brute force finds,
    within the limit; the greedy search meets the limit, and the lower bound is below both."""
    g = build_graph(fanout_run(sizes, visible=40, tiers=TIERS).trace())
    for tiers in ([STD, FAST], [STD, MID, FAST]):
        o = options(g, tiers)
        if len(tiers) ** len(o.calls) > 20000:
            continue
        limit = o.end(fastest(o)) * (100 + pct) // 100
        best = brute(sizes, tiers, limit)
        sol = route(o, limit)
        assert sol is not None
        assert sol.predicted_ns <= limit
        assert sol.cost_usd == pytest.approx(best, abs=1e-12)
        greedy = _greedy(o, fastest(o), limit)
        assert o.end(greedy) <= limit
        assert lower_bound(o, limit) <= best + 1e-12 <= o.total_cost(greedy) + 2e-12


def test_slack_calls_go_slow_and_the_critical_path_stays_fast():
    """In a fan-out with one long sub-agent, within 0% the long one's calls stay on the fast
    tier and the short ones' calls with room go to the cheap tier."""
    g = build_graph(fanout_run([6, 1, 1, 1], visible=40, tiers=TIERS).trace())
    o = options(g, [STD, FAST])
    limit = o.end(fastest(o))
    o_calls = o.calls
    sol = route(o, limit)
    assert sol is not None and sol.predicted_ns <= limit
    tier = {
        (c.key.agent, c.key.step): o.tiers[t].name for c, t in zip(o_calls, sol.choice, strict=True)
    }
    assert all(tier[("w0", s)] == "fast" for s in range(1, 8))
    assert tier[("w1", 2)] == "std"  # a short worker's answer has room to stream slowly


@pytest.mark.parametrize(("within", "budget"), [(10.0, None), (1000.0, None), (None, 0.02)])
def test_a_slower_tier_on_the_critical_path_says_what_allows_it(within, budget):
    """A call with no slack on the fast tier is "on the critical path"; one on the cheap tier is
    there because the limit (or the budget) allows it, and its reason says so."""
    g = build_graph(fanout_run([3, 1, 1], visible=40, tiers=TIERS).trace())
    doc = plan_document(options(g, [STD, FAST]), within, budget)
    tight = [c for c in doc["calls"] if not c["reason"].startswith("slack")]
    assert "std" in {c["tier"] for c in tight}  # the case this is about
    allowed = "the time limit allows it" if within is not None else "no faster tier fits the budget"
    for c in tight:
        assert ("on the critical path" if c["tier"] == "fast" else allowed) == c["reason"], c


def test_the_greedy_search_is_within_the_limit_on_a_big_trace():
    """2,000-odd calls: the plan meets the limit and costs between the bound and all-fastest."""
    g = build_graph(fanout_run([8, 3, 2, 2, 1, 1, 1, 1], rounds=80, tiers=TIERS).trace())
    o = options(g, [STD, FAST])
    assert len(o.calls) >= 2000
    fast = fastest(o)
    limit = o.end(fast) * 110 // 100
    sol = route(o, limit)
    assert sol is not None and sol.method == "greedy"
    assert sol.predicted_ns <= limit
    assert sol.lower_bound_usd <= sol.cost_usd < o.total_cost(fast)


def test_a_plan_re_times_as_the_mix_what_if():
    """The plan's routing, read back through the plan file, predicts the router's time and cost."""
    g = build_graph(fanout_run([3, 1, 1], visible=40, tiers=TIERS).trace())
    o = options(g, [STD, FAST])
    sol = route(o, o.end(fastest(o)) * 105 // 100)
    assert sol is not None
    routing = Routing(
        calls={c.key: o.tiers[t].name for c, t in zip(o.calls, sol.choice, strict=True)}
    )
    p = predict(o, choice_of(o, routing))
    assert (p.predicted_ns, p.cost_usd) == (sol.predicted_ns, pytest.approx(sol.cost_usd))


def _write(tmp_path: Path) -> Path:
    return fanout_run([3, 1, 1], visible=40, tiers=TIERS).write(tmp_path / "run.jsonl")


def test_route_writes_a_plan_run_and_whatif_accept(tmp_path: Path, capsys):
    """`route --json -o` prints the required fields and writes a plan load_plan reads back."""
    from agentloop.cli import main

    trace = _write(tmp_path)
    plan = tmp_path / "plan.json"
    code = main(
        [
            "route",
            str(trace),
            "--tiers",
            "sim-standard,sim-ultrafast",
            "--within",
            "10%",
            "--json",
            "-o",
            str(plan),
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    for k in (
        "predicted_s",
        "predicted_cost_usd",
        "fastest_s",
        "fastest_cost_usd",
        "cheapest_s",
        "cheapest_cost_usd",
        "frontier",
        "plan",
    ):
        assert k in doc
    assert doc["predicted_s"] <= doc["fastest_s"] * 1.1 + 1e-9
    assert doc["cheapest_cost_usd"] <= doc["predicted_cost_usd"] <= doc["fastest_cost_usd"]
    assert json.loads(plan.read_text()) == doc["plan"]
    r = load_plan(plan)
    assert (r.task, r.trace) == ("demo", "synthetic")
    assert len(r.calls) == len(doc["calls"])


@pytest.mark.parametrize(
    "args, says",
    [
        (["--within", "ten"], "--within 'ten'"),
        (["--within=-5%"], "must be a percentage >= 0"),
        (["--budget-usd=-1"], "--budget-usd must be >= 0"),
        (["--budget-usd", "0"], "even the all-cheapest plan costs"),
    ],
)
def test_bad_limits_exit_2(tmp_path: Path, capsys, args, says):
    """A malformed or impossible limit is exit 2 with a message, no traceback."""
    from agentloop.cli import main

    code = main(["route", str(_write(tmp_path)), "--tiers", "sim-standard,sim-ultrafast", *args])
    assert code == 2
    assert says in capsys.readouterr().err


def test_a_tier_without_a_profile_says_how_to_get_one(tmp_path: Path, capsys):
    """A candidate tier with no speed profile: exit 2 naming `agentloop probe --tier NAME --write`."""
    from agentloop.cli import main

    tiers = tmp_path / "tiers.toml"
    tiers.write_text('[tiers.bare]\nbase_url = "http://localhost:1/v1"\nmodel = "m"\n')
    code = main(
        [
            "route",
            str(_write(tmp_path)),
            "--tiers",
            "sim-standard,bare",
            "--tiers-file",
            str(tiers),
            "--within",
            "10",
        ]
    )
    assert code == 2
    assert "agentloop probe --tier bare --write" in capsys.readouterr().err


def test_whatif_on_the_plan_predicts_what_route_did(tmp_path: Path, capsys):
    """`whatif --routing PLAN` re-times the trace to route's predicted time and cost; `--route`
    for one agent moves only that agent's calls."""
    from agentloop.cli import main

    trace = _write(tmp_path)
    plan = tmp_path / "plan.json"
    tiers = ["--tiers", "sim-standard,sim-ultrafast"]
    assert main(["route", str(trace), *tiers, "--within", "5", "--json", "-o", str(plan)]) == 0
    routed = json.loads(capsys.readouterr().out)
    assert main(["whatif", str(trace), "--routing", str(plan), "--json"]) == 0
    mixed = json.loads(capsys.readouterr().out)
    assert mixed["predicted_s"] == pytest.approx(routed["predicted_s"], abs=1e-9)
    assert mixed["predicted_cost_usd"] == pytest.approx(routed["predicted_cost_usd"])
    assert main(["whatif", str(trace), "--route", "w0=sim-ultrafast", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["tiers"]["sim-ultrafast"]["calls"] == 4  # w0's three steps and its answer


@pytest.mark.parametrize(
    "plan, says",
    [
        ({"task": "other"}, "field 'task': the plan is for task 'other'"),
        ({"trace": "r-123"}, "field 'trace': the plan was computed from trace 'r-123'"),
        ({"agents": {"ghost": "sim-standard"}}, "unknown agent 'ghost'"),
        ({"agents": {"w0": "warp-9"}}, "unknown tier 'warp-9'"),
    ],
)
def test_a_plan_for_another_run_or_with_unknown_names_exits_2(tmp_path: Path, capsys, plan, says):
    """whatif --routing refuses a plan for another task or trace, or naming unknown agents or
    tiers: exit 2 naming the file and the field."""
    from agentloop.cli import main

    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"agentloop_plan": 1, **plan}))
    assert main(["whatif", str(_write(tmp_path)), "--routing", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and "plan.json" in err


def test_route_html_draws_the_frontier_with_the_plan_marked(tmp_path: Path, capsys):
    """`route --html` writes the report page with a frontier section: a point per frontier
    plan and the chosen one marked at the plan's time and cost."""
    import re

    from agentloop.cli import main

    page = tmp_path / "route.html"
    args = ["route", str(_write(tmp_path)), "--tiers", "sim-standard,sim-ultrafast"]
    assert main([*args, "--within", "10", "--json", "--html", str(page)]) == 0
    doc = json.loads(capsys.readouterr().out)
    html = page.read_text()
    svg = html[html.index('<svg id="frontier"') :]
    svg = svg[: svg.index("</svg>")]
    assert len(re.findall(r'<circle class="pt"', svg)) == len(doc["frontier"])
    chosen = re.search(r'id="frontier-chosen"[^>]*><title>the plan: ([\d.]+) s, \$([\d.]+)', svg)
    assert chosen is not None
    assert float(chosen.group(1)) == pytest.approx(doc["predicted_s"], abs=1e-3)
    assert "Waterfall" in html


def test_a_call_whose_previous_call_moves_tier_loses_its_cached_prefix():
    """A sub-agent's second call had 800 of its input tokens cached: with the first call on
    another tier it is predicted (and priced) with none; on the same tier, with all 800."""
    from agentloop.trace import attrs as A

    b = fanout_run([2], visible=40, tiers=TIERS)
    for r in b.records:
        if r.get("type") == "span_end" and r["attrs"].get(A.TIMING):
            r["attrs"][A.GEN_AI_USAGE_CACHED_INPUT_TOKENS] = 800
    g = build_graph(b.trace())
    o = options(g, [STD, FAST])
    row = {(c.key.agent, c.key.step): k for k, c in enumerate(o.calls)}
    first, second = row[("w0", 1)], row[("w0", 2)]
    same = [0] * len(o.calls)
    moved = list(same)
    moved[first] = 1
    both = list(moved)
    both[second] = 1
    warm_std = STD.prices.input * 200 / 1e6 + STD.prices.cached_input * 800 / 1e6
    cold_std = STD.prices.input * 1000 / 1e6
    assert o.call_cost(second, same) - o.call_cost(second, moved) == pytest.approx(
        warm_std - cold_std
    )
    assert o.call_cost(second, both) < o.cost_cold[second][1]  # together: the cache holds
    assert o.move_saving(first, 1, same) == pytest.approx(o.total_cost(same) - o.total_cost(moved))
    assert o.durations(moved)[o.calls[second].span] > o.durations(same)[o.calls[second].span]
