"""agentloop: run agent tasks, trace where their time goes, predict what a faster tier buys."""

__version__ = "0.1.0"
