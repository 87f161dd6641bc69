"""The tool wrapper: schemas derived from signatures, argument checking, failures as results."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

import agentloop_tools as tools
import pytest
from agentloop_tools._schema import FunctionTool, parse_docstring

from agentloop.errors import ToolError
from agentloop.protocols import Tool, ToolContext
from agentloop.sandbox.context import RunContext
from agentloop.types import ToolResult


async def sample(
    ctx: ToolContext,
    name: str,
    count: int = 2,
    ratio: float | None = None,
    tags: list[str] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    loud: bool = False,
) -> ToolResult:
    """Do a sample thing.

    More detail that is not the description.

    Args:
        name: who to greet.
        count: how many times,
            continued on a second line.
        ratio: optional ratio.
        tags: labels.
        mode: speed.
        loud: shout.
    """
    return ToolResult(ok=True, output=f"{name}|{count}|{ratio}|{tags}|{mode}|{loud}")


async def broken(ctx: ToolContext) -> ToolResult:
    """Always fails."""
    raise RuntimeError("disk on fire")


async def refusing(ctx: ToolContext) -> ToolResult:
    """Always refuses."""
    raise ToolError("not allowed here")


async def chatty(ctx: ToolContext) -> ToolResult:
    """Returns far too much."""
    return ToolResult(ok=True, output="x" * 50_000)


@pytest.fixture
async def ctx(tmp_path: Path):
    """A run context over an empty workspace, closed after the test."""
    c = RunContext(workspace=tmp_path, settings={"output_cap": 1000})
    yield c
    await c.aclose()


def test_schema_from_signature() -> None:
    """Types, defaults, enums and docstring descriptions become the JSON schema."""
    spec = FunctionTool.wrap(sample).spec
    assert spec.name == "sample"
    assert spec.description == "Do a sample thing."
    props = spec.parameters["properties"]
    assert spec.parameters["required"] == ["name"]
    assert spec.parameters["additionalProperties"] is False
    assert props["name"] == {"type": "string", "description": "who to greet."}
    assert props["count"] == {
        "type": "integer",
        "default": 2,
        "description": "how many times, continued on a second line.",
    }
    assert props["ratio"] == {"type": "number", "description": "optional ratio."}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "labels."}
    assert props["mode"] == {
        "enum": ["fast", "slow"],
        "type": "string",
        "default": "fast",
        "description": "speed.",
    }
    assert props["loud"]["type"] == "boolean"


def test_parse_docstring_without_args() -> None:
    """A docstring with no Args section gives its first paragraph and no parameters."""
    assert parse_docstring("Line one\n  wraps.\n\nMore.") == ("Line one wraps.", {})


async def test_good_arguments_are_coerced(ctx: RunContext) -> None:
    """Numeric strings and integral floats are coerced; omitted arguments take defaults."""
    tool = FunctionTool.wrap(sample)
    r = await tool(ctx, {"name": "ann", "count": "3", "ratio": 2, "tags": ["a"], "loud": "true"})
    assert r == ToolResult(ok=True, output="ann|3|2.0|['a']|fast|True")
    r = await tool(ctx, {"name": "bo", "count": 4.0, "ratio": None})
    assert r.output == "bo|4|None|None|fast|False"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({}, "missing required argument 'name'"),
        ({"name": 5}, "argument 'name' must be a string; got integer 5"),
        ({"name": "a", "count": "many"}, "argument 'count' must be an integer"),
        ({"name": "a", "count": 1.5}, "argument 'count' must be an integer"),
        ({"name": "a", "count": True}, "argument 'count' must be an integer"),
        ({"name": "a", "tags": "x"}, "argument 'tags' must be an array"),
        ({"name": "a", "tags": [1]}, "argument 'tags[0]' must be a string"),
        ({"name": "a", "mode": "medium"}, "argument 'mode' must be one of 'fast', 'slow'"),
        ({"name": "a", "colour": "red"}, "unknown argument 'colour'"),
        ({"name": None}, "argument 'name' must not be null"),
        ("not json", "arguments are not valid JSON"),
        ([1, 2], "arguments must be a JSON object"),
    ],
)
async def test_bad_arguments_name_the_argument(ctx: RunContext, args: object, needle: str) -> None:
    """Each kind of bad argument gives ok=False with a message naming it."""
    r = await FunctionTool.wrap(sample)(ctx, args)  # type: ignore[arg-type]
    assert r.ok is False
    assert needle in r.output


async def test_exceptions_become_results(ctx: RunContext) -> None:
    """A tool that raises gives ok=False with the error message, never an exception."""
    r = await FunctionTool.wrap(broken)(ctx, {})
    assert r == ToolResult(ok=False, output="Error: broken failed: RuntimeError: disk on fire")
    r = await FunctionTool.wrap(refusing)(ctx, {})
    assert r == ToolResult(ok=False, output="Error: not allowed here")


async def test_wrapper_caps_output(ctx: RunContext) -> None:
    """Output beyond the context's cap is cut by the wrapper, which says so."""
    r = await FunctionTool.wrap(chatty)(ctx, {})
    assert len(r.output) <= 1000
    assert "output capped at 1,000 chars" in r.output


def test_registry_meets_the_protocol() -> None:
    """Every registered tool meets the Tool protocol and its name matches its spec."""
    reg = tools.registry()
    assert {
        "read_file",
        "list_files",
        "search",
        "write_file",
        "edit_file",
        "apply_patch",
        "run",
        "run_tests",
        "browser_open",
        "browser_text",
        "browser_snapshot",
        "browser_click",
        "browser_fill",
        "browser_press",
        "browser_wait_for_text",
        "browser_screenshot",
        "think",
    } == set(reg)
    for name, tool in reg.items():
        assert isinstance(tool, Tool)
        assert tool.spec.name == name
        assert tool.spec.description


def test_importing_tools_does_not_import_playwright() -> None:
    """Playwright stays unimported until a browser tool runs (it is only imported lazily)."""
    import subprocess

    code = "import sys, tools; tools.registry(); print('playwright' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        check=True,
    )
    assert out.stdout.strip() == "False"


async def test_think_acknowledges(ctx: RunContext) -> None:
    """think returns ok with a short acknowledgement and changes nothing."""
    r = await tools.registry()["think"](ctx, {"thought": "the bug is in parse, I think"})
    assert r == ToolResult(ok=True, output="Noted (7 words).", data={"chars": 28})
    assert os.listdir(ctx.workspace) == []
