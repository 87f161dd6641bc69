"""Every model call of a recorded run predicted on every candidate tier: duration and cost.

The per-call rule is :mod:`agentloop.analysis.whatif`'s for one target tier (the tier's profile
gives base, reasoning and decode from the call's own token counts, prefill only for uncached
input, decode at the context-dependent speed; tail, wait, retry and overhead kept), applied per
call with the tier that call is routed to; the price is that tier's
(:func:`agentloop.model.prices.cost_parts`, same tokens on every tier). A call that never
answered (not timed) keeps its recorded duration.

Prompt caching is per model: a call's cached input is its conversation's prefix, cached by its
previous call (the same agent invocation's previous step). When that call is routed to another
tier, the prefix is not in this tier's cache: the call is predicted with no cached input (its
prefill and price paid in full). Measured on fleet-triage: a plan that moved a sub-agent's
second call to another tier lost its 86 cached tokens, 1% of the run's cost. :func:`predict` re-times the graph with a
routing (:class:`agentloop.config.routing.Routing`): the mix what-if; the router
(:mod:`agentloop.analysis.router`) searches over these options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentloop.analysis.agents import Call, calls
from agentloop.analysis.flat import Graph
from agentloop.analysis.graph import gc_paused
from agentloop.analysis.passes import retime_flat
from agentloop.config.routing import CallKey, Routing
from agentloop.config.tiers import no_profile
from agentloop.errors import ConfigError
from agentloop.model.prices import Prices, cost_parts
from agentloop.model.speed import SpeedProfile


@dataclass(frozen=True, slots=True)
class TierModel:
    """A candidate tier: its name, speed profile and prices (None: no prices, costs 0)."""

    name: str
    profile: SpeedProfile
    prices: Prices | None

    @classmethod
    def of(cls, name: str, profile: SpeedProfile | None, prices: Prices | None) -> TierModel:
        if profile is None:
            raise no_profile(name)
        return cls(name, profile, prices)


@dataclass(frozen=True, slots=True)
class Options:
    """Per call (rows in ``calls`` order) and per tier (columns in ``tiers`` order): the call's
    predicted duration (ns) and cost (USD)."""

    graph: Graph
    calls: tuple[Call, ...]
    tiers: tuple[TierModel, ...]
    dur: tuple[tuple[int, ...], ...]  # with the recorded cached input
    cost: tuple[tuple[float, ...], ...]
    prev: tuple[int, ...] = ()  # per call: its conversation's previous call (row), -1 none
    dur_cold: tuple[tuple[int, ...], ...] = ()  # without cached input (the prefix elsewhere)
    cost_cold: tuple[tuple[float, ...], ...] = ()
    succ: tuple[int, ...] = ()  # per call: the call whose cached prefix it made (row), -1 none

    def _cold(self, choice: Sequence[int]) -> list[bool]:
        """Per call: whether its previous call is on another tier (its prefix not cached)."""
        if not self.prev:
            return [False] * len(choice)
        return [p >= 0 and choice[p] != t for p, t in zip(self.prev, choice, strict=True)]

    def durations(self, choice: Sequence[int]) -> list[int]:
        """The graph's leaf durations with call k on tier ``choice[k]``."""
        d = self.graph.durations()
        cold = self._cold(choice)
        for k, (c, row, t) in enumerate(zip(self.calls, self.dur, choice, strict=True)):
            d[c.span] = self.dur_cold[k][t] if cold[k] else row[t]
        return d

    def warm_durations(self, choice: Sequence[int]) -> list[int]:
        """:meth:`durations` as if every call kept its recorded cached input (a lower bound
        on each call's duration: cached input is never slower)."""
        d = self.graph.durations()
        for c, row, t in zip(self.calls, self.dur, choice, strict=True):
            d[c.span] = row[t]
        return d

    def move_saving(self, k: int, t: int, choice: Sequence[int]) -> float:
        """Dollars saved by moving call k alone to tier t: its own cost and that of the call
        whose prefix it caches (which loses or regains the cache)."""
        cur = choice[k]
        p = self.prev[k] if self.prev else -1
        before = self.cost_cold[k][cur] if p >= 0 and choice[p] != cur else self.cost[k][cur]
        after = self.cost_cold[k][t] if p >= 0 and choice[p] != t else self.cost[k][t]
        saved = before - after
        n = self.succ[k] if self.succ else -1
        if n >= 0:
            tn = choice[n]
            was = self.cost_cold[n][tn] if cur != tn else self.cost[n][tn]
            now = self.cost_cold[n][tn] if t != tn else self.cost[n][tn]
            saved += was - now
        return saved

    def end(self, choice: Sequence[int]) -> int:
        """The re-timed run's end-to-end time (ns) with call k on tier ``choice[k]``."""
        g = self.graph
        return retime_flat(g, self.durations(choice))[1] - g.start_ns

    def total_cost(self, choice: Sequence[int]) -> float:
        cold = self._cold(choice)
        return sum(
            self.cost_cold[k][t] if cold[k] else row[t]
            for k, (row, t) in enumerate(zip(self.cost, choice, strict=True))
        )

    def call_cost(self, k: int, choice: Sequence[int]) -> float:
        """Call k's cost under ``choice``."""
        p = self.prev[k] if self.prev else -1
        t = choice[k]
        return self.cost_cold[k][t] if p >= 0 and choice[p] != t else self.cost[k][t]


