"""What-if re-timing: what a recorded run would take on another tier, by re-timing its graph.

The rule. The recorded graph is kept and only durations change; start and end instants are
recomputed by one forward pass over the spans in recorded start order (a topological order):

- a span starts at the latest of its parent's new start and the new ends of its ``after`` spans,
  plus its recorded gap after the latest of those as recorded (framework time: dispatch, step
  bookkeeping, queueing for the tool-concurrency bound);
- a leaf span (model or tool call) ends its new duration after its new start;
- a parent (step, run) ends at its latest child's new end plus its recorded gap after its
  latest child's recorded end (closing bookkeeping); which child ends last may change;
- the run's end instant (the end record) keeps its recorded gap after the root span's end.

End-to-end time, measured or predicted, runs from the run span's start to the end record:
set-up before the run span opens (starting the simulator, preparing the workspace) is not part
of the agent's run and would not change on another tier.

Nothing is rescaled linearly: only model spans get new durations, tools keep their measured
durations, every gap is kept. With ``--speedup 1`` the pass reproduces the recorded instants.

A model span's new duration is its unchanged ``tail + wait + retry + overhead`` plus

- on a tier given by a profile: ``base_B + (R + V - 1) / output_tps_B`` where
  ``base_B = base_latency_s + input_tokens / prefill_tps``; ``V - 1`` rather than ``V`` because
  the measured decode spans V - 1 token intervals (t_first_visible .. t_last) and the prefix up
  to the first visible token is already in base (docs/design.md's ``(R + V)`` counts one token
  interval more than a stream takes);
- with multipliers of the measured speeds: ``base / P + (reasoning + decode) / K``.

The Amdahl ceiling is the run with output speed taken to infinity (reasoning and decode -> 0)
and the measured base (divided by P if given; as measured in tier mode); the speedup curve
re-times the run for K = 1, 2, 3, 5, 8, 11, 20, 50, 100 the same way and tends to the ceiling.
Every instant is then ``a + b / K``-shaped as long as no max in the pass changes hands between
K = 1 and K = infinity, so one lockstep pass over both ends gives the whole curve
(:func:`agentloop.analysis.graph.retime_pair`); otherwise each point gets its own pass.

Where the saved time comes from is read off the critical paths: the measured run's path and the
re-timed run's path each sum exactly to their end-to-end time, so per category (and per step)
``measured on path - predicted on path`` sums exactly to the time saved, even when the critical
path moves from one parallel branch to another. The result as text is
:mod:`agentloop.analysis.whatif_text`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentloop.analysis.breakdown import (  # category_order ... re-exported for callers
    MODEL_CATS,
    category_order,
    path_breakdown,
    path_tally,
    ratio_of,
    step_label,
    step_labels,
)
from agentloop.analysis.flat import Graph, interleave
from agentloop.analysis.graph import gc_paused
from agentloop.analysis.lateness import Lateness, of_trace
from agentloop.analysis.passes import retime, retime_with_pair
from agentloop.config.tiers import no_profile
from agentloop.errors import ConfigError
from agentloop.model.speed import SpeedProfile
from agentloop.trace.reader import Trace

CURVE_K = (1, 2, 3, 5, 8, 11, 20, 50, 100)

__all__ = [
    "CURVE_K",
    "MODEL_CATS",
    "Contribution",
    "Scenario",
    "WhatIf",
    "category_order",
    "durations",
    "new_parts",
    "path_breakdown",
    "predict_ns",
    "ratio_of",
    "step_label",
    "step_labels",
    "whatif",
    "whatif_json",
]


@dataclass(frozen=True, slots=True)
class Scenario:
    """Tier B: a speed profile, or multipliers of tier A's measured speeds (K decode, P prefill)."""

    label: str
    profile: SpeedProfile | None = None
    speedup: float = 1.0
    prefill_speedup: float = 1.0

    @classmethod
    def tier(cls, name: str, profile: SpeedProfile | None) -> Scenario:
        if profile is None:  # a minimal tier, not probed yet (issue 10b)
            raise no_profile(name)
        if profile.output_tps <= 0:
            raise ConfigError(f"tier '{name}': output_tps must be > 0")
        return cls(f"tier {name}", profile=profile)

    @classmethod
    def multipliers(cls, speedup: float, prefill_speedup: float = 1.0) -> Scenario:
        if not speedup > 0 or not prefill_speedup > 0:
            raise ConfigError("--speedup and --prefill-speedup must be > 0")
        label = f"output x{speedup:g}"
        if prefill_speedup != 1:
            label += f", prefill x{prefill_speedup:g}"
        return cls(label, speedup=speedup, prefill_speedup=prefill_speedup)


@dataclass(frozen=True, slots=True)
class Contribution:
    """Critical-path time of one category or step, measured and predicted (ns)."""

    name: str
    measured_ns: int
    predicted_ns: int

    @property
    def saved_ns(self) -> int:
        return self.measured_ns - self.predicted_ns


