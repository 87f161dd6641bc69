"""The import layers of agentloop, checked from the source: no loop between folders, ever.

Every import statement of every module (top level and inside functions alike) is read with
:mod:`ast`. A *unit* is a folder of ``agentloop/`` or a module at its root; the package's own
``__init__`` (the public face) may import anything. :data:`LAYERS` lists the units from the top
down: a unit may import units of the layers below its own, never above, never beside it. A unit
not listed fails the test, so a new folder takes a place in the order when it is made.
``docs/design.md`` ("Layout") shows the same order.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentloop"

LAYERS: list[set[str]] = [
    {"__main__"},  # `python -m agentloop`: the command line run as a module
    {"cli"},  # the command line: parses arguments, maps errors to exit codes
    {"commands"},  # one subcommand a module
    {"service"},  # agentloop as an HTTP service
    {"suite"},  # many runs, concurrently, and their report
    {"handle", "replay", "testing"},  # front doors over the composition root
    {"api"},  # the embedding API: open a task, resolve its tier, plan a run, run it
    {"wiring"},  # the composition root: config, clients, set-up and execution of one run
    {"export"},  # Perfetto, OTLP, HTML
    {"analysis"},  # reading recorded traces: attribution, critical path, what-if, compare
    {"loop"},  # the agent loop
    {"clients", "sandbox", "sim"},  # the model's side, the commands' side, the simulator
    {"config"},  # untrusted files in, typed values out (a tier summarised as the trace writes it)
    {"trace"},  # the trace format: typed records written and read
    {"model"},  # the facts of a model call: speed, timing, tokens, prices, local servers
    {"log", "loopback", "protocols"},
    {"errors", "events", "helper_procs", "redact", "script", "_version"},
    {"types"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module imported) for each agentloop module ``path`` imports."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.append((node.lineno, sub if sub in modules else node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return [(line, m) for line, m in out if m.split(".")[0] == "agentloop"]


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package's __init__


def test_every_unit_has_a_layer() -> None:
    """A new folder or root module is given its place in the order when it is made."""
    layered = set().union(*LAYERS)
    units = {_unit(m) for m in _modules()} - {None}
    assert units - layered == set(), f"add to LAYERS in {__file__}"
    assert layered - units == set(), "LAYERS names a unit that no longer exists"


def test_imports_go_down_the_layers_only() -> None:
    """No unit imports one above it or beside it: the folder graph has no loop."""
    rank = {u: i for i, layer in enumerate(LAYERS) for u in layer}
    modules = _modules()
    wrong = []
    for name, path in sorted(modules.items()):
        here = _unit(name)
        if here is None:
            continue
        for line, target in _imports(path, modules):
            there = _unit(target)
            if there is None or there == here:
                continue
            if rank[there] <= rank[here]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {here} imports {target}")
    assert wrong == []


def test_tools_reach_the_sandbox_through_its_one_door() -> None:
    """``tools/`` imports ``agentloop.sandbox`` itself, never a module inside it."""
    modules = _modules()
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for path in sorted((ROOT / "tools").glob("*.py"))
        for line, target in _imports(path, modules)
        if target.startswith("agentloop.sandbox.")
    ]
    assert wrong == []


def test_the_check_sees_a_wrong_import(tmp_path: Path) -> None:
    """The walk finds an upward import (so a passing test means something)."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from agentloop.commands.run import main\n")
    found = _imports(bad, _modules())
    assert found == [(2, "agentloop.commands.run")]
    assert _unit(found[0][1]) == "commands"


def test_the_design_names_every_module_with_its_first_line() -> None:
    """docs/design.md's layout map is the tree as it is (rewrite it with the script's
    ``--write-design`` after adding, moving or re-describing a module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "layout_figures", ROOT / "tests" / "benchmarks" / "layout_figures.py"
    )
    assert spec is not None and spec.loader is not None
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    assert figures.design_map() == figures.layout_map()
