"""A suite's one simulator: a process of its own, one SDK client, a route and a pool per run.

Every simulated run of a suite takes a route on one simulator (:mod:`agentloop.sim.child`)
instead of starting a server of its own: a thousand concurrent runs share one listening socket
and one write budget. Each run's client is a copy of one SDK client (a new ``AsyncOpenAI``
loads the TLS trust store, ~0.1 s of blocked event loop; a copy 0.5 ms) on a connection pool of
the run's own (httpcore scans every connection of a pool for each request and each response's
end, so one pool for a thousand runs costs O(runs) per event), all pools on one TLS context. A
run of the first wave connects, then waits at the suite's start gate
(:mod:`agentloop.suite.gate`) before its client is handed over, so the run's trace and clock
start after the gate. A run reaches all this only through :attr:`agentloop.api.SuiteScope.models`,
which :meth:`SharedSim.models_for` makes for it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from agentloop.api import ModelOpener
from agentloop.config.tiers import Tier
from agentloop.errors import SimulatorError
from agentloop.protocols import ModelClient
from agentloop.script import ScriptTurn
from agentloop.suite.gate import StartGate, Ticket

if TYPE_CHECKING:
    from agentloop.sim.child import SimProcess

KEEPALIVE_S = 600.0  # a run's idle connection to the suite's simulator is kept this long


class SharedSim:
    """The suite's simulator process, the SDK client every run's client copies, the pools'
    TLS context, and the start gate (``None``: no run waits)."""

    def __init__(self, sim: SimProcess, gate: StartGate | None) -> None:
        import httpx2
        import openai

        self.sim, self.gate = sim, gate
        # one TLS context for every pool: making one loads the trust store (~0.2 s of CPU)
        self._tls = httpx2.create_ssl_context()
        self._http = httpx2.AsyncClient(verify=self._tls)
        self.sdk = openai.AsyncOpenAI(
            base_url=sim.base_url, api_key="sim", max_retries=0, http_client=self._http
        )
        # a run connected before the gate may wait there through the whole wave's set-up
        self._limits = httpx2.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_S
        )

    def models_for(self, ticket: Ticket | None) -> ModelOpener:
        """How one run opens its model client here; ``ticket``: its place at the gate."""
        return functools.partial(self.client, ticket=ticket)

    @contextlib.asynccontextmanager
    async def client(
        self, tier: Tier, script: list[ScriptTurn] | None, *, ticket: Ticket | None = None
    ) -> AsyncIterator[ModelClient]:
        """A run's client on a route of its own, past the gate when the run holds a ticket."""
        import httpx2

        from agentloop.clients.openai_client import OpenAIClient

        assert tier.profile is not None  # the suite gives a route only to a profiled tier
        async with (
            self.sim.route(tier.profile, script or None) as route,
            httpx2.AsyncClient(verify=self._tls, limits=self._limits) as own,
        ):
            sdk = self.sdk.with_options(base_url=route.base_url, http_client=own)
            client = OpenAIClient(tier, client=sdk)
            try:
                if self.gate is not None and ticket is not None:
                    await self._hold(ticket, own, route.base_url)
                yield client
            finally:
                await client.aclose()

    async def _hold(self, ticket: Ticket, own: Any, base_url: str) -> None:
        assert self.gate is not None
        if self.gate.will_hold(ticket):
            # connected now, so that a thousand runs do not connect as the gate opens
            import httpx2

            try:
                (await own.get(f"{base_url}/models")).raise_for_status()
            except httpx2.HTTPError as exc:
                raise SimulatorError(
                    f"the suite's simulator did not answer GET {base_url}/models: {exc}"
                ) from exc
        await self.gate.wait(ticket)

    async def aclose(self) -> None:
        await self.sdk.close()


def shares(tier: Tier) -> bool:
    """Whether a run at ``tier`` takes a route on the suite's simulator."""
    return tier.simulated and tier.profile is not None


@contextlib.asynccontextmanager
async def shared_simulator(
    tiers: Sequence[Tier], gate: StartGate | None = None
) -> AsyncIterator[SharedSim | None]:
    """The suite's one simulator for runs at ``tiers`` (``None`` when none of them shares one:
    :func:`shares`); ``gate`` holds the first wave, each run connected, until it is set up."""
    from agentloop.sim import server
    from agentloop.sim.child import SimProcess

    profiles = [t.profile for t in tiers if shares(t) and t.profile is not None]
    if not profiles:
        yield None
        return
    # each route brings its own profile
    async with SimProcess(profiles[0], server.SUITE_WRITE_BUDGET) as sim:
        shared = SharedSim(sim, gate)
        try:
            yield shared
        finally:
            await shared.aclose()
