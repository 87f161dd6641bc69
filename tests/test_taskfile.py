"""Invalid task files: one clear paragraph naming file, line and field; exit code 2; no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.cli import main
from agentloop.config.tasks import load_task
from agentloop.errors import TaskFileError

CASES = [
    ("bad yaml", "name: x\nprompt: [unclosed\n", "line 3", None, "not valid YAML"),
    ("unknown field", "name: x\nprompt: hi\ncolour: blue\n", "line 3", "colour", "unknown field"),
    (
        "wrong type",
        "name: x\nprompt: hi\nlimits:\n  max_steps: lots\n",
        "line 4",
        "limits.max_steps",
        "valid integer",
    ),
    (
        "negative limit",
        "name: x\nprompt: hi\nlimits:\n  timeout_s: -5\n",
        "line 4",
        "limits.timeout_s",
        "greater than 0",
    ),
    ("missing prompt", "name: x\n", "line 1", "prompt", "required field is missing"),
    (
        "unknown tool",
        "name: x\nprompt: hi\ntools:\n  - read_file\n  - teleport\n",
        "line 5",
        "tools[1]",
        "unknown tool 'teleport'",
    ),
    (
        "missing workspace",
        "name: x\nprompt: hi\nworkspace: ./nowhere\n",
        "line 3",
        "workspace",
        "does not exist",
    ),
    (
        "bad script turn",
        "name: x\nprompt: hi\nscript:\n  - text: hi\n    tool_calls:\n"
        "      - name: read_file\n        arguments: 5\n",
        "line 7",
        "script[0].tool_calls[0].arguments",
        "valid dictionary",
    ),
    ("not a mapping", "- just\n- a list\n", "line 1", None, "must be a YAML mapping"),
    *(
        (
            f"requirement {what}",
            f"name: x\nprompt: hi\nrequirements:\n  - requests>=2\n  - '{req}'\n",
            "line 5",
            "requirements[1]",
            f"is {what}",
        )
        for req, what in [
            ("-r /etc/passwd", "a pip option"),
            ("--index-url=http://evil.test/simple", "a pip option"),
            ("-e .", "a pip option"),
            ("./src", "a path"),
            ("/tmp/trojan", "a path"),
            ("payload.tar.gz", "a path"),
            ("pkg @ https://evil.test/pkg.whl", "a URL"),
            ("git+https://evil.test/pkg", "a URL"),
            ("two words", "not a package specifier"),
        ]
    ),
]


@pytest.mark.parametrize(
    ("case", "text", "line", "field", "says"), CASES, ids=[c[0] for c in CASES]
)
def test_invalid_task_file_is_reported_with_line_and_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    text: str,
    line: str,
    field: str | None,
    says: str,
) -> None:
    """The CLI names the file, line and field, exits 2 and prints no traceback."""
    path = tmp_path / "task.yaml"
    path.write_text(text)
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert 2 == code
    assert str(path) in err and line in err and says in err
    if field:
        assert f"field '{field}'" in err
    assert "Traceback" not in err
    assert 1 == len(err.strip().splitlines())


def test_missing_task_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A task path that does not exist is an error naming it, exit code 2."""
    code = main(["run", str(tmp_path / "absent.yaml")])
    assert 2 == code and "absent.yaml: no such file" in capsys.readouterr().err


def test_unknown_tier_lists_known_tiers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Asking for a tier that does not exist names the known ones."""
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\n")
    code = main(["run", str(path), "--tier", "warp-speed"])
    err = capsys.readouterr().err
    assert 2 == code and "unknown tier 'warp-speed'" in err and "sim-ultrafast" in err


def test_valid_task_file_loads_with_defaults(tmp_path: Path) -> None:
    """A minimal valid task gets the documented defaults."""
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\ntools: read_file\n")
    task = load_task(path, {"read_file"})
    assert (("read_file",), 30, True) == (task.tools, task.limits.max_steps, task.finish_tool)


def test_plain_package_specifiers_are_requirements(tmp_path: Path) -> None:
    """Names with extras, version clauses and markers are accepted as they are written."""
    reqs = [
        "requests",
        "requests[socks]>=2,<3",
        "zope.interface ~= 5.0",
        "tomli; python_version < '3.11'",
    ]
    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\nrequirements:\n" + "".join(f'  - "{r}"\n' for r in reqs))
    assert tuple(reqs) == load_task(path).requirements


def test_setup_failure_names_the_command(tmp_path: Path) -> None:
    """A setup command that fails is reported with its index and exit code."""
    import asyncio

    from agentloop.sandbox import workspace

    path = tmp_path / "task.yaml"
    path.write_text("name: x\nprompt: hi\nsetup:\n  - 'false'\n")
    task = load_task(path)
    with pytest.raises(TaskFileError, match=r"field 'setup\[0\]'.*exit code 1"):
        asyncio.run(workspace.prepare(task, root=tmp_path))