def options(g: Graph, tiers: Sequence[TierModel]) -> Options:
    """Predict every re-timable call of ``g`` on each of ``tiers``."""
    cs = tuple(calls(g))
    row_of = {c.key: k for k, c in enumerate(cs)}
    prev = tuple(
        row_of.get(CallKey(c.key.agent, c.key.invocation, c.key.step - 1), -1)
        if g.models[c.span].cached_tokens
        else -1
        for c in cs
    )
    succ = [-1] * len(cs)
    for k, p in enumerate(prev):
        if p >= 0:
            succ[p] = k
    with gc_paused():
        warm = [_rows(g, c.span, tiers, g.models[c.span].cached_tokens) for c in cs]
        cold = [
            _rows(g, c.span, tiers, 0) if p >= 0 else w
            for c, p, w in zip(cs, prev, warm, strict=True)
        ]
    return Options(
        g,
        cs,
        tuple(tiers),
        tuple(d for d, _ in warm),
        tuple(c for _, c in warm),
        prev,
        tuple(d for d, _ in cold),
        tuple(c for _, c in cold),
        tuple(succ),
    )


def _rows(
    g: Graph, i: int, tiers: Sequence[TierModel], cached: int
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Model span i's duration (ns) and cost on each tier with ``cached`` input tokens cached."""
    m = g.models[i]
    fixed = g.recorded_dur[i] - m.base - m.reasoning - m.decode
    out = m.reasoning_tokens + m.visible_tokens
    drow, crow = [], []
    for t in tiers:
        if m.timed:
            b, r, d = t.profile.parts(m.input_tokens, m.reasoning_tokens, m.visible_tokens, cached)
            drow.append(fixed + round(b * 1e9) + round(r * 1e9) + round(d * 1e9))
        else:
            drow.append(g.recorded_dur[i])
        parts = (
            cost_parts(t.prices, m.input_tokens, cached, m.reasoning_tokens, out)
            if t.prices is not None
            else {}
        )
        crow.append(sum(parts.values()))
    return tuple(drow), tuple(crow)


def choice_of(o: Options, routing: Routing) -> list[int]:
    """Each call's tier column under ``routing`` (a call it does not name keeps the tier it
    used); ConfigError for a tier that is not among the options."""
    col = {t.name: k for k, t in enumerate(o.tiers)}
    out = []
    for c in o.calls:
        name = routing.tier_for(c.key.agent, c.key.invocation, c.key.step, c.tier)
        if name not in col:
            raise ConfigError(
                f"tier '{name}' (for {c.key.agent} step {c.key.step}) has no profile here"
            )
        out.append(col[name])
    return out


@dataclass(frozen=True, slots=True)
class MixPrediction:
    """A routing's predicted run: end-to-end time, cost, and calls and cost per tier."""

    predicted_ns: int
    cost_usd: float
    calls_per_tier: dict[str, int]
    cost_per_tier: dict[str, float]


def predict(o: Options, choice: Sequence[int]) -> MixPrediction:
    """The run re-timed and priced with call k on tier ``choice[k]``."""
    per: dict[str, int] = {t.name: 0 for t in o.tiers}
    usd: dict[str, float] = {t.name: 0.0 for t in o.tiers}
    for k, t in enumerate(choice):
        name = o.tiers[t].name
        per[name] += 1
        usd[name] += o.call_cost(k, choice)
    return MixPrediction(o.end(choice), sum(usd.values()), per, usd)


def recorded_models(g: Graph) -> list[TierModel]:
    """The tiers the run's header lists that have a profile, as candidates."""
    from agentloop.analysis.agents import recorded_tiers

    return [
        TierModel(t.name, t.profile, t.prices)
        for t in recorded_tiers(g.trace).values()
        if t.profile is not None
    ]


def check_plan(g: Graph, routing: Routing, tiers: set[str], source: object) -> None:
    """ConfigError (exit 2) for a routing that names an agent the run does not have, a tier not
    among ``tiers``, or was computed for another task or another trace."""
    from agentloop.analysis.agents import who

    run = g.trace.run
    if routing.task is not None and routing.task != run.task.name:
        raise ConfigError(
            f"{source}: field 'task': the plan is for task '{routing.task}', this trace is "
            f"'{run.task.name}'"
        )
    if routing.trace is not None and routing.trace != run.run_id:
        raise ConfigError(
            f"{source}: field 'trace': the plan was computed from trace '{routing.trace}', "
            f"this one is '{run.run_id}'"
        )
    agents = {who(s.start_attrs).agent for s in g.spans}
    routing.check(agents, tiers, source)
