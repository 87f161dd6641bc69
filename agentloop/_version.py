"""agentloop's version: one owner, read by the package, the CLI, trace headers and exports."""

__version__ = "0.1.0"
