"""How many of a trace's model calls were measured under load, and how far that widens its figures.

Each model span of a trace written since issue 28 says how late its client ran while it
streamed (``timing_error_s``: the bound on every duration of the call; ``timing_under_load``:
the bound passed ``LATE_FRACTION`` of its decode time, :mod:`agentloop.model.timing`). Here they
are summed up for the report, the what-if, the suite and the service: a trace without them
(older, scripted, replayed) has ``measured == 0`` and says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from agentloop.model.timing import LATE_FRACTION, late_fraction
from agentloop.trace.reader import Trace
from agentloop.trace.span_attrs import ModelAttrs


@dataclass(frozen=True, slots=True)
class Lateness:
    """The client's own lateness over a set of model calls."""

    measured: int = 0  # calls whose client measured its lateness
    under_load: int = 0  # of them, with a bound past LATE_FRACTION of their decode
    worst_bound_s: float = 0.0  # the largest bound of any call
    worst_share: float = 0.0  # the largest bound as a share of its call's decode (or call)
    sum_bound_s: float = 0.0  # every call's bound added: how far the run's model time may be off

    def __add__(self, o: Lateness) -> Lateness:
        return Lateness(
            self.measured + o.measured,
            self.under_load + o.under_load,
            max(self.worst_bound_s, o.worst_bound_s),
            max(self.worst_share, o.worst_share),
            self.sum_bound_s + o.sum_bound_s,
        )

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "threshold": LATE_FRACTION}

    def line(self) -> str | None:
        """One sentence for a text report; None when nothing was measured under load."""
        if not self.under_load:
            return None
        return (
            f"timing: {self.under_load} of {self.measured} model calls measured under load "
            f"(the client's own lateness passed {100 * LATE_FRACTION:g}% of their decode; worst "
            f"+/-{1000 * self.worst_bound_s:.0f} ms, {100 * self.worst_share:.0f}% of its decode): "
            "their speeds may be the client's, not the model's"
        )


def _of_call(m: ModelAttrs) -> Lateness:
    if m.timing_error_s is None or m.timing is None:
        return Lateness()
    t = m.timing
    decode = (t.t_last - t.t_first_visible) / 1e9 if t.t_last and t.t_first_visible else None
    call = (t.t_end - t.t_send) / 1e9 if t.t_end else None
    b = m.timing_error_s
    return Lateness(1, int(m.under_load), b, late_fraction(b, decode, call), b)


def of_calls(calls: Iterable[ModelAttrs]) -> Lateness:
    total = Lateness()
    for m in calls:
        total = total + _of_call(m)
    return total


def of_trace(tr: Trace) -> Lateness:
    """The lateness of every finished model call of ``tr``."""
    return of_calls(s.model for s in tr.spans.values() if s.model is not None)
