"""Task environments: a task's installs land in its own venv, never in agentloop's, and back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from agentloop import run_task
from agentloop.cli import main
from agentloop.config.tasks import Task, load_task
from agentloop.sandbox import taskenv, workspace
from agentloop.sandbox.venvcache import (
    cache_root,
    env_key,
    is_install_command,
    prune,
    requirements_of,
)
from agentloop.trace.reader import load_trace
from tests.conftest import INSTANT_TOML, ROOT

PKG = "agentloop_probe_pkg"


def _tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel of one module, built by hand (no build backend, no index needed)."""
    wheel = folder / f"{PKG}-1.0-py3-none-any.whl"
    info = f"{PKG}-1.0.dist-info"
    files = {
        f"{PKG}.py": "MARK = 'installed into the task venv'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(name, text)
    return wheel


def _freeze() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"], check=True, capture_output=True, text=True
    ).stdout
    return sorted(out.splitlines())


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Task venvs in a fresh folder (uv's own package cache stays where it is, so it is fast)."""
    import uv

    uv_cache = subprocess.run(
        [uv.find_uv_bin(), "cache", "dir"], check=True, capture_output=True, text=True
    ).stdout.strip()
    monkeypatch.setenv("UV_CACHE_DIR", uv_cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.slow
async def test_setup_pip_install_lands_in_the_task_venv_not_agentloops(
    tmp_path: Path, own_cache: Path
) -> None:
    """`setup: pip install X` installs X for the task's commands; agentloop's pip freeze is unchanged."""
    (tmp_path / "ws").mkdir()
    wheel = _tiny_wheel(tmp_path / "ws")  # in the workspace: the jail's /tmp is private
    task = tmp_path / "task.yaml"
    check = (
        f"python -c 'import {PKG}; print({PKG}.MARK)' "
        "&& ! python -c 'import pytest_asyncio' 2>/dev/null "
        "&& python -c 'import sys; print(sys.prefix)' && pytest --version"
    )
    task.write_text(f"""\
name: own-env
prompt: nothing to do
workspace: ws
setup: ["pip install -q --no-index ./{wheel.name}"]
tools: [run]
success: {{command: "{check}"}}
script:
  - tool_calls:
      - {{name: run, arguments: {{command: "python -c 'import sys; print(sys.prefix)'; command -v pip"}}}}
  - text: done
""")
    before = _freeze()
    result = await run_task(task, tier="sim-ultrafast", trace_dir=tmp_path / "traces")
    after = _freeze()
    assert (True, "ok") == (result.success, result.status), result.success_detail
    assert before == after
    assert [] == [line for line in after if PKG in line]
    venv = own_cache / "agentloop" / "taskenvs" / env_key(load_task(task))
    assert (venv / "lib").is_dir()
    assert [f"{PKG}.py"] == [p.name for p in venv.rglob(f"{PKG}.py")]
    [tool] = load_trace(result.trace_path or "").of_kind("tool")
    shown = tool.attrs["output"].splitlines()
    assert [str(venv), str(venv / "bin" / "pip")] == [li for li in shown if li.startswith("/")]


def test_a_task_venv_always_has_pytest_and_its_declared_requirements(tmp_path: Path) -> None:
    """requirements: adds to pytest; the cache key changes with what the task installs."""
    a = tmp_path / "a.yaml"
    a.write_text("name: a\nprompt: p\nrequirements: [pytest, 'tomli>=2']\n")
    b = tmp_path / "b.yaml"
    b.write_text("name: b\nprompt: p\nrequirements: ['tomli>=2']\nsetup: [pip install x]\n")
    ta, tb = load_task(a), load_task(b)
    assert ("pytest", "tomli>=2") == requirements_of(ta) == requirements_of(tb)
    assert env_key(ta) != env_key(tb)
    assert cache_root().name == "taskenvs"


@pytest.mark.slow
@pytest.mark.parametrize(
    "trace", sorted((ROOT / "traces" / "reference").glob("*.jsonl")), ids=lambda p: p.stem
)
def test_reference_replays_do_not_diverge_with_the_dev_extras_installed(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replaying a shipped reference run re-runs its tools in the task venv: no divergence.
    (On sim-instant: what is compared is the tools' results, not the model's speed.)"""
    (tmp_path / "tiers.toml").write_text(INSTANT_TOML)
    tiers = ["--tiers", str(tmp_path / "tiers.toml"), "--tier", "sim-instant"]
    code = main(["replay", str(trace), *tiers, "-q", "--trace-dir", str(tmp_path / "traces")])
    out = capsys.readouterr().out
    assert 0 == code, out
    assert "diverged  no: every tool result matched the recording" in out


INSTALLS = (
    "pip install x",
    "pip3 install -r requirements.txt",
    "python -m pip install .",
    "cd pkg && pip install -e .",
    "uv pip install 'tomli>=2'",
    '"$VIRTUAL_ENV/bin/pip" --quiet install x',
    "pip3.11 install x > install.log 2>&1",
    "uv pip sync requirements.lock",
    "echo 'an unbalanced quote",
)
NOT_INSTALLS = (
    "python -m service.main > server.log 2>&1 &",
    "echo $(date +%s) > started.txt",
    "pip freeze > before.txt",
    "pip list && install -d out",
    "bash edge/start.sh",
    "cp /home/someone/fixtures/orders.json data/",
)


def _task(*setup: str, workspace: Path | None = None) -> Task:
    return Task(name="t", prompt="p", system="s", workspace=workspace, setup=setup)


def test_only_the_install_commands_of_a_setup_key_its_venv() -> None:
    """Setup lines that vary per run (a token, a date, a path) share one key; an install does not."""
    assert (True,) * len(INSTALLS) == tuple(map(is_install_command, INSTALLS))
    assert (False,) * len(NOT_INSTALLS) == tuple(map(is_install_command, NOT_INSTALLS))
    plain = env_key(_task())
    varying = {
        env_key(_task(f"sleep 300.{uuid.uuid4().hex} &", f"echo {uuid.uuid4().hex} > run.txt"))
        for _ in range(3)
    }
    assert {plain} == varying
    assert plain != env_key(_task("pip install -q x"))
    assert env_key(_task("pip install -q x")) == env_key(_task("date > t", "pip install -q x"))


async def test_setup_lines_that_vary_per_run_share_one_task_venv(
    tmp_path: Path, own_cache: Path
) -> None:
    """Two runs whose setup differs but for its install command get one venv, built once from the
    install command only: a non-install line never ran with the venv writable."""
    ws = tmp_path / "ws"
    ws.mkdir()
    wheel = _tiny_wheel(ws)
    install = f"pip install -q --no-index ./{wheel.name}"

    def task(token: str) -> Task:
        return _task(f'touch "$VIRTUAL_ENV/ran-{token}" || true', install, workspace=ws)

    envs = [
        await taskenv.ensure(task(uuid.uuid4().hex), setup=workspace.build_setup) for _ in range(2)
    ]
    for env in envs:
        assert env.hold is not None
        env.hold.release()
    root = cache_root()
    assert [envs[0].venv] == [p for p in root.iterdir() if p.is_dir()] == [envs[1].venv]
    assert [f"{PKG}.py"] == [p.name for p in envs[0].venv.rglob(f"{PKG}.py")]
    assert [] == list(envs[0].venv.glob("ran-*"))


def _fake_venv(root: Path, name: str, unused_s: float) -> Path:
    """A venv folder and ready mark last used ``unused_s`` ago (its contents do not matter)."""
    venv = root / name
    venv.mkdir()
    mark = root / f"{name}.ready"
    mark.write_text("digest\npytest\n")
    then = time.time() - unused_s
    for path in (venv, mark):
        os.utime(path, (then, then))
    return venv


async def test_pruning_removes_old_task_venvs_and_keeps_the_one_in_use(own_cache: Path) -> None:
    """Past the count or the age bound old task venvs go; one a live run holds stays, however
    old, until the run lets it go."""
    live = await taskenv.ensure(_task())  # as a run holds its venv
    root = cache_root()
    month = 30 * 86400.0
    old = [_fake_venv(root, f"{i:016x}", month) for i in range(2)]
    recent = [_fake_venv(root, f"{i + 10:016x}", 60.0 * (i + 1)) for i in range(3)]
    use = live.venv.with_name(live.venv.name + ".use")
    os.utime(use, (time.time() - month, time.time() - month))  # held, though unused a month

    removed = await asyncio.to_thread(prune, root, keep=2)
    assert sorted([*old, recent[2]]) == sorted(removed)
    assert [] == [p for p in removed if p.exists()]
    assert (live.venv / "bin" / "python").exists() and use.exists()

    with taskenv.activate(live):  # the run ends with its activate block: the hold is let go
        pass
    assert [live.venv] == await asyncio.to_thread(prune, root, keep=2)
    assert sorted(recent[:2]) == sorted(p for p in root.iterdir() if p.is_dir())


async def test_runs_waiting_for_a_first_build_leave_the_thread_pool_free(own_cache: Path) -> None:
    """More runs of one task than the loop has pool threads, all on a cold cache, each get the
    venv: the ones waiting for the first run's build hold no thread (they once held every one,
    in flock, and the build, which needs the pool, never finished)."""
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(2)
    loop.set_default_executor(pool)
    envs = await asyncio.gather(*(taskenv.ensure(_task()) for _ in range(6)))
    for env in envs:
        assert env.hold is not None
        env.hold.release()
    assert {envs[0].venv} == {env.venv for env in envs}
    assert (envs[0].venv / "bin" / "python").exists()
