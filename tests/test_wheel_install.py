"""The built wheel in a fresh venv, used from a folder that is not the checkout: CLI and embedding.

The wheel is built from a copy of the package sources (so the checkout gets no build/ folder)
with uv, and installed with uv into a venv made without the machine's site-packages; uv's cache
makes the dependency install take seconds after the first run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest
import uv

from agentloop._version import __version__
from agentloop.trace.reader import load_trace
from tests.conftest import INSTANT_TOML, ROOT

pytestmark = [pytest.mark.external, pytest.mark.slow]

SOURCES = ("agentloop", "tools", "tasks", "pyproject.toml", "README.md")

APP_TOOLS = '''"""The app's own tools package: the name agentloop must not take."""

def registry():
    return "the app's registry"
'''

APP_MAIN = '''"""An app embedding agentloop next to its own `tools` package."""
import asyncio
import json

import tools

import agentloop


async def main():
    handle = await agentloop.start_run("checkout-timeouts", tier="sim-instant",
                                       trace_dir="traces")
    kinds = [e.kind async for e in handle.events()]
    result = await handle
    print(json.dumps({"tools": tools.registry(), "status": result.status,
                      "success": result.success, "first": kinds[0], "last": kinds[-1],
                      "run_id_ok": result.run_id == handle.run_id,
                      "trace": result.trace_path}))


asyncio.run(main())
'''


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv (no system site-packages) with the wheel built from this checkout."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=skip)
        else:
            shutil.copy(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    uv_bin = uv.find_uv_bin()
    built = _run(
        [uv_bin, "build", "--quiet", "--wheel", "--out-dir", str(base / "dist"), str(src)],
        base,
        env,
    )
    assert 0 == built.returncode, built.stderr
    [wheel] = (base / "dist").glob("agentloop-*.whl")
    venv = base / "venv"
    for argv in (
        [uv_bin, "venv", "--quiet", "--python", sys.executable, str(venv)],
        [uv_bin, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)],
    ):
        done = _run(argv, base, env, timeout=600)
        assert 0 == done.returncode, done.stderr
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", os.defpath)])
    return venv, env


def test_the_wheel_carries_the_builtin_tiers_and_the_shipped_tasks(
    installed: tuple[Path, dict[str, str]],
) -> None:
    """The wheel ships tiers.toml and every task file with its workspace, and no bytecode."""
    wheel = next((installed[0].parent / "dist").glob("agentloop-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "agentloop/config/tiers.toml" in names
    assert "agentloop/py.typed" in names  # the package's type hints are public (issue 9)
    assert "agentloop_tasks/incident/checkout-timeouts.yaml" in names
    assert "agentloop_tasks/incident/checkout-timeouts/tests/test_config.py" in names
    assert [] == [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert [] == [n for n in names if n.split("/")[0] == "tools"]
    subpackages = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "agentloop").rglob("__init__.py")
        if "__pycache__" not in p.parts
    )
    assert subpackages == sorted(
        n for n in names if n.startswith("agentloop/") and n.endswith("/__init__.py")
    )


def test_the_installed_cli_runs_the_demo_by_name_from_another_folder(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """From a folder that is not the checkout: --version, tasks, tiers, and the demo by name."""
    venv, env = installed
    exe = str(venv / "bin" / "agentloop")
    version = _run([exe, "--version"], tmp_path, env)
    assert f"agentloop {__version__}" == version.stdout.strip()
    listed = orjson.loads(_run([exe, "tasks", "--json"], tmp_path, env).stdout)
    demo = next(t for t in listed if t["name"] == "checkout-timeouts")
    assert str(venv) in demo["path"]
    tiers = {
        t["name"]: t["source"]
        for t in orjson.loads(_run([exe, "tiers", "--json"], tmp_path, env).stdout)
    }
    assert "built-in" == tiers["sim-standard"]
    (tmp_path / "tiers.toml").write_text(INSTANT_TOML)  # and the folder's own tiers are read
    run = _run([exe, "run", "checkout-timeouts", "--tier", "sim-instant", "-q"], tmp_path, env)
    assert 0 == run.returncode, run.stdout + run.stderr
    assert "check    passed" in run.stdout
    assert 1 == len(list((tmp_path / "traces").glob("*.jsonl")))


def test_the_installed_cli_runs_the_mcp_playbook_from_its_own_venv(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """bad-config's MCP servers (mcp-server-git, mcp-server-time) are not agentloop's
    dependencies: the wheel's venv has neither, the task's requirements: install them into its
    own venv, and the playbook passes its check by name."""
    venv, env = installed
    assert [] == sorted(p.name for p in (venv / "bin").glob("mcp-server-*"))
    exe = str(venv / "bin" / "agentloop")
    (tmp_path / "tiers.toml").write_text(INSTANT_TOML)
    run = _run([exe, "run", "bad-config", "--tier", "sim-instant", "-q"], tmp_path, env, 600)
    assert 0 == run.returncode, run.stdout + run.stderr
    assert "check    passed" in run.stdout
    [trace] = (tmp_path / "traces").glob("*.jsonl")
    servers = load_trace(trace).header["mcp_servers"]
    assert {"git": None, "time": None} == {s["name"]: s["error"] for s in servers}


def test_the_installed_cli_runs_the_shipped_suites_by_name_from_another_folder(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """`agentloop suite hle gdpval`, as the README runs them, from a folder that is not the
    checkout: both shipped suites are found in the installed package and every run passes. On
    the folder's own ./tiers.toml tier (sim-instant): sim-ultrafast plays the HLE questions'
    hidden reasoning for ~10 s a run, which proves nothing here."""
    venv, env = installed
    exe = str(venv / "bin" / "agentloop")
    (tmp_path / "tiers.toml").write_text(INSTANT_TOML)
    argv = [exe, "suite", "hle", "gdpval", "--tier", "sim-instant", "--out", "s", "--json"]
    done = _run(argv, tmp_path, env, timeout=600)
    assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
    runs = orjson.loads(done.stdout)["runs"]
    assert (10, [("ok", True)] * 10) == (
        len(runs),
        [(r["status"], r["success"]) for r in runs],
    )
    assert all(str(venv) in r["source"] for r in runs)
    unknown = _run([exe, "suite", "no-such-suite"], tmp_path, env)
    assert 2 == unknown.returncode
    assert "shipped suites: gdpval, hle" in unknown.stderr


def test_an_app_with_its_own_tools_package_embeds_agentloop(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """An app whose own `tools` package comes first on sys.path runs a task through the handle."""
    venv, env = installed
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text(APP_TOOLS)
    (tmp_path / "app.py").write_text(APP_MAIN)
    (tmp_path / "tiers.toml").write_text(INSTANT_TOML)
    done = _run([str(venv / "bin" / "python"), "app.py"], tmp_path, env)
    assert 0 == done.returncode, done.stderr
    out = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert {
        "tools": "the app's registry",
        "status": "ok",
        "success": True,
        "first": "run_start",
        "last": "run_end",
        "run_id_ok": True,
    } == {k: v for k, v in out.items() if k != "trace"}
    assert (tmp_path / out["trace"]).is_file()
