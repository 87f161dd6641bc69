"""Tier layers (built-in < ./tiers.toml < --tiers < task) and shipped tasks found by name."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agentloop import open_task
from agentloop.cli import main
from agentloop.config.tiers import BUILTIN_TIERS, load_tiers, load_tiers_file, tier_sources
from agentloop.errors import TaskFileError
from tests.conftest import ROOT

PROJECT = """\
[tiers.sim-standard]
base_url = "sim"
model = "sim-standard"
profile = { base_latency_s = 0.1, prefill_tps = 1000, output_tps = 99 }

[tiers.mine]
base_url = "sim"
model = "mine"
profile = { base_latency_s = 0.1, prefill_tps = 1000, output_tps = 1 }
"""

OVERRIDE = """\
[tiers.mine]
base_url = "sim"
model = "mine"
profile = { base_latency_s = 0.1, prefill_tps = 1000, output_tps = 2 }
"""

TASK = """\
name: layered
prompt: p
tiers:
  mine: {base_url: sim, model: mine, profile: {base_latency_s: 0.1, prefill_tps: 1000, output_tps: 3}}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with its own ./tiers.toml, as the current folder."""
    (tmp_path / "tiers.toml").write_text(PROJECT)
    (tmp_path / "override.toml").write_text(OVERRIDE)
    (tmp_path / "task.yaml").write_text(TASK)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_later_layers_replace_a_tier_of_the_same_name(project: Path) -> None:
    """built-in < ./tiers.toml < --tiers < the task's tiers:, tier by tier."""
    task = open_task(project / "task.yaml")
    tiers = load_tiers(project / "override.toml", extra=task.tiers)
    assert (99, 3, 750) == (
        tiers["sim-standard"].profile.output_tps,
        tiers["mine"].profile.output_tps,
        tiers["sim-ultrafast"].profile.output_tps,
    )
    sources = tier_sources(project / "override.toml", extra=task.tiers)
    assert ("built-in", str(project / "tiers.toml"), "task") == (
        sources["sim-ultrafast"],
        sources["sim-standard"],
        sources["mine"],
    )
    assert 2 == load_tiers(project / "override.toml")["mine"].profile.output_tps


def test_tiers_command_says_where_each_tier_came_from(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentloop tiers --json` gives every tier its source layer."""
    assert 0 == main(["tiers", "--json", "--tiers", "override.toml"])
    sources = {t["name"]: t["source"] for t in orjson.loads(capsys.readouterr().out)}
    assert {"sim-standard": "tiers.toml", "mine": "override.toml", "sim-fast": "built-in"} == {
        k: Path(sources[k]).name if k != "sim-fast" else sources[k]
        for k in ("sim-standard", "mine", "sim-fast")
    }


def test_the_builtin_tiers_are_package_data_and_the_repo_root_file_adds_none() -> None:
    """One copy of the built-in tiers, inside the package; the root tiers.toml is a layer."""
    assert (ROOT / "agentloop" / "config" / "tiers.toml").resolve() == BUILTIN_TIERS
    assert {} == load_tiers_file(ROOT / "tiers.toml")


def test_a_shipped_task_is_found_by_name_from_anywhere(project: Path) -> None:
    """A bare name that is no file is a shipped task; an unknown one lists the shipped names."""
    task = open_task("checkout-timeouts")
    assert ROOT / "tasks" / "incident" / "checkout-timeouts.yaml" == task.source
    with pytest.raises(TaskFileError) as err:
        open_task("no-such-task")
    assert "no shipped task of that name" in err.value.message
    assert "checkout-timeouts" in err.value.message and 2 == err.value.exit_code
