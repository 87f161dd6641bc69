"""The report, whatif and compare subcommands, run through agentloop.cli.main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentloop.analysis.compare import compare
from agentloop.analysis.graph import build_graph
from agentloop.analysis.synthetic_runs import StepSpec, sequential_run
from agentloop.cli import main
from agentloop.trace.reader import load_trace

MS = 1_000_000
STD = {"base_latency_s": 0.3, "prefill_tps": 20_000, "output_tps": 60.0}
ULTRA = {"base_latency_s": 0.2, "prefill_tps": 100_000, "output_tps": 750.0}


def run_on(profile: dict, tier: str, path: Path, *, task: str = "demo", steps: int = 3) -> Path:
    """A run whose model calls take exactly what ``profile`` says (base + prefill + tokens)."""
    specs = []
    for k in range(steps):
        n_in = 2000 + 1000 * k
        base = round((profile["base_latency_s"] + n_in / profile["prefill_tps"]) * 1e9)
        specs.append(
            StepSpec(
                base,
                reasoning=30 * k,
                visible=40 + 10 * k,
                input_tokens=n_in,
                tools=(("shell", 200 * MS), ("read", 50 * MS)),
            )
        )
    b = sequential_run(
        specs,
        tps=profile["output_tps"],
        task=task,
        tier=tier,
        base_latency_s=profile["base_latency_s"],
        prefill_tps=profile["prefill_tps"],
    )
    return b.write(path)


def test_report_cli_prints_tables(tmp_path, capsys):
    """`agentloop report TRACE` exits 0 and prints categories, steps and the critical path."""
    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    assert 0 == main(["report", str(trace)])
    out = capsys.readouterr().out
    assert "task demo on tier sim-standard" in out
    assert "tool:shell" in out and "Critical path" in out
    assert "model share of the critical path" in out


@pytest.mark.parametrize("command", ["report", "route", "compare"])
def test_an_analysis_command_run_in_process_gives_the_collector_back(
    tmp_path, command, monkeypatch
):
    """The analysis commands freeze a big trace they load on the loops out of the collector's
    sight (the CLI's decision, for a process about to end); ``main`` called in a caller's
    process (a test, an embedding) unfreezes it on return, so the caller's collector is as it
    was. (The size that counts as big lowered to 0: the loops' path with a small trace.)"""
    import gc

    import agentloop.commands.report as report_command

    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    args = {
        "report": ["report", str(trace), "--transcript"],
        "route": ["route", str(trace), "--tiers", "sim-standard,sim-ultrafast", "--within", "50"],
        "compare": ["compare", str(trace), str(trace)],
    }[command]
    monkeypatch.setattr(report_command, "COLUMNAR_BYTES", 0)
    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda f=gc.freeze: frozen.append(1) or f())
    assert 0 == gc.get_freeze_count()
    assert 0 == main(args)
    assert frozen and 0 == gc.get_freeze_count()


@pytest.mark.parametrize("command", ["report", "route", "compare"])
def test_a_small_trace_is_neither_collected_nor_frozen(tmp_path, command, monkeypatch):
    """Under the columnar size a trace's rescans cost milliseconds: no full collection of the
    caller's heap (0.1 s a command in a test worker) and nothing frozen."""
    import gc

    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    args = {
        "report": ["report", str(trace)],
        "route": ["route", str(trace), "--tiers", "sim-standard,sim-ultrafast", "--within", "50"],
        "compare": ["compare", str(trace), str(trace)],
    }[command]
    frozen, collected = [], []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)
    assert 0 == main(args)
    assert (frozen, collected) == ([], [])


