"""agentloop's built-in tools: files, shell and tests, browser, think; ``registry()`` lists them.

Each tool is a plain typed async function (first parameter: the run's ToolContext); the JSON
schema the model sees comes from its signature and docstring (see ``tools._schema``). Importing
this package does no work; Playwright is imported only when a browser tool first runs.
"""

from __future__ import annotations

from agentloop_tools._schema import FunctionTool
from agentloop_tools.browser import (
    browser_click,
    browser_fill,
    browser_open,
    browser_press,
    browser_screenshot,
    browser_snapshot,
    browser_text,
    browser_wait_for_text,
)
from agentloop_tools.files import edit_file, read_file, write_file
from agentloop_tools.find import list_files, search
from agentloop_tools.patch import apply_patch
from agentloop_tools.shell import run, run_tests
from agentloop_tools.think import think

from agentloop.protocols import Tool

FUNCTIONS = (
    read_file,
    list_files,
    search,
    write_file,
    edit_file,
    apply_patch,
    run,
    run_tests,
    browser_open,
    browser_text,
    browser_snapshot,
    browser_click,
    browser_fill,
    browser_press,
    browser_wait_for_text,
    browser_screenshot,
    think,
)

__all__ = ["FUNCTIONS", "FunctionTool", "registry"]


def registry() -> dict[str, Tool]:
    """Every built-in tool by name, each wrapped to meet the Tool protocol."""
    return {fn.__name__: FunctionTool.wrap(fn) for fn in FUNCTIONS}
