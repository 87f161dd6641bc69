"""Where .ci/install keeps the venvs of the export tests' real receiver and producer."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def versions() -> dict[str, str]:
    """``.ci/receivers.env`` as a dict: the one place those versions are written."""
    out = {}
    for line in (ROOT / ".ci/receivers.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def venv(name: str, version_key: str) -> Path:
    """The venv ``<cache>/agentloop-ci/<name>-<version>``; missing: say how to make it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentloop-ci"
    path = cache / f"{name}-{versions()[version_key]}"
    if not (path / ".complete").exists():
        raise RuntimeError(f"{path} is missing: run `bash .ci/install` (it makes this venv)")
    return path
