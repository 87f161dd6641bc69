"""The errors a person hits first: a tier typo blamed where it was written, with "did you mean";
an unset API key variable refused before anything runs; a key written twice in a task or tiers
file refused naming both lines. Each is exit 2, one line, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.cli import main
from agentloop.config.tiers import load_tiers_file
from agentloop.errors import TierFileError


def one_error(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    out, err = capsys.readouterr()
    assert "Traceback" not in err and 1 == len(err.strip().splitlines()), err
    return out, err


def test_task_tier_typo_blames_the_task_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\n\ntier: sim-ultrafst\n")
    assert 2 == main(["run", str(path), "--trace-dir", str(tmp_path)])
    out, err = one_error(capsys)
    assert f"{path}, line 4, field 'tier': unknown tier 'sim-ultrafst'" in err
    assert "did you mean 'sim-ultrafast'?" in err and "tiers.toml" not in err
    assert "" == out and not list(tmp_path.glob("*.jsonl"))  # nothing ran


def test_flag_tier_typo_blames_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\ntier: sim-ultrafast\n")
    assert 2 == main(["run", str(path), "--tier", "sim-standrd"])
    _, err = one_error(capsys)
    assert err.startswith("agentloop: error: --tier: unknown tier 'sim-standrd'")
    assert "did you mean 'sim-standard'?" in err


def test_no_close_name_offers_no_guess(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\n")
    assert 2 == main(["run", str(path), "--tier", "warp-speed"])
    _, err = one_error(capsys)
    assert "did you mean" not in err and "known tiers:" in err


@pytest.mark.parametrize("command", ["run", "suite"])
def test_unset_key_refused_before_the_run(
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No header, no set-up, no trace: exit 2 naming the variable."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\nsetup: ['sleep 30']\n")
    extra = ["--trace-dir", str(tmp_path)] if command == "run" else ["--out", str(tmp_path / "s")]
    assert 2 == main([command, str(path), "--tier", "openai-standard", *extra])
    out, err = one_error(capsys)
    assert "environment variable OPENAI_API_KEY, which is not set" in err
    assert "openai-standard" in err and "" == out
    assert not list(tmp_path.rglob("*.jsonl"))


def test_task_key_written_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\nlimits:\n  max_steps: 3\n  max_steps: 4\nname: y\n")
    assert 2 == main(["run", str(path)])
    _, err = one_error(capsys)
    assert "line 5, field 'limits.max_steps': 'max_steps' is written twice" in err
    assert "on line 4 and on line 5" in err


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            '[tiers.a]\nmodel = "m"\nbase_url = "sim"\nmodel = "z"\n',
            "line 4: 'model' is written twice: on line 2 and again here",
        ),
        (
            '[tiers.a]\nmodel = "m"\n\n[tiers.a]\nbase_url = "sim"\n',
            "line 4: '[tiers.a]' is written twice: on line 1 and again here",
        ),
    ],
)
def test_tiers_key_written_twice(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "tiers.toml"
    path.write_text(text)
    with pytest.raises(TierFileError) as caught:
        load_tiers_file(path)
    assert f"{path}, {says}" == caught.value.message


def test_same_key_in_two_tables_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "tiers.toml"
    path.write_text(
        '[tiers.a]\nmodel = "m"\nbase_url = "http://x"\n[tiers.b]\nmodel = "m"\n'
        'base_url = "http://y"\n'
    )
    assert {"a", "b"} == set(load_tiers_file(path))
