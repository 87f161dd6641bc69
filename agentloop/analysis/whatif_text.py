"""A what-if result as plain aligned text: the times, where the saving comes from, the curve.

:func:`render_whatif` prints a :class:`agentloop.analysis.whatif.WhatIf`, one section helper
each; :func:`widening_line` (how far the client's own lateness widens the answer) is shared with
the HTML export.
"""

from __future__ import annotations

from agentloop.analysis._table import elide, pct, ratio, secs, table
from agentloop.analysis.breakdown import ratio_of
from agentloop.analysis.lateness import Lateness
from agentloop.analysis.report_text import cache_line
from agentloop.analysis.whatif import Contribution, Scenario, WhatIf

SAVED_HEAD = ["measured s", "predicted s", "saved s", "of saved"]


def widening_line(late: Lateness | None) -> str | None:
    """How far the client's own lateness widens a what-if's answer (None: not under load)."""
    if late is None or not late.under_load:
        return None
    return (
        f"  measured under load: {late.under_load} of {late.measured} model calls; the measured "
        f"model time is uncertain by up to +/-{late.sum_bound_s:.2f} s (every call's timing "
        "error bound added), and the time saved by as much"
    )


def _cache_rule(sc: Scenario) -> str:
    if sc.profile is None:
        return " (measured prefill, cache hits included, scaled)"
    rate = sc.profile.cached_prefill_tps
    if rate:
        return f" (the tier charges cached input at {rate:g} tok/s)"
    if sc.profile.prefill_ms_per_1k:
        return " (cached input costs only the longer context the fresh input is prefilled behind)"
    return " (the tier charges nothing for cached input)"


def render_whatif(w: WhatIf) -> str:
    """The result as plain aligned text."""
    sections = [_headline(w), _categories(w), _steps(w), _curve(w)]
    return "\n\n".join("\n".join(s) for s in sections)


def _headline(w: WhatIf) -> list[str]:
    """The scenario, the measured, predicted and ceiling times, the cache and the lateness."""
    out = [f"what-if: {w.scenario.label}"]
    if not w.complete:
        out.append("INCOMPLETE trace: re-timing only what was recorded before the run stopped.")
    return [
        *out,
        f"  measured   {secs(w.measured_ns)} s",
        f"  predicted  {secs(w.predicted_ns)} s   speedup {ratio(w.speedup)}",
        f"  ceiling    {secs(w.ceiling_ns)} s   speedup {ratio(w.ceiling)} "
        f"(output speed -> infinity: reasoning and decode -> 0)",
        f"  {cache_line(w.input_tokens, w.cached_tokens)}{_cache_rule(w.scenario)}",
        *filter(None, [widening_line(w.lateness)]),
    ]


def _saved_row(c: Contribution, saved: int) -> list[str]:
    """One category's or step's critical-path time, measured and predicted, and its saving."""
    return [
        c.name,
        secs(c.measured_ns),
        secs(c.predicted_ns),
        secs(c.saved_ns),
        pct(c.saved_ns, saved),
    ]


def _categories(w: WhatIf) -> list[str]:
    """Where the time saved comes from, per category of the critical paths."""
    saved = w.measured_ns - w.predicted_ns
    return [
        "Where the time saved comes from (critical path, measured vs predicted):",
        table(["category", *SAVED_HEAD], [_saved_row(c, saved) for c in w.categories]),
    ]


def _steps(w: WhatIf) -> list[str]:
    """The same per step (long runs elided)."""
    saved = w.measured_ns - w.predicted_ns
    rows = [c if isinstance(c, str) else _saved_row(c, saved) for c in elide(w.steps)]
    return ["Per step:", table(["step", *SAVED_HEAD], rows)]


def _curve(w: WhatIf) -> list[str]:
    """The run re-timed at output speed x K of the measured, for each K of the result's curve."""
    base = (
        "measured prefill"
        if w.scenario.prefill_speedup == 1 or w.scenario.profile
        else f"prefill x{w.scenario.prefill_speedup:g}"
    )
    return [
        f"Speedup curve (output speed x K of the measured, {base}):",
        table(
            ["K", "predicted s", "speedup"],
            [[f"{k:g}", secs(ns), ratio(ratio_of(w.measured_ns, ns))] for k, ns in w.curve],
        ),
    ]
