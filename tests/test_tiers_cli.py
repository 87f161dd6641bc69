"""``agentloop tiers`` and ``agentloop probe``: listing, endpoint checks, measuring, rewriting."""

from __future__ import annotations

import shutil
import signal
import tomllib
from pathlib import Path

import orjson
import pytest
import structlog

from agentloop.cli import main as cli
from agentloop.commands.probe import measured_profile
from agentloop.commands.tiers import check_tier
from agentloop.config.tier_write import write_profile
from agentloop.config.tiers import BUILTIN_TIERS, SpeedProfile, Tier, load_tiers
from agentloop.errors import ModelError
from agentloop.model.local import LocalSpec, serve, start_check
from agentloop.sim import SimServer
from tests.conftest import same_profile


@pytest.fixture(autouse=True)
def _unbind_logging() -> object:
    """The CLI binds structlog to this test's captured stderr; unbind it when the test ends."""
    yield
    structlog.reset_defaults()


CHECK_FILE = """\
# tiers for the check test
[tiers.simulated]
base_url = "sim"
model = "sim-x"
profile = { base_latency_s = 0.01, prefill_tps = 0, output_tps = 500 }

[tiers.nobody-home]
base_url = "http://127.0.0.1:9/v1"
model = "m"
profile = { base_latency_s = 0.5, prefill_tps = 1000, output_tps = 50 }

[tiers.no-key]
base_url = "http://127.0.0.1:9/v1"
api_key_env = "AGENTLOOP_TEST_ABSENT_KEY"
model = "m"
profile = { base_latency_s = 0.5, prefill_tps = 1000, output_tps = 50 }
"""


def test_tiers_lists_every_tier_with_endpoint_model_and_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The listing shows each tier of the file with its endpoint, model, API, options, profile."""
    assert cli(["tiers", "--tiers", str(BUILTIN_TIERS)]) == 0
    out = capsys.readouterr().out
    for name, tier in load_tiers(BUILTIN_TIERS).items():
        line = next(li for li in out.splitlines() if li.startswith(name + " "))
        assert tier.base_url in line and tier.model in line and tier.api in line
        assert f"out {tier.profile.output_tps:g} tok/s" in line
    assert "service_tier=ultrafast" in out


def test_tiers_check_reports_each_tier_without_crashing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--check says per tier: served, unreachable, or key missing; exit 1 when any is not ok."""
    monkeypatch.delenv("AGENTLOOP_TEST_ABSENT_KEY", raising=False)
    path = tmp_path / "tiers.toml"
    path.write_text(CHECK_FILE)
    assert cli(["tiers", "--check", "--json", "--timeout", "2", "--tiers", str(path)]) == 1
    checks = {t["name"]: t["check"] for t in orjson.loads(capsys.readouterr().out)}
    assert checks["simulated"]["ok"] is True and "enabled" in checks["simulated"]["status"]
    assert checks["nobody-home"]["ok"] is False
    assert "unreachable" in checks["nobody-home"]["status"]
    assert checks["no-key"] == {
        "ok": False,
        "status": "no key: environment variable AGENTLOOP_TEST_ABSENT_KEY not set",
    }


async def test_check_tells_a_served_model_from_one_that_is_not() -> None:
    """Against a live endpoint, the tier's model id is looked up in the models list."""
    profile = SpeedProfile(0.01, 0, 500)
    async with SimServer(profile=profile, profiles={"fast-model": profile}) as sim:
        served = Tier("a", sim.base_url, "fast-model", "chat", profile)
        missing = Tier("b", sim.base_url, "other-model", "chat", profile)
        ok, no = await check_tier(served, 2.0), await check_tier(missing, 2.0)
    assert ok["ok"] is True
    assert no["ok"] is False and "'other-model' not served" in no["status"]
    assert "fast-model" in no["status"]


def crashing_server(tmp_path: Path, body: str) -> tuple[LocalSpec, Path]:
    """A local tier's spec (a model file that exists) and a program standing in for
    llama-server: a real child process that runs ``body`` (no core dump)."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    exe = tmp_path / "llama-server"
    exe.write_text(f"#!/bin/sh\nulimit -c 0\necho 'loading model' >&2\n{body}\n")
    exe.chmod(0o755)
    return LocalSpec(str(model), startup_timeout_s=30), exe


@pytest.mark.parametrize(
    ("sig", "cause"),
    [
        (signal.SIGILL, "built for instructions this CPU cannot run"),
        (signal.SIGSEGV, "damaged or unsupported GGUF model file"),
        (signal.SIGBUS, "memory-mapped model file could not be read"),
        (signal.SIGKILL, "out-of-memory killer"),
    ],
)
async def test_a_server_killed_by_a_signal_at_start_is_explained(
    tmp_path: Path, sig: signal.Signals, cause: str
) -> None:
    """A local server that dies of a signal while starting is reported with the signal's name,
    its likely cause and the server's last lines, not a bare negative exit code."""
    spec, exe = crashing_server(tmp_path, f"kill -{sig.name.removeprefix('SIG')} $$")
    with pytest.raises(ModelError) as info:
        async with serve(spec, binary=exe):
            pass
    first, *rest = info.value.message.splitlines()
    assert first.startswith(f"local llama-server was killed by {sig.name} (")
    assert cause in first and "exited with code" not in first
    assert ["its last lines:", "loading model"] == rest


