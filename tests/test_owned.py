"""Folders a run owns: marked with their owner process, swept once it is gone, never before."""

from __future__ import annotations

import os
from pathlib import Path

from agentloop.sandbox import owned


def test_the_sweep_takes_what_a_gone_process_owned_and_nothing_else(tmp_path: Path) -> None:
    """A folder whose mark names a process that is gone (a pid with another start time) goes
    with its mark; a live owner's folder and a disowned one stay."""
    root = tmp_path / "agentloop-work"
    mine = owned.make_owned("run-", root)
    kept = owned.owned_folder("kept-", root)
    owned.disown(kept)  # the user's now
    gone = owned.owned_folder("run-", root)
    (gone / "file").write_text("left by a killed run")
    mark = gone.with_name(gone.name + owned.OWNER_SUFFIX)
    mark.write_text(f"{os.getpid()} not-this-process\n")
    assert [gone] == owned.sweep(root)
    assert not gone.exists() and not mark.exists()
    assert mine.is_dir() and kept.is_dir()
    owned.remove(mine)
    assert [kept.name] == sorted(p.name for p in root.iterdir())


def test_an_owned_folder_is_private_and_made_where_asked(tmp_path: Path) -> None:
    """0700, in the folder asked for, its mark naming this process."""
    made = owned.owned_folder("x.tests-", tmp_path)
    assert tmp_path == made.parent and made.name.startswith("x.tests-")
    assert 0o700 == made.stat().st_mode & 0o777
    pid, _ = made.with_name(made.name + owned.OWNER_SUFFIX).read_text().split()
    assert os.getpid() == int(pid)
