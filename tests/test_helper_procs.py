"""Helpers die with their parent (agentloop.helper_procs): a SIGKILLed parent leaves none running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentloop import helper_procs
from agentloop.analysis import _fastsplit

# the parent: starts a helper that calls die_with(its pid), says the helper's pid, then waits
PARENT = """
import subprocess, sys, time
helper = "from agentloop.helper_procs import die_with; import sys, time; die_with(int(sys.argv[1]));"
helper += " print('up', flush=True); time.sleep(120)"
child = subprocess.Popen([sys.executable, "-c", helper, str(__import__("os").getpid())],
                         stdout=subprocess.PIPE)
assert child.stdout.readline() == b"up\\n"
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True  # dead, waiting for init to reap it
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_helper_dies_when_its_parent_is_killed() -> None:
    with subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE) as parent:
        try:
            assert parent.stdout is not None
            helper = int(parent.stdout.readline())
            assert not _gone(helper, 0.2)  # alive while its parent is
        finally:
            parent.kill()
    assert _gone(helper, 10), "the helper outlived its SIGKILLed parent"
    if not _gone(helper, 0):
        os.kill(helper, signal.SIGKILL)


def test_a_helper_whose_parent_is_gone_already_exits() -> None:
    """die_with names a pid that is not its parent (the parent died before it could ask):
    it exits at once, 1, before its work."""
    helper = "from agentloop.helper_procs import die_with; die_with(1); print('worked')"
    done = subprocess.run([sys.executable, "-c", helper], capture_output=True, timeout=60)
    assert (1, b"") == (done.returncode, done.stdout)


def test_the_split_readers_worker_is_told_its_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cold builder's worker gets this process's pid last on its command line (serve()
    passes it to die_with)."""
    seen: list[list[str]] = []

    class Stop(Exception):
        pass

    def popen(argv: list[str], **_: object) -> None:
        seen.append(argv)
        raise Stop

    monkeypatch.setattr(_fastsplit.subprocess, "Popen", popen)
    with pytest.raises(Stop):
        _fastsplit._start(_fastsplit.Path("t.jsonl"), 10, 64)
    assert str(os.getpid()) == seen[0][-1]


def test_a_helpers_environment_holds_no_secret_and_finds_this_agentloop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PATH, LANG and PYTHONPATH only: a key in the parent's environment is not passed on; the
    folder this agentloop imports from (a checkout here) comes before the parent's PYTHONPATH."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = helper_procs.helper_env()
    assert {"PATH", "LANG", "PYTHONPATH"} == set(env)
    root = str(Path(helper_procs.__file__).parents[1])
    assert [root, "/elsewhere"] == env["PYTHONPATH"].split(os.pathsep)
    code = "import agentloop, sys; print(agentloop.__file__)"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert got.stdout.decode().startswith(root)
