"""The codebase's habits, enforced: the public names are pinned, every module imports quietly, and
no two modules import each other (directly or around a loop)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import agentloop
from tests.conftest import ROOT

PUBLIC = [
    "AgentloopError",
    "ConfigError",
    "Limits",
    "ModelError",
    "RunConfig",
    "RunEvent",
    "RunHandle",
    "RunResult",
    "Runner",
    "SpeedProfile",
    "Task",
    "TaskFileError",
    "Tier",
    "Trace",
    "__version__",
    "load_task",
    "load_tiers",
    "load_trace",
    "open_task",
    "resolve_tier",
    "run_task",
    "start_run",
]


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of agentloop and of the tools (installed as agentloop_tools): path, is a
    package."""
    out: dict[str, tuple[Path, bool]] = {}
    for base, pkg in ((ROOT / "agentloop", "agentloop"), (ROOT / "tools", "agentloop_tools")):
        for f in sorted(base.rglob("*.py")):
            parts = [pkg, *f.relative_to(base).with_suffix("").parts]
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def import_graph(mods: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Module -> the modules it imports at import time (module level, TYPE_CHECKING blocks
    included; imports inside functions are deferred and do not count). ``from P import sub``
    needs ``P.sub``; ``from P import name`` needs ``P`` itself."""
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        pkg = name if is_pkg else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            for n in node.body if isinstance(node, ast.If) else [node]:
                if isinstance(n, ast.Import):
                    deps.update(a.name for a in n.names)
                elif isinstance(n, ast.ImportFrom):
                    mod = n.module or ""
                    if n.level:
                        up = pkg.split(".")[: len(pkg.split(".")) - n.level + 1]
                        mod = ".".join([*up, *([n.module] if n.module else [])])
                    deps.update(
                        f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in n.names
                    )
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_public_names_are_pinned() -> None:
    """agentloop.__all__ is exactly the curated list, and each name is there."""
    assert sorted(PUBLIC) == sorted(agentloop.__all__)
    assert [] == [n for n in PUBLIC if not hasattr(agentloop, n)]


def test_no_module_imports_another_in_a_loop() -> None:
    """The module-level import graph of agentloop and its tools has no cycle."""
    assert [] == cycles(import_graph(modules()))


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The checker itself: a three-module loop is reported, a chain is not."""
    assert [["a", "b", "c"]] == cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})


@pytest.mark.slow
def test_every_module_imports_and_importing_does_nothing() -> None:
    """In a fresh interpreter every module imports without printing, warning or starting a
    thread."""
    names = [m for m in modules() if not m.endswith("__main__")]
    code = (
        "import importlib, threading, warnings\n"
        "warnings.simplefilter('error')\n"
        f"for m in {names!r}:\n"
        "    importlib.import_module(m)\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (0, "", "") == (proc.returncode, proc.stdout, proc.stderr)
