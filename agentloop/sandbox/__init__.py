"""Where and how a run's commands execute: workspace, jail, task venv, process runner, verdict.

This package's one door for code outside agentloop (``tools/``): a tool runs a command in the
run's jail with :func:`run_command` and the success check's tests in a verdict jail with
:func:`verdict_jail`, and keeps a process for the run (an MCP server) with :func:`start_piped`; everything else here is the runner's and the workspace's business.
"""

from agentloop.sandbox.proc import Outcome, Piped, start_piped
from agentloop.sandbox.proc import run as run_command
from agentloop.sandbox.verdict import verdict_jail

__all__ = ["Outcome", "Piped", "run_command", "start_piped", "verdict_jail"]
