"""CLI consistency: exit codes, refused limits, --version, piped output, help text, hints."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from agentloop import __version__
from agentloop.analysis import build_graph
from agentloop.analysis.compare import compare, render_compare
from agentloop.cli import build_parser, main
from agentloop.commands.run import analysis_lines
from agentloop.config.tiers import load_tiers
from agentloop.trace.reader import load_trace
from tests.conftest import ROOT

STANDARD = ROOT / "traces" / "reference" / "checkout-timeouts-sim-standard.jsonl"
ULTRAFAST = ROOT / "traces" / "reference" / "checkout-timeouts-sim-ultrafast.jsonl"


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refusals and --version
        return int(exc.code or 0)


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`agentloop --version` prints the version and exits 0."""
    assert 0 == _exit_code(["--version"])
    assert f"agentloop {__version__}" == capsys.readouterr().out.strip()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "checkout-timeouts", "--max-steps", "0"],
        ["run", "checkout-timeouts", "--timeout", "0"],
        ["replay", str(STANDARD), "--until-step", "0"],
    ],
    ids=["max-steps", "timeout", "until-step"],
)
def test_zero_limits_are_refused_with_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A zero step or time limit is bad input (exit 2, the option named), not ignored."""
    assert 2 == _exit_code(argv)
    err = capsys.readouterr().err
    assert f"argument {argv[-2]}: must be" in err and "Traceback" not in err


@pytest.mark.slow
def test_replay_until_a_step_whose_check_fails_exits_1(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replaying the demo's first two steps fails its success check, so replay exits 1 like run."""
    code = main(["replay", str(ULTRAFAST), "--until-step", "2", "-q", "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert 1 == code, out
    assert "check    FAILED" in out


def test_output_piped_into_a_closed_reader_ends_without_a_traceback() -> None:
    """`agentloop report ... | true`: the broken pipe ends the command quietly (exit 141)."""
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m agentloop.cli report "
            f'{STANDARD} | true; echo "rc=${{PIPESTATUS[0]}}"',
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ("", "rc=141") == (done.stderr, done.stdout.strip())


@pytest.mark.slow
def test_a_run_piped_into_head_ends_quietly(tmp_path) -> None:
    """`agentloop run TASK | head -1`: no traceback and no sink warnings, exit 141."""
    task = tmp_path / "task.yaml"
    task.write_text(
        "name: piped\nprompt: p\ntools: [think]\nscript:\n"
        + "  - tool_calls: [{name: think, arguments: {thought: hmm}}]\n" * 3
        + "  - text: done\n"
    )
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m agentloop.cli run {task} "
            f"--tier sim-ultrafast --trace-dir {tmp_path} | head -1; "
            'echo "rc=${PIPESTATUS[0]}"',
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ("", "rc=141") == (done.stderr, done.stdout.splitlines()[-1])


def test_every_option_of_every_command_has_help_text() -> None:
    """No option is left without a help line, in any subcommand."""
    missing = []

    def walk(parser: argparse.ArgumentParser, where: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{where} {name}")
            elif not action.help:
                missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "agentloop")
    assert [] == missing


def test_the_whatif_hint_names_the_fastest_faster_tier_or_says_k() -> None:
    """The run summary predicts for a named faster tier, else says K = 11 explicitly."""
    trace = load_trace(STANDARD)
    named = analysis_lines(trace, load_tiers())[-1]
    assert named.startswith(
        "what-if  on sim-ultrafast (750 tok/s, the fastest faster tier you have): "
    )
    fallback = analysis_lines(trace, {})[-1]
    assert fallback.startswith("what-if  output 11x faster (K = 11; no faster tier")


def test_compare_shows_no_percentage_for_near_zero_times() -> None:
    """Rows whose measured time is under 10 ms show '-' for the relative error."""
    text = render_compare(
        compare(build_graph(load_trace(STANDARD)), build_graph(load_trace(ULTRAFAST)))
    )
    rows = {
        li.split()[0]: li.split()
        for li in text.splitlines()
        if li.startswith("  ") and len(li.split()) == 6
    }
    assert "-" == rows["tail"][-1] and "-" == rows["tool:read_file"][-1]
    assert rows["reasoning"][-1].endswith("%")