@dataclass(frozen=True, slots=True)
class WhatIf:
    """A what-if result: end-to-end times (ns), ceiling, contributions, and the speedup curve."""

    scenario: Scenario
    measured_ns: int
    predicted_ns: int
    ceiling_ns: int
    categories: tuple[Contribution, ...]
    steps: tuple[Contribution, ...]  # name = step number as text; "run" for run-level gaps
    curve: tuple[tuple[float, int], ...]  # (K, predicted ns)
    complete: bool
    input_tokens: int = 0  # over every model call
    cached_tokens: int = 0  # of input_tokens, cached: a profile charges them cached_prefill_tps
    lateness: Lateness | None = None  # the client's own lateness while measuring (issue 28)

    @property
    def speedup(self) -> float:
        return ratio_of(self.measured_ns, self.predicted_ns)

    @property
    def ceiling(self) -> float:
        return ratio_of(self.measured_ns, self.ceiling_ns)


def new_parts(g: Graph, sc: Scenario) -> dict[int, tuple[int, int, int]]:
    """New (base, reasoning, decode) ns of every finished model span under ``sc``."""
    out: dict[int, tuple[int, int, int]] = {}
    prof = sc.profile
    if prof is not None:
        # THE speed model (agentloop.model.speed): prefill only for uncached input, decode at the
        # context-dependent speed; a call that never answered (not timed) would fail the same way
        parts = prof.parts
        for i, m in g.models.items():
            if m.timed:
                b_s, r_s, d_s = parts(
                    m.input_tokens, m.reasoning_tokens, m.visible_tokens, m.cached_tokens
                )
                out[i] = (round(b_s * 1e9), round(r_s * 1e9), round(d_s * 1e9))
            else:
                out[i] = (m.base, m.reasoning, m.decode)
        return out
    k, p = sc.speedup, sc.prefill_speedup
    if math.isinf(k):
        for i, m in g.models.items():
            out[i] = (round(m.base / p), 0, 0)
    elif k == 1 and p == 1:
        for i, m in g.models.items():
            out[i] = (m.base, m.reasoning, m.decode)
    else:
        for i, m in g.models.items():
            out[i] = (round(m.base / p), round(m.reasoning / k), round(m.decode / k))
    return out


def durations(g: Graph, parts: dict[int, tuple[int, int, int]]) -> list[int]:
    """Leaf durations: recorded ones, with model spans' base/reasoning/decode replaced."""
    dur = g.durations()
    models = g.models
    for i, (b, r, d) in parts.items():
        m = models[i]
        dur[i] += b + r + d - m.base - m.reasoning - m.decode
    return dur


def _k_durations(g: Graph, p: float, k: float) -> list[int]:
    """``durations(g, new_parts(g, Scenario.multipliers(k, p)))`` for K = 1 or infinity, from the
    model parts directly (no per-span part tuples: the curve needs only durations)."""
    dur = g.durations()
    ms = g.models.values()
    if p == 1:
        if k == 1:
            return dur
        delta = [-m.reasoning - m.decode for m in ms]
    elif k == 1:
        delta = [round(m.base / p) - m.base for m in ms]
    else:
        delta = [round(m.base / p) - m.base - m.reasoning - m.decode for m in ms]
    for i, d in zip(g.models, delta, strict=True):
        dur[i] += d
    return dur


def predict_ns(g: Graph, sc: Scenario) -> int:
    """End-to-end time (ns) of the run re-timed under ``sc`` (one forward pass)."""
    with gc_paused():
        return retime(g, durations(g, new_parts(g, sc)))[2] - g.start_ns


def _curve(
    g: Graph, p: float, ks: tuple[float, ...], ends: tuple[int, int] | None
) -> tuple[int, tuple[tuple[float, int], ...]]:
    """Ceiling and speedup curve (output x K, base / P) from the run's ends at K = infinity and
    K = 1 when its time is affine in 1/K (:func:`retime_pair`; None: it is not), else one pass
    per point."""
    if ends is not None:
        t_inf, t_one = ends[0] - g.start_ns, ends[1] - g.start_ns
        return t_inf, tuple((float(k), round(t_inf + (t_one - t_inf) / k)) for k in ks)
    ceiling = predict_ns(g, Scenario("ceiling", speedup=math.inf, prefill_speedup=p))
    return ceiling, tuple(
        (float(k), predict_ns(g, Scenario("curve", speedup=k, prefill_speedup=p))) for k in ks
    )


def with_lateness(w: WhatIf, tr: Trace) -> WhatIf:
    """``w`` with the lateness of ``tr``'s model calls, for the widening line (kept apart from
    the re-timing, which the columnar path must match)."""
    return dataclasses.replace(w, lateness=of_trace(tr))


