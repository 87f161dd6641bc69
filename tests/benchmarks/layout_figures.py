"""The shape of the source, printed: root modules, module and function sizes, and the layout map.

    python tests/benchmarks/layout_figures.py              # the figures (issue 22's evidence)
    python tests/benchmarks/layout_figures.py --map        # the layout map of docs/design.md
    python tests/benchmarks/layout_figures.py --write-design  # rewrite that map in place

Run it on any commit (``git stash``/``git checkout``) to compare before and after: it reads only
the files of ``agentloop/``. A function's size is its lines from ``def`` to its last statement,
docstring included; nested functions count inside their parent and on their own.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agentloop"
DESIGN = ROOT / "docs" / "design.md"
MAP_START = "```\nagentloop/\n"
MODULE_LIMIT = 400
FUNCTION_LIMIT = 60
COLUMN = 26


def first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.split("\n")[0].replace("``", "`")


def layout_map() -> str:
    """The tree of ``agentloop/``, each module with its own first line, wrapped at 100."""
    out = ["agentloop/"]

    def line(name: str, indent: str, text: str) -> None:
        head = f"{indent}{name:<{COLUMN - len(indent)}} "
        wrapped = textwrap.wrap(text, 100 - len(head)) or [""]
        out.append((head + wrapped[0]).rstrip())
        out.extend(" " * len(head) + more for more in wrapped[1:])

    def walk(folder: Path, indent: str) -> None:
        entries = sorted(folder.iterdir())
        for f in entries:
            if f.suffix == ".py" and f.name != "__init__.py":
                line(f.name, indent, first_line(f))
        for f in entries:
            if f.suffix == ".toml":
                line(f.name, indent, "the built-in tiers (package data: the one copy)")
        for d in entries:
            if d.is_dir() and (d / "__init__.py").exists():
                line(d.name + "/", indent, first_line(d / "__init__.py"))
                walk(d, indent + "  ")

    walk(PACKAGE, "  ")
    out.append(
        f"{'tools/':<{COLUMN}} the built-in tools, installed as `agentloop_tools`; "
        "registry() -> {name: Tool}"
    )
    out.append(
        f"{'tasks/':<{COLUMN}} the shipped tasks and their workspaces, as `agentloop_tasks` "
        "(data only)"
    )
    return "\n".join(out) + "\n"


def design_map() -> str:
    """The layout map as ``docs/design.md`` has it now."""
    text = DESIGN.read_text()
    start = text.index(MAP_START) + 4
    return text[start : text.index("```", start)]


def write_design() -> None:
    text = DESIGN.read_text()
    start = text.index(MAP_START) + 4
    end = text.index("```", start)
    DESIGN.write_text(text[:start] + layout_map() + text[end:])


def function_sizes() -> list[tuple[int, str]]:
    sizes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                sizes.append((n, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(sizes, reverse=True)


def figures() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    lines = {p: len(p.read_text().splitlines()) for p in modules}
    root = [p for p in modules if p.parent == PACKAGE and p.name != "__init__.py"]
    big = sorted(((n, p) for p, n in lines.items() if n > MODULE_LIMIT), reverse=True)
    funcs = function_sizes()
    long = [f for f in funcs if f[0] > FUNCTION_LIMIT]
    print(f"source lines (agentloop/):        {sum(lines.values())}")
    print(f"modules:                          {len(modules)}")
    print(f"root modules (no __init__):       {len(root)}: {' '.join(p.stem for p in root)}")
    print(f"folders:                          {len({p.parent for p in modules}) - 1}")
    print(f"modules over {MODULE_LIMIT} lines:           {len(big)}")
    for n, p in big:
        print(f"  {n:5d} {p.relative_to(ROOT)}")
    print(f"functions over {FUNCTION_LIMIT} lines:          {len(long)}")
    for n, where in long:
        print(f"  {n:5d} {where}")


if __name__ == "__main__":
    if "--map" in sys.argv:
        sys.stdout.write(layout_map())
    elif "--write-design" in sys.argv:
        write_design()
    else:
        figures()
