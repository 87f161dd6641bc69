"""The router: which tier each model call should use for the cheapest run within a time limit.

Given every call's predicted duration and cost on every candidate tier
(:mod:`agentloop.analysis.mix`), :func:`route` finds a cheap assignment whose re-timed run
(the recorded graph's forward pass, as the what-if) ends within ``limit_ns``.

The search. Start with every call on its fastest tier. Each round runs the forward pass and a
backward pass from the limit (the latest instant every position may reach and the run still
end in time); a call's *slack* is its latest end minus its end. Moving one call to a cheaper
tier that adds at most its slack keeps the run within the limit (the re-timing is a max-plus
network, monotone in every duration). The candidates (per call its cheapest tier that fits its
slack) are taken in order of dollars saved per second added; the longest prefix of them that
still ends within the limit (bisection, one forward pass per probe) is accepted, and the next
round recomputes slack. Every accepted plan was checked by a forward pass, so the result always
meets the limit.

The guarantee. Choosing tiers for calls on a chain within a time budget is a knapsack, so no
fast exact rule exists in general; the router proves a bound instead. In any plan within the
limit, each call's tier alone (all others on their fastest tiers) must also be within it
(monotonicity), so the sum over calls of the cheapest tier that fits its slack in the
all-fastest run is a lower bound on the optimum; on the all-fastest critical path the tighter
Lagrangian bound of its knapsack replaces it (:func:`lower_bound`): ``lower_bound_usd``. The plan's cost minus it
bounds how far from optimal the plan can be (0: proven optimal). A run with at most
:data:`EXHAUSTIVE` assignments is searched exhaustively instead (optimal by construction).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentloop.analysis.flat import Graph
from agentloop.analysis.mix import Options
from agentloop.analysis.passes import critical_path, retime, retime_flat

EXHAUSTIVE = 1 << 15  # assignments (tiers ** calls) searched one by one
_EPS = 1e-12  # dollars: savings below this are not worth a call's slack


def latest(g: Graph, dur: list[int], end_by: int) -> list[int]:
    """Backward pass: per position, the latest instant it may reach and the run's end still be
    at most ``end_by`` (run-clock ns, the graph's own instants)."""
    n = len(g)
    big = 1 << 62
    L = [big] * (2 * n + 1)
    last = end_by - g.run_end_gap
    for r in g.roots:
        L[2 * r + 1] = last
    ends = g.child_ends
    for i in range(n - 1, -1, -1):
        f = g.closes_at[i]
        if f:
            for q, ks, g1 in reversed(f):
                lq = L[q] - g1
                for k in ks:
                    if lq < L[k]:
                        L[k] = lq
        i2 = 2 * i
        if ends[i] is None:
            ls = L[i2 + 1] - dur[i]
            if ls < L[i2]:
                L[i2] = ls
        ls = L[i2] - g.start_gap[i]
        p = g.parent_start[i]
        if ls < L[p]:
            L[p] = ls
        for x in g.after_ends[i]:
            if ls < L[x]:
                L[x] = ls
    return L


def slacks(o: Options, choice: Sequence[int], end_by: int, warm: bool = False) -> list[int]:
    """Per call: how much later it may end (ns) with the run still ending by ``end_by``;
    ``warm``: with every call's recorded cached input (each call's shortest duration)."""
    g = o.graph
    dur = o.warm_durations(choice) if warm else o.durations(choice)
    V, _ = retime_flat(g, dur)
    L = latest(g, dur, end_by)
    return [L[2 * c.span + 1] - V[2 * c.span + 1] for c in o.calls]


def fastest(o: Options) -> list[int]:
    """Per call its fastest tier (the cheaper one on a tie)."""
    return [
        min(range(len(d)), key=lambda t: (d[t], c[t])) for d, c in zip(o.dur, o.cost, strict=True)
    ]


def cheapest(o: Options) -> list[int]:
    """Per call its cheapest tier (the faster one on a tie)."""
    return [
        min(range(len(d)), key=lambda t: (c[t], d[t])) for d, c in zip(o.dur, o.cost, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class Solution:
    """An assignment (tier column per call) with its predicted time and cost, and what is
    proven about it."""

    choice: tuple[int, ...]
    predicted_ns: int
    cost_usd: float
    lower_bound_usd: float  # no plan within the limit costs less
    method: str  # "exhaustive" or "greedy"

    @property
    def gap_usd(self) -> float:
        return max(0.0, self.cost_usd - self.lower_bound_usd)


def lower_bound(o: Options, limit_ns: int) -> float:
    """The cost no plan within ``limit_ns`` can undercut (module docstring).

    Two relaxations, each valid for any plan within the limit (durations and costs taken with
    the recorded cached input, each call's least): every call's tier must fit alone, and the
    all-fastest run's critical path must still fit, a knapsack over its calls whose Lagrangian
    dual (maximised over the multiplier, concave) bounds their cost from below. Calls on that
    path take the dual; the others their cheapest tier that fits alone.
    """
    g = o.graph
    fast = fastest(o)
    sl = slacks(o, fast, g.start_ns + limit_ns, warm=True)
    fits = [
        [t for t in range(len(d)) if d[t] - d[f] <= s or t == f]
        for d, f, s in zip(o.dur, fast, sl, strict=True)
    ]
    alone = [min(c[t] for t in ts) for c, ts in zip(o.cost, fits, strict=True)]
    S, E, end = retime(g, o.warm_durations(fast))
    row = {c.span: k for k, c in enumerate(o.calls)}
    path = sorted({row[i] for i, _, gap in critical_path(g, S, E, end) if not gap and i in row})
    room = limit_ns - (end - g.start_ns)  # the path may grow by this much
    if not path or room < 0:
        return sum(alone)
    opts = [[(o.cost[k][t], o.dur[k][t] - o.dur[k][fast[k]]) for t in fits[k]] for k in path]

    def dual(lam: float) -> float:
        return sum(min(c + lam * d for c, d in ts) for ts in opts) - lam * room

    rates = [(c0 - c) / d for ts in opts for c, d in ts for c0, d0 in ts if d > 0 and d0 == 0]
    lo, hi = 0.0, max([0.0, *rates]) * 2 or 1.0
    for _ in range(100):  # golden-section search of a concave function
        m1, m2 = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        if dual(m1) < dual(m2):
            lo = m1
        else:
            hi = m2
    on_path = max(dual(0.0), dual((lo + hi) / 2))
    on = set(path)
    return on_path + sum(a for k, a in enumerate(alone) if k not in on)


def route(o: Options, limit_ns: int) -> Solution | None:
    """The cheapest assignment found whose run ends within ``limit_ns`` of its start; None when
    even the all-fastest run does not."""
    fast = fastest(o)
    if o.end(fast) > limit_ns:
        return None
    lb = lower_bound(o, limit_ns)
    n_tiers = len(o.tiers)
    if n_tiers ** len(o.calls) <= EXHAUSTIVE:
        best = min(
            (
                ch
                for ch in itertools.product(range(n_tiers), repeat=len(o.calls))
                if o.end(ch) <= limit_ns
            ),
            key=lambda ch: (o.total_cost(ch), o.end(ch)),
        )
        cost = o.total_cost(best)
        return Solution(tuple(best), o.end(best), cost, cost, "exhaustive")
    choice = _greedy(o, fast, limit_ns)
    return Solution(tuple(choice), o.end(choice), o.total_cost(choice), lb, "greedy")


def _greedy(o: Options, start: list[int], limit_ns: int) -> list[int]:
    end_by = o.graph.start_ns + limit_ns
    choice = list(start)
    while True:
        sl = slacks(o, choice, end_by)
        dur = o.durations(choice)
        cands = []
        for k, (d, s) in enumerate(zip(o.dur, sl, strict=True)):
            cur = choice[k]
            best = None
            for t in range(len(d)):
                if t == cur:
                    continue
                saved, added = o.move_saving(k, t, choice), d[t] - dur[o.calls[k].span]
                if saved > _EPS and added <= s and (best is None or saved > best[0]):
                    best = (saved, added, t)
            if best is not None:
                saved, added, t = best
                rate = math.inf if added <= 0 else saved / added
                cands.append((-rate, -saved, k, t))
        if not cands:
            return choice
        cands.sort()
        apply = _prefix(choice, cands)

        lo, hi = 1, len(cands)  # the first alone fits its slack and saves
        cost = o.total_cost(choice)

        def ok(m: int, apply: Callable[[int], list[int]] = apply, cost: float = cost) -> bool:
            ch = apply(m)
            return o.end(ch) <= limit_ns and o.total_cost(ch) < cost - _EPS

        if ok(hi):
            lo = hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid - 1
        nxt = apply(lo)
        if o.end(nxt) > limit_ns or o.total_cost(nxt) >= cost - _EPS:
            return choice  # no move saves once its neighbour's cache is counted
        choice = nxt


def _prefix(
    choice: list[int], cands: list[tuple[float, float, int, int]]
) -> Callable[[int], list[int]]:
    """The assignment with the first ``m`` candidates applied, as a function of ``m``."""

    def apply(m: int) -> list[int]:
        ch = list(choice)
        for _, _, k, t in cands[:m]:
            ch[k] = t
        return ch

    return apply


def fastest_within(o: Options, budget_usd: float) -> Solution | None:
    """The fastest plan found costing at most ``budget_usd``: the router's plan for the
    smallest limit whose cost fits (bisection on the limit); None when even the all-cheapest
    plan costs more."""
    cheap = cheapest(o)
    if o.total_cost(cheap) > budget_usd + _EPS:
        return None
    lo, hi = o.end(fastest(o)), max(o.end(cheap), o.end(fastest(o)))
    best: Solution | None = None
    for _ in range(40):
        mid = (lo + hi) // 2
        s = route(o, mid)
        if s is not None and s.cost_usd <= budget_usd + _EPS:
            best, hi = s, mid
        else:
            lo = mid + 1
        if lo >= hi:
            break
    if best is None:
        s = route(o, hi)
        if s is not None and s.cost_usd <= budget_usd + _EPS:
            best = s
    if best is None:
        ns = o.end(cheap)
        best = Solution(tuple(cheap), ns, o.total_cost(cheap), o.total_cost(cheap), "cheapest")
    return best


FRONTIER_PCT = (0, 1, 2, 5, 10, 15, 20, 30, 50, 75, 100, 150, 200)


def frontier(o: Options) -> list[Solution]:
    """Time/cost points from all-fastest to all-cheapest: the router's plan at a ladder of
    limits above the all-fastest time, Pareto-pruned, plus both ends."""
    fast, cheap = fastest(o), cheapest(o)
    t_fast = o.end(fast)
    pts = [Solution(tuple(fast), t_fast, o.total_cost(fast), 0.0, "all-fastest")]
    for pct in FRONTIER_PCT:
        s = route(o, t_fast + t_fast * pct // 100)
        if s is not None:
            pts.append(s)
    ce = o.end(cheap)
    pts.append(Solution(tuple(cheap), ce, o.total_cost(cheap), 0.0, "all-cheapest"))
    pts.sort(key=lambda s: (s.predicted_ns, s.cost_usd))
    out: list[Solution] = []
    for s in pts:
        if not out or s.cost_usd < out[-1].cost_usd - _EPS:
            out.append(s)
    return out
