"""Analysis of recorded traces: attribution, critical path, report, what-if re-timing, compare.

The names below are imported on first use, not with the package: a command that needs one
module (``whatif`` of a big trace on its columns) does not pay for all of them.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentloop.analysis.compare import Comparison, compare
    from agentloop.analysis.graph import Graph, build_graph, critical_path, retime
    from agentloop.analysis.report import Report, build_report
    from agentloop.analysis.whatif import Scenario, WhatIf, whatif

_HOME = {
    "Comparison": "compare",
    "compare": "compare",
    "Graph": "graph",
    "build_graph": "graph",
    "critical_path": "graph",
    "retime": "graph",
    "Report": "report",
    "build_report": "report",
    "Scenario": "whatif",
    "WhatIf": "whatif",
    "whatif": "whatif",
}

__all__ = [
    "Comparison",
    "Graph",
    "Report",
    "Scenario",
    "WhatIf",
    "build_graph",
    "build_report",
    "compare",
    "critical_path",
    "retime",
    "whatif",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'agentloop.analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentloop.analysis.{_HOME[name]}"), name)


class _Package(types.ModuleType):
    """This package, keeping ``whatif`` and ``compare`` the functions once their submodules load.

    Importing ``agentloop.analysis.whatif`` binds the submodule as the package's ``whatif``,
    which would hide the lazily served function of the same name (an eager import rebound it to
    the function; a lazy one does not): that binding is left out, so the name stays the function
    and the submodule stays in ``sys.modules`` for ``from agentloop.analysis.whatif import ...``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOME and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
