"""Suites: concurrent repeated runs on one shared simulator, their report, cost and cost limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentloop.api import run_task
from agentloop.cli import main
from agentloop.config.tiers import SpeedProfile
from agentloop.model.prices import Prices, call_cost
from agentloop.script import ScriptTurn
from agentloop.sim.server import SimServer
from agentloop.suite.records import RunRecord, load_suite, summarize_tasks
from agentloop.suite.run import run_suite
from agentloop.suite.stats import quantile
from agentloop.trace.reader import load_trace
from tests.conftest import held_drift_s, instant_tier, instant_tiers_file

# a priced simulated tier, declared in the task files themselves (USD per million tokens)
PRICED = """tiers:
  sim-priced:
    base_url: sim
    model: sim-priced
    profile: {base_latency_s: 0.05, prefill_tps: 100000, output_tps: 600}
    prices: {input: 2.0, cached_input: 0.5, output: 8.0}
"""


def task_file(
    folder: Path,
    name: str,
    *,
    check: str = "python -c 'pass'",
    extra: str = "",
    reasoning: int = 30,
) -> Path:
    """A two-turn task: the model thinks, calls `think`, then answers; checked by ``check``."""
    path = folder / f"{name}.yaml"
    path.write_text(f"""name: {name}
prompt: Answer the question.
tools: [think]
success: {{command: "{check}"}}
script:
  - reasoning_tokens: {reasoning}
    text: Let me think about it.
    tool_calls:
      - {{name: think, arguments: {{thought: "the plan is simple"}}}}
  - reasoning_tokens: {reasoning // 2}
    text: The answer is forty-two.
{extra}""")
    return path


async def test_a_failing_task_never_stops_the_others(tmp_path: Path) -> None:
    """A task whose check fails is recorded as failed for each repeat; the other task passes."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    task_file(tasks, "good")
    task_file(tasks, "bad", check="python -c 'raise SystemExit(3)'")
    suite = await run_suite([tasks], tmp_path / "out", tier=instant_tier(), concurrency=4, repeat=2)
    by = {(r.task, r.repeat): r for r in suite.runs}
    assert {("bad", 1), ("bad", 2), ("good", 1), ("good", 2)} == set(by)
    assert [True, True] == [by[("good", k)].passed for k in (1, 2)]
    assert [False, False] == [by[("bad", k)].success for k in (1, 2)]
    assert {"bad": 0, "good": 2} == {t.task: t.passed for t in summarize_tasks(suite.runs)}
    assert suite.runs == load_suite(tmp_path / "out").runs
    assert all((tmp_path / "out" / r.trace).is_file() for r in suite.runs if r.trace)


async def test_a_run_that_cannot_start_is_its_own_failed_record(tmp_path: Path) -> None:
    """A run whose setup command fails is an error record; the suite still runs the rest."""
    task_file(tmp_path, "good")
    broken = task_file(tmp_path, "broken")
    broken.write_text(
        broken.read_text().replace("tools: [think]", "tools: [think]\nsetup: ['exit 7']")
    )
    suite = await run_suite(
        [tmp_path / "good.yaml", broken], tmp_path / "out", tier=instant_tier(), concurrency=2
    )
    status = {r.task: (r.status, r.passed) for r in suite.runs}
    assert ("ok", True) == status["good"]
    assert "error" == status["broken"][0] and status["broken"][1] is False


def test_medians_and_spreads_over_repeats() -> None:
    """Per task: runs, passed, median and p10/p90 of wall time interpolate between repeats."""

    def rec(k: int, elapsed: float, ok: bool = True) -> RunRecord:
        return RunRecord(
            "t",
            "t.yaml",
            k,
            "sim",
            "ok" if ok else "error",
            "",
            None,
            elapsed,
            2,
            None,
            0.0,
            elapsed,
            output_tokens=100 * k,
        )

    runs = [rec(1, 4.0), rec(2, 1.0), rec(3, 2.0), rec(4, 3.0, ok=False), rec(5, 5.0)]
    (t,) = summarize_tasks(runs)
    assert (5, 4) == (t.runs, t.passed)
    assert {"median": 3.0, "p10": 1.4, "p90": 4.6} == {k: round(v, 6) for k, v in t.wall_s.items()}
    assert 300.0 == t.output_tokens["median"]
    assert None is quantile([], 0.5)


async def test_model_spans_carry_their_cost_at_the_tiers_prices(tmp_path: Path) -> None:
    """Every model span's cost_usd is the tier's prices times its tokens; the suite sums them."""
    task = task_file(tmp_path, "priced", extra=PRICED)
    suite = await run_suite([task], tmp_path / "out", tier="sim-priced", repeat=2)
    prices = Prices(2.0, 0.5, 8.0)
    for r in suite.runs:
        trace = load_trace(tmp_path / "out" / str(r.trace))
        spans = trace.of_kind("model")
        expected = [
            call_cost(
                prices,
                s.attrs["gen_ai.usage.input_tokens"],
                s.attrs["gen_ai.usage.cached_input_tokens"],
                s.attrs["gen_ai.usage.output_tokens"],
            )
            for s in spans
        ]
        assert expected == [s.attrs["cost_usd"] for s in spans]
        assert r.cost_usd == pytest.approx(sum(e or 0 for e in expected), rel=1e-12)
        assert r.cost_by_category is not None and r.cost_by_step is not None
        assert r.cost_usd == pytest.approx(sum(r.cost_by_category.values()), rel=1e-12)
        assert r.cost_usd == pytest.approx(sum(r.cost_by_step.values()), rel=1e-12)
        assert r.output_tokens * 8.0 / 1e6 == pytest.approx(
            r.cost_by_category["reasoning"] + r.cost_by_category["output"], rel=1e-12
        )
    written = orjson.loads((tmp_path / "out" / "suite.json").read_bytes())["totals"]
    assert sum(r.cost_usd or 0 for r in suite.runs) == pytest.approx(written["cost_usd"], rel=1e-12)


async def test_max_cost_usd_ends_the_run_with_status_budget(tmp_path: Path) -> None:
    """A run past its task's max_cost_usd stops after that model call with status budget."""
    task = task_file(tmp_path, "capped", extra=PRICED, reasoning=200)
    task.write_text(
        task.read_text().replace("tools: [think]", "tools: [think]\nlimits: {max_cost_usd: 0.0001}")
    )
    result = await run_task(task, tier="sim-priced", trace_dir=tmp_path / "traces")
    assert ("budget", 1) == (result.status, result.steps)
    assert "cost limit of $0.0001 reached" in result.reason
    end = load_trace(result.trace_path or "").end
    assert end is not None and "budget" == end["status"]


def test_suite_cli_prints_the_report_and_writes_suite_json(tmp_path: Path, capsys) -> None:
    """`agentloop suite` prints per-task rows and totals and exits 1 when a run failed."""
    task_file(tmp_path, "good")
    task_file(tmp_path, "bad", check="python -c 'raise SystemExit(1)'")
    code = main(
        [
            "suite",
            str(tmp_path / "good.yaml"),
            str(tmp_path / "bad.yaml"),
            "--tier",
            "sim-instant",
            "--tiers",
            str(instant_tiers_file(tmp_path)),
            "--repeat",
            "2",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr()
    assert 1 == code
    assert "passed      2/4 (2 failed)" in out.out
    assert "bad #1: ok:" in out.out
    assert "suite  4/4 done" in out.err
    data = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert [2, 0] == [t["passed"] for t in data["tasks"]]


def test_suite_cli_bad_input_is_exit_2(tmp_path: Path, capsys) -> None:
    """A missing task file or a bad --repeat is one message naming it, exit code 2."""
    assert 2 == main(["suite", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")])
    assert "nope.yaml: no such task file or folder" in capsys.readouterr().err
    task_file(tmp_path, "good")
    assert 2 == main(["suite", str(tmp_path / "good.yaml"), "--repeat", "0"])
    assert "--repeat must be at least 1" in capsys.readouterr().err
    assert 2 == main(["compare", str(tmp_path), str(tmp_path)])
    assert "not a suite folder (no suite.json" in capsys.readouterr().err


async def test_one_simulator_serves_each_route_its_own_script_and_pace() -> None:
    """Two routes on one simulator answer with their own scripts; an ended route is a 404."""
    fast, slow = SpeedProfile(0.0, 0, 1000.0), SpeedProfile(0.0, 0, 100.0)
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}]}
    async with SimServer(profile=fast) as sim, httpx.AsyncClient() as http:
        async with (
            sim.route(fast, [ScriptTurn(text="one two three")]) as a,
            sim.route(slow, [ScriptTurn(text="four five")]) as b,
        ):
            ra = await http.post(f"{a.base_url}/responses", json=body)
            rb = await http.post(f"{b.base_url}/responses", json=body)
            assert 2 == sim.routes
        gone = await http.post(f"{a.base_url}/responses", json=body)
    texts = [r.json()["output"][0]["content"][0]["text"] for r in (ra, rb)]
    assert ["one two three", "four five"] == texts
    assert (404, "unknown_route") == (gone.status_code, gone.json()["error"]["code"])


def test_report_shows_cost_by_category_and_step(tmp_path: Path, capsys) -> None:
    """`agentloop report` of a priced run adds its cost, split by category and by step."""
    task = task_file(tmp_path, "priced", extra=PRICED)
    assert 0 == main(
        ["run", str(task), "--tier", "sim-priced", "--trace-dir", str(tmp_path / "traces"), "-q"]
    )
    (trace,) = (tmp_path / "traces").glob("*.jsonl")
    capsys.readouterr()
    assert 0 == main(["report", str(trace), "--json"])
    cost = json.loads(capsys.readouterr().out)["cost"]
    spans = load_trace(trace).of_kind("model")
    assert cost["total_usd"] == pytest.approx(sum(s.attrs["cost_usd"] for s in spans))
    assert ["1", "2"] == list(cost["by_step"])
    assert cost["total_usd"] == pytest.approx(sum(cost["by_category"].values()))
    assert 0 == main(["report", str(trace)])
    assert "by category: input $" in capsys.readouterr().out


@pytest.fixture(scope="module")
def suite_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same two tasks (one with a real 0.3 s tool) run twice on standard and ultrafast."""
    root = tmp_path_factory.mktemp("pair")
    task_file(root, "think", reasoning=40)
    tool = task_file(root, "tool", reasoning=40)
    tool.write_text(
        tool.read_text()
        .replace("tools: [think]", "tools: [think, run]")
        .replace(
            '{name: think, arguments: {thought: "the plan is simple"}}',
            """{name: run, arguments: {command: "python -c 'import time; time.sleep(0.3)'"}}""",
        )
    )
    for tier, out in (("sim-standard", "A"), ("sim-ultrafast", "B")):
        assert 0 == main(
            [
                "suite",
                str(root / "think.yaml"),
                str(tool),
                "--tier",
                tier,
                "--repeat",
                "2",
                "--concurrency",
                "4",
                "--out",
                str(root / out),
            ]
        )
    return root / "A", root / "B"


def test_suite_compare_puts_measured_beside_predicted_with_intervals(
    suite_pair: tuple[Path, Path], capsys
) -> None:
    """Per task and suite: speedups inside their intervals, the prediction close to the
    measurement, and its error exactly the model-side part plus the tool noise."""
    a, b = suite_pair
    assert 0 == main(["compare", str(a), str(b), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert ["think", "tool"] == [t["task"] for t in data["tasks"]]
    assert 12.5 == data["per_token_speedup"]
    for t in [*data["tasks"], data["suite"]]:
        for key in ("measured_speedup", "predicted_speedup"):
            lo, hi = t[key]["ci95"]
            assert lo <= t[key]["value"] <= hi
        assert t["error_pct"] == pytest.approx(t["model_error_pct"] + t["tool_noise_pct"])
        # runs this short (about 1 s on ultrafast) keep some start-up contention of runs
        # starting together in B's first calls: -6% to -0.2% measured in six pairs (before the
        # suite's simulator had a process of its own and runs kept their connection, up to
        # 40%); the shipped suites' runs are within 0.2%. What a busy machine put between the
        # two sides is allowed on top, as the runs' traces measured it (-17% once in CI
        # beside a benchmark, the suite's four workers with it)
        machine = _machine_pct(a, b, t["task"] if t is not data["suite"] else None)
        assert abs(t["error_pct"]) < 15 + machine, (t, f"the machine's share {machine:.1f}%")
        assert 0 < t["output_share_a"] < 1
    assert 2 < data["suite"]["measured_speedup"]["value"] < 12.5
    assert 0 == main(["compare", str(a), str(b)])
    assert "tool noise" in capsys.readouterr().out


def _machine_pct(a: Path, b: Path, task: str | None) -> float:
    """What the machine, not the model, may have put between a task's prediction (A's runs
    re-timed) and B's measured runs, as a share of B's mean time: both sides' recorded
    lateness bounds and the held categories' drift between the runs paired in order
    (:func:`tests.conftest.held_drift_s`), means per run (``task`` None: every run)."""
    from agentloop.analysis.graph import build_graph
    from agentloop.analysis.lateness import of_trace
    from agentloop.suite.records import load_suite, trace_paths

    def runs(folder: Path) -> tuple[list[RunRecord], list[Any]]:
        got = [r for r in load_suite(folder).runs if task is None or r.task == task]
        return got, [load_trace(p) for p in trace_paths(folder, got) if p is not None]

    (_, ta), (rb, tb) = runs(a), runs(b)
    late = [of_trace(t).sum_bound_s for t in ta + tb]
    held = [held_drift_s(build_graph(x), build_graph(y)) for x, y in zip(ta, tb, strict=False)]
    b_s = sum(r.elapsed_s for r in rb) / len(rb)
    return 100 * (sum(late) / len(tb) + sum(held) / len(held)) / b_s


def test_suite_whatif_predicts_wall_time_and_cost_at_a_concurrency(
    suite_pair: tuple[Path, Path], capsys
) -> None:
    """One worker runs the predicted runs back to back; enough workers take the longest slot;
    the cost is the recorded tokens at the new tier's prices."""
    a, _ = suite_pair
    assert 0 == main(["whatif", str(a), "--tier", "sim-ultrafast", "--concurrency", "1", "--json"])
    one = json.loads(capsys.readouterr().out)
    assert 0 == main(["whatif", str(a), "--tier", "sim-ultrafast", "--concurrency", "8", "--json"])
    wide = json.loads(capsys.readouterr().out)
    assert one["predicted_wall_s"] >= one["run_time_b_s"]
    assert wide["predicted_wall_s"] < one["predicted_wall_s"] / 2
    assert one["run_time_a_s"] / one["run_time_b_s"] > 2
    ultra = Prices(2.5, 0.25, 20.0, placeholder=True)  # the built-in sim-ultrafast prices
    expected = 0.0
    for r in load_suite(a).runs:
        for s in load_trace(a / str(r.trace)).of_kind("model"):
            expected += (
                call_cost(
                    ultra,
                    s.attrs["gen_ai.usage.input_tokens"],
                    s.attrs["gen_ai.usage.cached_input_tokens"],
                    s.attrs["gen_ai.usage.output_tokens"],
                )
                or 0.0
            )
    assert expected == pytest.approx(one["cost_b_usd"], rel=1e-9)
    assert one["placeholder_prices"] is True
    assert 0 == main(["whatif", str(a), "--tier", "sim-ultrafast"])
    assert "predicted" in capsys.readouterr().out
    assert 2 == main(["whatif", str(a), "--speedup", "3"])
    assert "use --tier NAME" in capsys.readouterr().err


async def test_a_shared_suite_s_simulator_is_a_process_and_each_run_keeps_one_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite's one simulator runs in a child process; each of 6 runs connects once (before
    the start gate) and both of its model calls ride that connection; what the gate froze for
    the collector (asked for: freeze_gc) is unfrozen when the suite ends."""
    import gc
    import os

    from agentloop.sim.child import SimProcess

    seen: dict[str, int] = {}
    close = SimProcess.close

    async def counted(self: SimProcess) -> None:
        if self._proc is not None:
            seen.update(await self.stats(), pid=self.pid, frozen=gc.get_freeze_count())
        await close(self)

    monkeypatch.setattr(SimProcess, "close", counted)
    task_file(tmp_path, "two-calls")
    suite = await run_suite(
        [tmp_path / "two-calls.yaml"],
        tmp_path / "out",
        tier=instant_tier(),
        concurrency=6,
        repeat=6,
        freeze_gc=True,
    )
    assert [r.status for r in suite.runs] == ["ok"] * 6
    calls = [len(load_trace(tmp_path / "out" / r.trace).of_kind("model")) for r in suite.runs]
    assert calls == [2] * 6
    assert seen["pid"] != os.getpid()
    assert seen["connections"] == 6 and seen["routes"] == 0
    assert seen["frozen"] > 0 and gc.get_freeze_count() == 0


def test_suite_route_puts_tasks_on_tiers_within_the_wall_time(
    suite_pair: tuple[Path, Path], capsys
) -> None:
    """`route SUITE_DIR --concurrency N`: one worker in 0% of all-fast keeps every task fast;
    a wider limit lets a task go to the cheap tier; the plan's wall time meets the limit and
    its cost is between the two ends; a budget gives the fastest plan that fits."""
    a, _ = suite_pair
    tiers = ["--tiers", "sim-standard,sim-ultrafast"]
    assert 0 == main(["route", str(a), *tiers, "--concurrency", "1", "--within", "0", "--json"])
    tight = json.loads(capsys.readouterr().out)
    assert tight["method"] == "exhaustive"
    assert {t["tier"] for t in tight["tasks"]} == {"sim-ultrafast"}
    assert tight["predicted_wall_s"] == pytest.approx(tight["fastest_wall_s"])
    assert 0 == main(["route", str(a), *tiers, "--concurrency", "1", "--within", "300", "--json"])
    loose = json.loads(capsys.readouterr().out)
    assert loose["predicted_wall_s"] <= loose["fastest_wall_s"] * 4 + 1e-9
    assert loose["cheapest_cost_usd"] <= loose["predicted_cost_usd"] < tight["predicted_cost_usd"]
    budget = (loose["predicted_cost_usd"] + tight["predicted_cost_usd"]) / 2
    assert 0 == main(["route", str(a), *tiers, "--budget-usd", str(budget), "--json"])
    within_budget = json.loads(capsys.readouterr().out)
    assert within_budget["predicted_cost_usd"] <= budget
    assert 0 == main(["route", str(a), *tiers, "--within", "10"])
    assert "plan          wall" in capsys.readouterr().out


def test_one_run_a_task_prints_no_interval(suite_pair: tuple[Path, Path]) -> None:
    """A bootstrap of one sample resamples the same value: no [6.40-6.40] from --repeat 1, and
    no p10-p90 spread of one run."""
    from dataclasses import replace

    from agentloop.suite.compare import compare_suites
    from agentloop.suite.compare_view import render_suite_compare
    from agentloop.suite.records import load_suite
    from agentloop.suite.report import render_suite

    c = compare_suites(*suite_pair)
    assert "x [" in render_suite_compare(c)  # two runs a task: intervals
    one = replace(
        c,
        tasks=[replace(t, runs_a=1, runs_b=1) for t in c.tasks],
        suite=replace(c.suite, runs_a=2, runs_b=2),
    )
    text = render_suite_compare(one)
    assert "x [" not in text and "one run a task, so no intervals" in text
    suite = load_suite(suite_pair[0])
    firsts = replace(suite, repeat=1, runs=[r for r in suite.runs if r.repeat == 1])

    def rows(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.lstrip().startswith(("think", "tool"))]

    assert 2 == len(rows(render_suite(firsts))) and all(
        " - " in r for r in rows(render_suite(firsts))
    )
    assert all(" - " not in r for r in rows(render_suite(suite)))


def test_suite_summary_names_agent_and_wall_time(suite_pair: tuple[Path, Path]) -> None:
    """Two times, named: the agent's (what the what-if re-times) and each run's wall time with
    its set-up and success check, which is longer."""
    from agentloop.suite.records import finish
    from agentloop.suite.report import render_suite

    suite = finish(load_suite(suite_pair[0]))
    text = render_suite(suite)
    assert "agent s (median)" in text and "wall s (median)" in text
    assert "(what the what-if re-times), wall " in text
    assert suite.totals["run_wall_s"] > suite.totals["run_time_s"] > 0