def test_report_cli_json(tmp_path, capsys):
    """`agentloop report --json` prints one JSON object with the step table."""
    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    assert 0 == main(["report", str(trace), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert 3 == len(data["steps"])
    assert sum(c["critical_s"] for c in data["categories"].values()) == pytest.approx(
        data["measured_s"]
    )


def test_whatif_cli_with_tier_file_json(tmp_path, capsys):
    """`agentloop whatif --tier --tiers --json` predicts from the named tier's profile."""
    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    tiers = tmp_path / "tiers.toml"
    tiers.write_text(
        '[tiers.fast]\nbase_url = "sim"\nmodel = "m"\n'
        "profile = { base_latency_s = 0.2, prefill_tps = 100000, "
        "output_tps = 750 }\n"
    )
    assert 0 == main(["whatif", str(trace), "--tier", "fast", "--tiers", str(tiers), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert {
        "measured_s",
        "predicted_s",
        "speedup",
        "ceiling",
        "categories",
        "steps",
        "curve",
    } <= set(data)
    assert data["predicted_s"] < data["measured_s"]
    assert data["speedup"] == pytest.approx(data["measured_s"] / data["predicted_s"])
    assert [1, 2, 3, 5, 8, 11, 20, 50, 100] == [p["k"] for p in data["curve"]]


def test_whatif_cli_speedup_text(tmp_path, capsys):
    """`agentloop whatif --speedup 1` prints a prediction equal to the measured time."""
    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    assert 0 == main(["whatif", str(trace), "--speedup", "1"])
    lines = capsys.readouterr().out.splitlines()
    measured = next(x for x in lines if x.strip().startswith("measured")).split()[1]
    predicted = next(x for x in lines if x.strip().startswith("predicted")).split()[1]
    assert measured == predicted
    assert any("speedup 1.00x" in x for x in lines)


def test_whatif_cli_unknown_tier_exits_2(tmp_path, capsys):
    """An unknown tier name is a user error (exit 2) listing the known tiers."""
    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    assert 2 == main(["whatif", str(trace), "--tier", "nope"])
    assert "unknown tier 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["report"], ["whatif", "--speedup", "2"]])
def test_missing_trace_exits_2_naming_the_file(tmp_path, capsys, command):
    """A trace path that does not exist gives exit code 2 and names the file, no traceback."""
    missing = tmp_path / "nowhere.jsonl"
    assert 2 == main([command[0], str(missing), *command[1:]])
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err


def test_non_trace_file_exits_2_naming_the_file(tmp_path, capsys):
    """A file that is not a trace gives exit code 2 and names the file and line."""
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello, world\n")
    assert 2 == main(["report", str(bogus)])
    err = capsys.readouterr().err
    assert f"{bogus}, line 1" in err


def test_compare_predicts_a_run_on_the_other_tier(tmp_path):
    """Run A re-timed to B's header profile predicts B when B's calls follow that profile."""
    a = build_graph(load_trace(run_on(STD, "sim-standard", tmp_path / "a.jsonl")))
    b = build_graph(load_trace(run_on(ULTRA, "sim-ultrafast", tmp_path / "b.jsonl")))
    c = compare(a, b)
    assert "sim-ultrafast" == c.tier_b
    assert abs(c.error_pct) < 0.01
    assert c.measured_speedup == pytest.approx(c.predicted_speedup, rel=1e-4)
    assert c.measured_speedup > 2
    assert not c.warnings
    assert ["run", "1", "2", "3"] == [r.name for r in c.steps]
    assert all(abs(r.predicted_ns - r.b_ns) < 1000 for r in c.steps)


def test_compare_cli_warns_on_step_count_and_prints_json(tmp_path, capsys):
    """compare warns when the runs took different numbers of steps; --json has the figures."""
    a = run_on(STD, "sim-standard", tmp_path / "a.jsonl", steps=3)
    b = run_on(ULTRA, "sim-ultrafast", tmp_path / "b.jsonl", steps=4)
    assert 0 == main(["compare", str(a), str(b), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert {
        "measured_speedup",
        "predicted_speedup",
        "error_pct",
        "steps",
        "categories",
        "warnings",
    } <= set(data)
    assert any("different numbers of steps" in w for w in data["warnings"])
    assert 0 == main(["compare", str(a), str(b)])
    assert "warning: the runs took different numbers of steps" in capsys.readouterr().out


def test_compare_cli_refuses_different_tasks(tmp_path, capsys):
    """Traces of two different tasks are refused with exit code 2."""
    a = run_on(STD, "sim-standard", tmp_path / "a.jsonl", task="one")
    b = run_on(ULTRA, "sim-ultrafast", tmp_path / "b.jsonl", task="two")
    assert 2 == main(["compare", str(a), str(b)])
    assert "same task" in capsys.readouterr().err


def test_whatif_cli_rejects_a_zero_speedup(tmp_path, capsys):
    """--speedup 0 is a user error with exit code 2."""
    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    assert 2 == main(["whatif", str(trace), "--speedup", "0"])
    assert "--speedup" in capsys.readouterr().err


def test_compare_warns_about_an_incomplete_trace(tmp_path):
    """Comparing against a killed run works and says the trace is incomplete."""
    a = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    b = run_on(ULTRA, "sim-ultrafast", tmp_path / "b.jsonl")
    full = build_graph(load_trace(b)).measured_ns
    b.write_bytes(b"".join(b.read_bytes().splitlines(keepends=True)[:-3]))  # killed near the end
    c = compare(build_graph(load_trace(a)), build_graph(load_trace(b)))
    assert any("trace B is incomplete" in w for w in c.warnings)
    assert full - 3 * MS == c.b_ns  # up to the last tool's end: the last 1 ms gaps are lost


def test_whatif_cli_prefill_speedup_needs_speedup(tmp_path, capsys):
    """--prefill-speedup with --tier is refused (exit 2): the tier's profile has its prefill."""
    trace = run_on(STD, "sim-standard", tmp_path / "a.jsonl")
    assert 2 == main(["whatif", str(trace), "--tier", "sim-ultrafast", "--prefill-speedup", "2"])
    assert "--prefill-speedup goes with --speedup" in capsys.readouterr().err
