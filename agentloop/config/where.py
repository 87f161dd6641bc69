"""Where a fault is in a YAML file, in its own words: a key's line, a field's name, a key twice.

What the task file loader (:mod:`agentloop.config.tasks`) and the service's run requests
(:mod:`agentloop.service.requests`) say about a pydantic validation error: the line of the key it
names (walking the composed YAML node tree), the field as the file writes it
(``script[0].tool_calls[1].name``), the first problem and how many more; and the one check YAML
itself skips, a key written twice in one mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentloop.errors import TaskFileError


def node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[yaml.Node | None, bool]:
    """Walk the composed YAML tree along a pydantic error location; (node, reached the end)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == part:
                    nxt = v
                    break
            if nxt is None:
                return node, False
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node, False
            node = node.value[part]
        else:
            return node, False
    return node, True


def key_line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Line of the key (or item) that a location names; for a missing key, its parent's line."""
    if not loc:
        return None
    parent, found = node_at(root, loc[:-1])
    if found and isinstance(parent, yaml.MappingNode):
        for k, _ in parent.value:
            if k.value == loc[-1]:
                return int(k.start_mark.line) + 1
    node, _ = node_at(root, loc)
    return int(node.start_mark.line) + 1 if node is not None else None


def field_name(loc: tuple[Any, ...]) -> str:
    """A validation error's location as a task file names it: ``script[0].tool_calls[1].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def problem(exc: ValidationError) -> str:
    """The first problem of a validation error in a task file's words, and how many more."""
    err = exc.errors()[0]
    msg = {"extra_forbidden": "unknown field", "missing": "required field is missing"}.get(
        err["type"], err["msg"]
    )
    more = len(exc.errors()) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return msg


def refuse_twice(node: yaml.Node | None, path: Path, at: str = "") -> None:
    """A key written twice in one mapping is refused naming both lines (YAML keeps the last
    silently: ``name: x`` ... ``name: y`` would run as ``y``)."""
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            refuse_twice(item, path, f"{at}[{i}]")
    if not isinstance(node, yaml.MappingNode):
        return
    first: dict[object, int] = {}
    for k, v in node.value:
        line = int(k.start_mark.line) + 1
        name = f"{at}.{k.value}" if at else str(k.value)
        if isinstance(k, yaml.ScalarNode) and k.value in first:
            raise TaskFileError(
                path,
                f"'{k.value}' is written twice: on line {first[k.value]} and on line {line} "
                "(keep one)",
                line=line,
                field=name,
            )
        if isinstance(k, yaml.ScalarNode):
            first[k.value] = line
        refuse_twice(v, path, name)