async def test_sigill_says_how_to_rebuild(tmp_path: Path) -> None:
    """SIGILL, a build for another CPU (AMX, AVX-512), names the portable rebuild."""
    spec, exe = crashing_server(tmp_path, "kill -ILL $$")
    check = await start_check(spec, binary=exe)
    assert False is check["ok"]
    assert "rebuild it portable: see .ci/install's LLAMA_CMAKE_ARGS" in check["status"]


async def test_a_server_that_exits_at_start_reports_its_code_and_last_lines(
    tmp_path: Path,
) -> None:
    """A server that exits with a code says the code and the log lines that explain it."""
    spec, exe = crashing_server(tmp_path, "echo 'error: invalid argument: --bad' >&2; exit 1")
    check = await start_check(spec, binary=exe)
    assert (
        False,
        [
            f"local llama-server exited with code 1 while starting (model {spec.model})",
            "its last lines:",
            "loading model",
            "error: invalid argument: --bad",
        ],
    ) == (check["ok"], check["status"].splitlines())


def test_write_profile_rewrites_only_that_tiers_profile(tmp_path: Path) -> None:
    """write_profile changes one tier's profile line and keeps comments and other tiers."""
    path = tmp_path / "tiers.toml"
    shutil.copy(BUILTIN_TIERS, path)
    before = path.read_text().splitlines()
    write_profile(path, "openai-standard", SpeedProfile(0.4567, 12345.6, 71.25))
    after = path.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1
    assert changed[0][1] == (
        "profile = { base_latency_s = 0.457, prefill_tps = 12346, output_tps = 71.2 }"
    )
    tiers = load_tiers(path)
    assert tiers["openai-standard"].profile == SpeedProfile(0.457, 12346, 71.2)
    assert tiers["openai-ultrafast"].profile.output_tps == 750
    assert tomllib.loads(path.read_text())["tiers"]["sim-fast"]["profile"]["output_tps"] == 200


@pytest.mark.pacing
def test_probe_of_sim_ultrafast_measures_its_pacing(capsys: pytest.CaptureFixture[str]) -> None:
    """Probing the shipped sim-ultrafast tier measures a paced server: never sooner than its
    profile (0.2 s base + prompt at 100,000 tok/s; the long prompt's floor is past the short
    one's, so a server that skipped prefill fails it), and output far faster than a standard
    tier's 60 tok/s. Load only delays a paced answer, so these floors hold on a busy machine
    (the short prompt's measured TTFT is not compared with the long one's: 84 ms apart, a busy
    machine's delay can exceed that); how close to 750 tok/s and 0.2 s it measures is
    bench_probe.py's figure."""
    assert (
        cli(
            ["probe", "--tier", "sim-ultrafast", "-n", "2", "--json", "--tiers", str(BUILTIN_TIERS)]
        )
        == 0
    )
    res = orjson.loads(capsys.readouterr().out)
    short, long = res["input_tokens_short"], res["input_tokens_long"]
    assert long > 20 * short
    assert res["ttft_s"] >= 0.2 + short / 100000
    assert res["ttft_long_s"] >= 0.2 + long / 100000 > 0.2 + short / 100000 + 0.05
    assert res["output_tps"] > 5 * 60
    assert len(res["samples"]["short"]) == len(res["samples"]["long"]) == 2


@pytest.mark.slow
def test_probe_write_puts_the_measured_profile_into_the_tiers_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--write rewrites the probed tier's profile with what was measured (the figures the probe
    reports, to four significant digits, slopes to three decimals), keeping the rest of the file."""
    path = tmp_path / "tiers.toml"
    path.write_text(
        '# mine\n[tiers.s]\nbase_url = "sim"\nmodel = "s"\n'
        "profile = { base_latency_s = 0.3, prefill_tps = 20000, output_tps = 400 }\n"
    )
    argv = ["probe", "--tier", "s", "-n", "1", "--tokens", "200", "--write", "--json"]
    assert cli([*argv, "--tiers", str(path)]) == 0
    measured = measured_profile(orjson.loads(capsys.readouterr().out), 20000)
    written = load_tiers(path)["s"].profile
    assert written is not None
    assert same_profile(measured, written)  # the slopes are written to 3 decimals
    assert path.read_text().startswith("# mine\n")


def test_a_probe_whose_short_calls_measured_no_speed_writes_another_measured_one() -> None:
    """Under load a fast server's short answers can come in one read each (no decode, NaN):
    the written profile takes the long calls' speed, then the server's, and with none at all
    the probe says so instead of writing NaN (which no tiers file can hold)."""
    from agentloop.errors import ModelError

    nan = float("nan")
    res = {
        "base_latency_s": 0.2,
        "prefill_tps": 30000.0,
        "prefill_ms_per_1k": 0.0,
        "output_tps": nan,
        "output_tps_long": 740.0,
        "output_tps_at_0": nan,
        "tpot_ms_per_1k": 0.0,
        "server_output_tps": None,
    }
    assert measured_profile(res).output_tps == 740.0
    res |= {"output_tps_long": nan, "server_output_tps": 750.0}
    assert measured_profile(res).output_tps == 750.0
    res |= {"server_output_tps": None}
    with pytest.raises(ModelError, match="measured no output speed"):
        measured_profile(res)
