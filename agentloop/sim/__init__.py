"""The paced OpenAI-compatible simulator: a real HTTP server on loopback for offline runs and tests.

async with SimServer(profile=SpeedProfile(0.3, 20000, 60), script=[...]) as sim:
    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim")
"""

from agentloop.sim.faults import FAULT_KINDS, Fault
from agentloop.sim.replay import script_from_trace
from agentloop.sim.server import SimServer

__all__ = ["FAULT_KINDS", "Fault", "SimServer", "script_from_trace"]