def whatif(g: Graph, sc: Scenario, curve: tuple[float, ...] = CURVE_K) -> WhatIf:
    """Re-time ``g`` under ``sc``: predicted total, ceiling, contributions and speedup curve."""
    with gc_paused():
        return _whatif(g, sc, curve)


def _whatif(g: Graph, sc: Scenario, curve: tuple[float, ...]) -> WhatIf:
    parts = new_parts(g, sc)
    dur = durations(g, parts)
    p = 1.0 if sc.profile is not None else sc.prefill_speedup
    # the scenario's pass and the curve's pair of passes (K = infinity, K = 1) in one loop
    V, back, end, ends = retime_with_pair(
        g, dur, _k_durations(g, p, math.inf), _k_durations(g, p, 1)
    )
    new_cats, new_steps = path_tally(g, V, back, dur, end, parts)
    old_cats, old_steps = path_tally(
        g, interleave(g.t0, g.t1, g.start_ns), g.back_link, g.recorded_dur, g.end_ns, None
    )
    ceiling, points = _curve(g, p, curve, ends)
    cats = tuple(
        Contribution(c, old_cats.get(c, 0), new_cats.get(c, 0))
        for c in category_order(set(old_cats) | set(new_cats))
    )
    step_ids = sorted(old_steps.keys() | new_steps.keys())
    steps = tuple(
        map(
            Contribution,
            step_labels(g, step_ids),
            map(old_steps.get, step_ids, itertools.repeat(0)),
            map(new_steps.get, step_ids, itertools.repeat(0)),
        )
    )
    return WhatIf(
        sc,
        g.measured_ns,
        end - g.start_ns,
        ceiling,
        cats,
        steps,
        points,
        g.trace.complete,
        sum(m.input_tokens for m in g.models.values()),
        sum(m.cached_tokens for m in g.models.values()),
    )


def whatif_json(w: WhatIf) -> dict[str, Any]:
    """The result as plain JSON-able data; times in seconds."""
    return {
        "scenario": w.scenario.label,
        "complete": w.complete,
        "measured_s": w.measured_ns / 1e9,
        "predicted_s": w.predicted_ns / 1e9,
        "speedup": w.speedup,
        "ceiling": w.ceiling,
        "ceiling_s": w.ceiling_ns / 1e9,
        "saved_s": (w.measured_ns - w.predicted_ns) / 1e9,
        "input_tokens": w.input_tokens,
        "cached_input_tokens": w.cached_tokens,
        "categories": {
            c.name: {
                "measured_s": c.measured_ns / 1e9,
                "predicted_s": c.predicted_ns / 1e9,
                "saved_s": c.saved_ns / 1e9,
            }
            for c in w.categories
        },
        "steps": [
            {
                "step": c.name,
                "measured_s": c.measured_ns / 1e9,
                "predicted_s": c.predicted_ns / 1e9,
                "saved_s": c.saved_ns / 1e9,
            }
            for c in w.steps
        ],
        "curve": [
            {"k": k, "predicted_s": ns / 1e9, "speedup": ratio_of(w.measured_ns, ns)}
            for k, ns in w.curve
        ],
        **({"lateness": w.lateness.as_json()} if w.lateness is not None else {}),
    }


# without a faster tier to name, the what-if line uses the per-token speedup the mission quotes
# (68 -> 750 output tokens/s), and says so
HEADLINE_K = 11.0


def faster_tier_line(g: Graph, tiers: dict[str, Any] | None) -> str:
    """What the fastest tier the user has that is faster than the run's would buy (its whole
    profile: base latency, prefill, output speed), named; without one, output ``HEADLINE_K``
    times faster, said so. The one wording of ``run``'s summary and ``report``'s headline."""
    return tier_line(g.trace, tiers, lambda sc: whatif(g, sc, curve=()))


def tier_line(
    recorded: Any, tiers: dict[str, Any] | None, retime: Callable[[Scenario], WhatIf]
) -> str:
    """:func:`faster_tier_line` of a run (``recorded``: anything with its typed header as
    ``run``) that ``retime`` re-times without the curve (the loops or the columns)."""
    from agentloop.config.tiers import faster_tier

    target = faster_tier(recorded, tiers)
    if target is not None and target.profile is not None:
        w = retime(Scenario.tier(target.name, target.profile))
        what = (
            f"on {target.name} ({target.profile.output_tps:g} tok/s, the fastest faster tier "
            "you have)"
        )
    else:
        w = retime(Scenario.multipliers(HEADLINE_K))
        what = f"output {HEADLINE_K:g}x faster (K = {HEADLINE_K:g}; no faster tier in the tiers)"
    return (
        f"what-if  {what}: {w.predicted_ns / 1e9:.2f} s ({w.speedup:.2f}x); "
        f"ceiling at infinite output speed {w.ceiling_ns / 1e9:.2f} s ({w.ceiling:.2f}x)"
    )
