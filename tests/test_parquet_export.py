"""`agentloop export --format parquet` writes tables that DuckDB reads; the README's queries run."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from agentloop.analysis.synthetic_runs import StepSpec, sequential_run
from agentloop.cli import main
from agentloop.suite.records import RunRecord, Suite, write_suite

MS = 1_000_000
ROOT = Path(__file__).resolve().parents[1]
TIERS = {"sim-standard": 60.0, "sim-ultrafast": 600.0}


def suite_folder(root: Path, tier: str, tps: float) -> Path:
    """A suite folder of two tasks run twice each: steps of a model call, then shell and read."""
    folder = root / tier
    (folder / "traces").mkdir(parents=True)
    runs = []
    for k, task in enumerate(["fix-bug", "fix-bug", "write-docs", "write-docs"]):
        specs = [
            StepSpec(
                300 * MS,
                reasoning=20 * s,
                visible=30 + 10 * s + 5 * k,
                tools=(("shell", (100 + 50 * s + 10 * k) * MS), ("read", 20 * MS)),
            )
            for s in range(3)
        ]
        name = f"traces/{task}-{k}.jsonl"
        sequential_run(specs, tps=tps, task=task, tier=tier).write(folder / name)
        runs.append(
            RunRecord(task, task, k + 1, tier, "ok", "done", True, 5.0, 3, name, k, k + 5.0)
        )
    write_suite(folder, Suite(tier, 2, 2, 12.0, runs))
    return folder


def readme_queries() -> list[str]:
    """The SQL blocks of README.md's "Traces as tables" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Traces as tables", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


@pytest.fixture
def exported(tmp_path: Path, capsys) -> Path:
    out = tmp_path / "exports"
    for tier, tps in TIERS.items():
        folder = suite_folder(tmp_path / "suites", tier, tps)
        assert 0 == main(["export", str(folder), "--format", "parquet", "-o", str(out / tier)])
    assert "model_calls.parquet (12 rows)" in capsys.readouterr().out
    return out


def test_the_tables_have_the_documented_columns(exported: Path):
    """Each table's columns are those the README lists, in that order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Traces as tables", 1)[1].split("\n## ", 1)[0]
    for table in ("runs", "spans", "model_calls", "tool_calls", "critical_path"):
        documented = re.search(rf"^- `{table}`: (.*)$", section, re.M)
        assert documented is not None, table
        listed, _, note = documented.group(1).partition(" (")
        cols = re.findall(r"`(\w+)`", listed)
        got = pq.read_schema(exported / "sim-standard" / f"{table}.parquet").names
        suite_only = re.findall(r"`(\w+)`", note) if table == "runs" else []
        assert got == cols + suite_only, table


def test_the_readme_queries_run_in_duckdb(exported: Path):
    """The README's three DuckDB questions answer over the exported suites, as expected."""
    q1, q2, q3 = readme_queries()
    con = duckdb.connect()
    con.execute(f"SET file_search_path = '{exported.parent}'")
    slowest = con.execute(q1).fetchall()
    assert [row[0] for row in slowest] == ["shell", "read"]
    shell = sorted(
        d
        for (d,) in con.execute(
            "SELECT duration_ns FROM 'exports/*/tool_calls.parquet' WHERE tool = 'shell'"
        ).fetchall()
    )
    assert len(shell) == 24 and slowest[0][1] == 24
    assert shell[-1] / 1e9 >= slowest[0][2] >= shell[len(shell) // 2] / 1e9
    tokens = {row[0]: row[1:] for row in con.execute(q2).fetchall()}
    assert set(tokens) == {"fix-bug", "write-docs"}
    total = con.execute("SELECT sum(output_tokens) FROM 'exports/*/model_calls.parquet'").fetchone()
    assert total is not None and sum(r + v for r, v, _ in tokens.values()) == total[0]
    per_tier = con.execute(q3).fetchall()
    by = {(tier, cat): s for tier, cat, s in per_tier}
    assert {t for t, _ in by} == set(TIERS)
    measured = dict(
        con.execute(
            "SELECT tier, sum(measured_ns) / 1e9 FROM 'exports/*/runs.parquet' GROUP BY tier"
        ).fetchall()
    )
    for tier in TIERS:  # the critical path's categories add up to the runs' time
        assert sum(s for (t, _), s in by.items() if t == tier) == pytest.approx(measured[tier])
    assert by[("sim-standard", "decode")] > by[("sim-ultrafast", "decode")]


def test_one_trace_exports_too(tmp_path: Path, capsys):
    """A single trace file exports the same five tables, one run."""
    folder = suite_folder(tmp_path, "sim-standard", 60.0)
    out = tmp_path / "one"
    assert 0 == main(
        ["export", str(folder / "traces/fix-bug-0.jsonl"), "--format", "parquet", "-o", str(out)]
    )
    runs = duckdb.sql(f"SELECT run, task, spans FROM '{out}/runs.parquet'").fetchall()
    assert runs == [("fix-bug-0.jsonl", "fix-bug", 1 + 3 * 4)]


def test_a_folder_without_suite_json_is_a_clear_error(tmp_path: Path, capsys):
    """Exporting a folder that is not a suite names the missing file, exit code non-zero."""
    assert 0 != main(["export", str(tmp_path), "--format", "parquet", "-o", str(tmp_path / "o")])
    assert "not a suite folder" in capsys.readouterr().err
