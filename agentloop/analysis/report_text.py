"""The report of a recorded run as plain aligned text: its headline, categories, steps, path.

:func:`render_report` prints a :class:`agentloop.analysis.report.Report`, one section helper
each; the one-line wordings (:func:`wall_line`, :func:`cache_line`, :func:`trim_line`) are shared
with the what-if text and the HTML export.
"""

from __future__ import annotations

from typing import Any

from agentloop.analysis._table import elide, pct, secs, table
from agentloop.analysis.agents import steps_text
from agentloop.analysis.breakdown import category_order
from agentloop.analysis.report import Report
from agentloop.analysis.report_rows import listed_path, step_labels

MAX_PATH_ROWS = 60


def wall_line(r: Report) -> str:
    """The wall time, labelled, with its parts (or why only the agent's time is known)."""
    if r.wall_ns is None and "setup" in r.outside_open:
        return "wall time: not known (the run was stopped in its set-up: the setup span is open)"
    if r.wall_ns is None:
        return (
            "wall time: not recorded (a trace from before set-up and the success check were "
            "spans: the agent time only)"
        )
    parts = [f"agent {secs(r.measured_ns)} s"]
    if r.setup_ns is not None:
        parts.insert(0, f"set-up {secs(r.setup_ns)} s")
    if r.check_ns is not None:
        parts.append(f"success check {secs(r.check_ns)} s")
    return f"wall time {secs(r.wall_ns)} s ({' + '.join(parts)})"


def trim_line(t: dict[str, Any]) -> str:
    """One context trim as a sentence (its fields come from a trace: shown, never trusted)."""
    return (
        f"step {t.get('step')}: {t.get('tool') or 'tool'} output (call {t.get('call_id')}, "
        f"message {t.get('index')}) dropped before the model call, {t.get('tokens')} tokens"
    )


def cache_line(input_tokens: int, cached_tokens: int) -> str:
    """How much of the run's input the server's prompt cache served (prefill is paid only for
    the rest: agentloop.model.speed)."""
    share = f" ({100 * cached_tokens / input_tokens:.0f}%)" if input_tokens else ""
    return (
        f"input tokens {input_tokens:,}, cached by the server {cached_tokens:,}{share}: "
        f"prefill paid for {input_tokens - cached_tokens:,}"
    )


def render_report(r: Report) -> str:
    """The report as plain aligned text."""
    sections = [
        _headline(r),
        _categories(r),
        _steps(r),
        *([_trims(r)] if r.trims else []),
        _critical_path(r),
    ]
    return "\n\n".join("\n".join(s) for s in sections)


def _headline(r: Report) -> list[str]:
    """The run, its times and status, and why the trace is incomplete or odd."""
    out = [
        f"task {r.task} on tier {r.tier}: agent time {secs(r.measured_ns)} s (the run span, "
        f"what the what-if re-times), status {r.status}, {steps_text(step_labels(r.steps))}",
        f"  {wall_line(r)}",
    ]
    if not r.complete:
        out.append(
            "INCOMPLETE trace: the run did not finish (killed or still running); "
            "analysing what was recorded."
        )
        out += [f"  in flight: {s}" for s in r.in_flight]
    out += [f"  note: {p}" for p in r.problems if r.complete or "no end record" not in p]
    return out


def _categories(r: Report) -> list[str]:
    """Time per category, on the critical path and busy, with the model share and the cache."""
    out = [
        "Time by category (critical path sums to the end-to-end time; busy adds parallel spans):"
    ]
    cats = category_order(set(r.critical) | set(r.busy))
    out.append(
        table(
            ["category", "critical s", "share", "busy s"],
            [
                [
                    c,
                    secs(r.critical.get(c, 0)),
                    pct(r.critical.get(c, 0), r.measured_ns),
                    secs(r.busy.get(c, 0)),
                ]
                for c in cats
            ],
        )
    )
    out.append(f"  model share of the critical path: {100 * r.model_share:.1f}%")
    out.append(f"  {cache_line(r.input_tokens, r.cached_tokens)}")
    late = r.lateness.line()
    if late:
        out.append(f"  {late}")
    return out


def _steps(r: Report) -> list[str]:
    """One row per step (long runs elided), with the run time at its end."""
    rows: list[list[str] | str] = []
    for s in elide(r.steps):
        if isinstance(s, str):
            rows.append(s)
            continue
        tools = ", ".join(f"{n} {secs(v, 2)}" for n, v in s.tools) or "-"
        rows.append(
            [
                s.step + (" (in flight)" if s.in_flight else ""),
                secs(s.duration_ns),
                secs(s.model["base"]),
                secs(s.model["reasoning"]),
                secs(s.model["decode"]),
                secs(s.model["other"]),
                tools,
                f"{s.input_tokens}/{s.output_tokens}/{s.reasoning_tokens}",
                secs(s.cumulative_ns),
            ]
        )
    head = ["step", "step s", "base", "reason", "decode", "m.other"]
    head += ["tools (s)", "tok in/out/reas", "cumul s"]
    return [
        "Steps (cumulative = run time at the step's end: how the steps compound):",
        table(head, rows),
    ]


def _trims(r: Report) -> list[str]:
    """The tool outputs dropped to fit the context window."""
    dropped = sum(t["tokens"] for t in r.trims if type(t.get("tokens")) is int)
    return [
        f"Context window: {len(r.trims)} tool output(s) dropped to fit ({dropped:,} tokens):",
        *(f"  {trim_line(t)}" for t in r.trims),
    ]


def _critical_path(r: Report) -> list[str]:
    """The critical path's segments in time order, the first :data:`MAX_PATH_ROWS` listed."""
    out = [f"Critical path ({len(r.path)} segments, chronological; gaps < 1 ms not listed):"]
    # framework gaps under a millisecond are counted above but not listed one by one
    count, listed = listed_path(r.path, 1_000_000, MAX_PATH_ROWS)
    out.append(table(["step", "kind", "span", "s"], [[s, k, n, secs(v)] for s, k, n, v in listed]))
    if count > MAX_PATH_ROWS:
        out.append(f"  ... {count - MAX_PATH_ROWS} more segments (--json lists all)")
    return out
