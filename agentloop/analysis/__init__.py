"""Analysis of recorded traces: attribution, critical path, report, what-if re-timing, compare."""

from agentloop.analysis.compare import Comparison, compare
from agentloop.analysis.graph import Graph, build_graph, critical_path, retime
from agentloop.analysis.report import Report, build_report
from agentloop.analysis.whatif import Scenario, WhatIf, whatif

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
