"""The registry of agentloop's own loopback ports: stale entries swept, writers one at a time."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentloop.loopback import own_ports, ports_dir, registered


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry private to the test."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    made = ports_dir()
    made.mkdir(mode=0o700)
    return made


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.isdigit())


def test_a_registration_sweeps_the_entries_of_processes_gone(folder: Path):
    """An entry whose process has exited is removed by the next registration; a live
    process's entry is kept; the registration's own goes when its block ends."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    (folder / "41001").write_text(gone)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (folder / "41002").write_text(str(live.pid))
        assert own_ports() == {41002}  # the stale one ignored, as before
        assert entries(folder) == ["41001", "41002"]
        with registered(41003):
            assert entries(folder) == ["41002", "41003"]
            assert own_ports() == {41002, 41003}
        assert entries(folder) == ["41002"]
    finally:
        live.kill()
        live.wait()


def test_a_registration_waits_for_the_registrys_lock(folder: Path):
    """While another holds the lock (a sweep, a registration), nothing is written; the entry
    appears once it is released."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    done = threading.Event()

    def register() -> None:
        with registered(41004):
            done.wait(60)

    t = threading.Thread(target=register)
    t.start()
    try:
        time.sleep(0.2)  # the thread had time to write, were it not waiting
        assert "41004" not in entries(folder)
        os.close(fd)  # the lock released
        deadline = time.monotonic() + 60
        while "41004" not in entries(folder):
            assert time.monotonic() < deadline, "never registered"
            time.sleep(0.01)
    finally:
        done.set()
        t.join(60)
    assert entries(folder) == []
