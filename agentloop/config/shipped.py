"""The tasks and suites shipped with agentloop, found by name: ``agentloop run checkout-timeouts``
and ``agentloop suite hle`` from any folder.

They are the repository's top-level ``tasks/`` folder, installed as the package data of
``agentloop_tasks`` (so a wheel install has them). A shipped task is a ``*.yaml`` file one level
down (``tasks/<group>/<file>.yaml``) whose mapping has ``name`` and ``prompt``; its name is that
``name`` field. A shipped suite is a folder of task files under ``tasks/suites/``; its name is the
folder's.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import yaml

from agentloop.errors import TaskFileError


@dataclass(frozen=True)
class ShippedTask:
    """One shipped task file: its name, group folder, path and one-line description."""

    name: str
    group: str
    path: Path
    description: str


def tasks_root() -> Path | None:
    """The installed ``agentloop_tasks`` folder (the checkout's ``tasks/`` in a dev install)."""
    spec = importlib.util.find_spec("agentloop_tasks")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def shipped_tasks() -> list[ShippedTask]:
    """Every shipped task, by group then name (blocking file reads: a few small files)."""
    root = tasks_root()
    if root is None:
        return []
    found = []
    for path in sorted(root.glob("*/*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue  # a broken file is reported when it is run by path, not in a listing
        if isinstance(data, dict) and "name" in data and "prompt" in data:
            first = " ".join(str(data.get("description") or "").split())
            found.append(ShippedTask(str(data["name"]), path.parent.name, path, first))
    return sorted(found, key=lambda t: (t.group, t.name))


SUITES = "suites"  # tasks/suites/<name>/: the task files `agentloop suite <name>` runs


def shipped_suites() -> dict[str, Path]:
    """Every shipped suite by name: its folder (sorted by name)."""
    root = tasks_root()
    base = root / SUITES if root is not None else None
    if base is None or not base.is_dir():
        return {}
    return {d.name: d for d in sorted(base.iterdir()) if d.is_dir() and any(d.glob("*.yaml"))}


def find_suite_or_task(name: str) -> Path:
    """For ``agentloop suite NAME``: the shipped suite's folder, else the shipped task's file."""
    suites = shipped_suites()
    if name in suites:
        return suites[name]
    if any(t.name == name for t in shipped_tasks()):
        return find_task(name)
    raise TaskFileError(
        name,
        f"no such task file or folder, and no shipped suite or task of that name (shipped "
        f"suites: {', '.join(suites) or 'none installed'}; `agentloop tasks` lists the tasks)",
    )


def looks_like_name(text: str) -> bool:
    """A bare task name, not a path: no folder separator and no YAML suffix."""
    return "/" not in text and not text.endswith((".yaml", ".yml"))


def find_task(name: str) -> Path:
    """The file of the shipped task called ``name``; unknown names list the shipped ones."""
    tasks = shipped_tasks()
    for t in tasks:
        if t.name == name:
            return t.path
    known = ", ".join(t.name for t in tasks) or "none installed"
    raise TaskFileError(
        name,
        f"no such task file, and no shipped task of that name "
        f"(shipped tasks: {known}; `agentloop tasks` lists them)",
    )
