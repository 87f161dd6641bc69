"""``report`` on columns: :func:`agentloop.analysis.report.build_report` for big traces.

The rule, the formulas and the result are :mod:`agentloop.analysis.report`'s; only the work is
done on arrays (:mod:`agentloop.analysis.vector`): the recorded critical path is the chain of
recorded links (:func:`path_order`), the busy time and the step rows are sums grouped by
category and by step. What the trace says besides (trims, the wall time outside the agent, the
lateness) was worked out by the loops' own functions when the columns were made.
``tests/test_columnar.py`` compares the two reports field by field, and the commands' output
byte for byte.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from agentloop.analysis import cost, jsontext
from agentloop.analysis._table import secs
from agentloop.analysis.agents import render_usage_rows, usage_of_columns
from agentloop.analysis.attribution import FRAMEWORK, IN_FLIGHT, MODEL_PARTS, TOOL_QUEUE
from agentloop.analysis.breakdown import category_order
from agentloop.analysis.cands import Cands, Ix
from agentloop.analysis.columnar import I64, B, Columns, release_heap
from agentloop.analysis.cost import CostBreakdown
from agentloop.analysis.report import Report, report_json, unsplit_fields
from agentloop.analysis.report_json import dropping, path_text, steps_text
from agentloop.analysis.report_rows import (
    PathColumns,
    PathRowsView,
    Picked,
    StepColumns,
    StepRowsView,
    path_json,
    steps_json,
)
from agentloop.analysis.strcols import kind_is
from agentloop.analysis.vector import VGraph, build, on_path, recorded, tally
from agentloop.analysis.whatif import tier_line
from agentloop.trace.run_header import RunHeader, parse_header


def path_order(vg: VGraph, V: I64, links: I64) -> I64:
    """The critical path's positions from the latest root's end back (the run's start not
    included), in walk order: :func:`vector.on_path`'s set, ranked by its distance to the run's
    start along ``links`` (pointer jumping: a rank is its own plus its successor's)."""
    pos = on_path(vg, V, links)
    m = len(pos)
    nxt = np.append(np.searchsorted(pos, links[pos]), m)  # the run's start: m, past them all
    dist = np.ones(m + 1, np.int64)
    dist[m] = 0
    while (nxt[:m] != m).any():
        dist += dist[nxt]
        nxt = nxt[nxt]
    return pos[np.argsort(-dist[:m], kind="stable")]


def segments(vg: VGraph) -> tuple[I64, I64, B]:
    """:func:`agentloop.analysis.passes.critical_path` of the recorded run as arrays, latest
    first: each segment's span (-1: before or after the run), ns, and whether it is a gap."""
    total = vg.end_ns
    if not len(vg.roots):
        return np.array([-1]), np.array([total - vg.start_ns]), np.array([True])
    V = recorded(vg, vg.start_ns)  # the run's start last, as the path sees it
    vs = path_order(vg, V, vg.back_link)
    vals = np.concatenate([[total], V[vs], [vg.start_ns]])
    idx = np.concatenate([[-1], vs >> 1])
    leaf_end = ((vs & 1) == 1) & vg.is_leaf[vs >> 1]
    return idx, vals[:-1] - vals[1:], np.concatenate([[True], ~leaf_end])


def _take(col: pa.Array, idx: I64) -> list[Any]:
    """``col``'s values at ``idx`` as Python objects (an empty column: None each, for a
    placeholder index)."""
    if not len(col):
        return [None] * len(idx)
    # through numpy: a dictionary column's to_pylist makes a scalar per value (ten times slower)
    got = col.take(pa.array(idx, pa.int64())).to_numpy(zero_copy_only=False)
    return got.tolist()  # type: ignore[no-any-return]


def path_columns(vg: VGraph | RowGraph, idx: I64, ns: I64, gap: B) -> PathColumns:
    """The report's ``path`` as columns: the segments in time order, adjacent framework gaps
    merged into the first, each a step label, a kind ("gap" for a gap), a span name
    (framework for a gap) and ns."""
    idx, ns, gap = idx[::-1], ns[::-1], gap[::-1]
    first = np.ones(len(idx), np.bool_)
    first[1:] = ~(gap[1:] & gap[:-1])  # a gap after a gap joins it
    starts = np.flatnonzero(first)
    merged = np.add.reduceat(ns, starts) if len(starts) else ns[:0]
    i, g = idx[starts], gap[starts]
    step = np.full(len(i), -1, vg.step_of.dtype)  # a gap before the first span: run level
    step[i >= 0] = vg.step_of[i[i >= 0]]
    c = vg.c
    at = np.maximum(i, 0)
    return PathColumns(
        Picked(c.step_label, np.maximum(step, 0), step < 0, "run"),
        Picked(c.kinds, at, g, "gap"),
        Picked(c.names, at, g, FRAMEWORK),
        merged,
    )


@dataclass(frozen=True, slots=True)
class RowGraph:
    """What the step rows and the per-tier table read of a :class:`VGraph` once its passes are
    done: the gaps and links it holds besides (a million spans' 20 MB; its candidate lists went
    once the headline was re-timed, 30 MB) are freed before the rows are made
    (:func:`report_of`)."""

    c: Columns
    step_of: Ix  # per span: the step span owning it, -1 at run level
    models: Ix  # indices of the re-timed model spans, ascending
    recorded_dur: I64
    tool_code: Ix  # per span: index of its tool category in tool_names, -1 for none
    tool_names: list[str]
    start_ns: int

    def __len__(self) -> int:
        return len(self.c)

    @classmethod
    def of(cls, vg: VGraph) -> RowGraph:
        return cls(
            vg.c, vg.step_of, vg.models, vg.recorded_dur, vg.tool_code, vg.tool_names, vg.start_ns
        )


def _leaf_codes(vg: VGraph | RowGraph, at: I64) -> tuple[Ix, list[str]]:
    """Spans ``at``: their leaf category as a code into the names (``report._leaf_category``):
    in flight, else a tool's category, else framework."""
    names = [*vg.tool_names, IN_FLIGHT, FRAMEWORK]
    tc = vg.tool_code[at]
    code = np.where(tc >= 0, tc, len(names) - 1)
    return np.where(vg.c.in_flight[at], len(names) - 2, code).astype(tc.dtype), names


def busy(vg: VGraph, critical: dict[str, int]) -> dict[str, int]:
    """Time per category summed over every leaf, parallel ones included (``build_report``)."""
    c = vg.c
    out: dict[str, int] = {}
    if len(vg.models):
        for k, name in enumerate(MODEL_PARTS):
            out[name] = int(c.parts[:, k].sum())
    others = np.flatnonzero(vg.is_leaf & ~c.is_model)
    code, names = _leaf_codes(vg, others)
    sums = np.zeros(len(names), np.int64)
    np.add.at(sums, code, vg.recorded_dur[others])
    for k in np.unique(code).tolist():
        out[names[k]] = int(sums[k])
    out[FRAMEWORK] = out.get(FRAMEWORK, 0) + critical.get(FRAMEWORK, 0)
    queued = int(vg.queue.sum())
    if queued:
        out[TOOL_QUEUE] = queued
    return out


def step_columns(vg: VGraph | RowGraph) -> StepColumns:
    """A row per step span (``report._step_row``), its direct children's time and tokens
    summed, as columns; the labels and tool names as Arrow strings (200,000 steps' labels as
    Python strings were 12 MB)."""
    c = vg.c
    steps = np.flatnonzero(kind_is(c, "step"))
    row = np.full(len(vg) + 1, -1, vg.step_of.dtype)  # int32 while it fits: 4 MB, not 8
    row[steps] = np.arange(len(steps))
    par = row[c.parent]  # the parent's step row (-1: not a step's child; a root's parent: -1)
    del row
    s = _step_sums(vg, par, len(steps))[:-1]
    c.drop_pages()  # the parents and the model columns, read for the last time
    names, tool_ns, off = _step_tools(vg, par, len(steps))
    del par
    label = c.step_label
    t0, t1 = c.t0[steps], c.t1[steps]
    return StepColumns(
        step=label.take(pa.array(steps)) if len(label) else pa.nulls(len(steps), pa.string()),
        start_ns=t0 - vg.start_ns,
        duration_ns=t1 - t0,
        base=s[:, 0],
        reasoning=s[:, 1],
        decode=s[:, 2],
        other=s[:, 3],
        tool_names=names,
        tool_ns=tool_ns,
        tool_off=off,  # arrays, not lists: 200,000 steps' ints as objects were 35 MB
        input_tokens=s[:, 4],
        output_tokens=s[:, 5],
        reasoning_tokens=s[:, 6],
        cumulative_ns=t1 - vg.start_ns,
        in_flight=c.in_flight[steps],
        cached_tokens=s[:, 7],
    )


def _step_sums(vg: VGraph | RowGraph, par: Ix, n: int) -> I64:
    """Per step row (``par``: each span's parent's row, -1 for none), its direct children's
    base, reasoning, decode, other, input, output, reasoning and cached tokens (a last row for
    the spans of no step)."""
    c = vg.c
    sums = np.zeros((n + 1, 8), np.int64)
    m = par[vg.models]
    p = c.parts
    for k, col in enumerate(  # a column at a time: the stacked rows were 11 MB
        (p[:, 0], p[:, 1], p[:, 2], p[:, 3:7].sum(axis=1), p[:, 7], p[:, 8] + p[:, 9], p[:, 8])
    ):
        np.add.at(sums[:, k], m, col)
    np.add.at(sums[:, 7], m, c.cached_tokens)
    other = np.flatnonzero(kind_is(c, "model") & ~c.is_model)  # in flight, or a parent
    np.add.at(sums[:, 3], par[other], vg.recorded_dur[other])
    return sums


def _step_tools(vg: VGraph | RowGraph, par: Ix, n: int) -> tuple[pa.Array, I64, I64]:
    """The tools of each of ``n`` step rows, a step's in index order: their names (Arrow
    strings, coded), ns and the offsets of each step's (``par``: as :func:`_step_sums`)."""
    tools = np.flatnonzero(kind_is(vg.c, "tool") & (par >= 0))  # ascending
    tools = tools[np.argsort(par[tools], kind="stable")]
    off = np.searchsorted(par[tools], np.arange(n + 1))
    code, names = _leaf_codes(vg, tools)
    short = pa.array([k.removeprefix("tool:") for k in names], pa.string())
    return pa.DictionaryArray.from_arrays(code, short), vg.recorded_dur[tools], off


def in_flight(vg: VGraph) -> tuple[str, ...]:
    """The spans left open, as ``build_report`` names them."""
    c = vg.c
    i = np.flatnonzero(c.in_flight)
    return tuple(
        f"{sid} {k} '{nm}', open since {secs(t - vg.start_ns)} s into the run"
        for sid, k, nm, t in zip(
            _take(c.ids, i), _take(c.kinds, i), _take(c.names, i), c.t0[i].tolist(), strict=True
        )
    )


def build_report(vg: VGraph, header: RunHeader) -> Report:
    """``build_report(build_graph(trace))`` from the columns, without its two long parts:
    ``steps`` and ``path`` are empty (:func:`step_columns` and :func:`path_columns` give them
    as columns; :class:`ColumnReport` puts them together)."""
    c: Columns = vg.c
    V = recorded(vg, vg.start_ns)
    c.drop_pages()  # the instants, copied into V: the tally reads the model columns
    critical, _ = tally(vg, V, vg.back_link, vg.recorded_dur, vg.end_ns, None)
    del V
    used = busy(vg, critical)
    return Report(
        task=header.task.name,
        tier=header.tier.name,
        status=str(c.end["status"]) if c.end is not None else "incomplete",
        complete=c.complete,
        problems=c.problems,
        in_flight=in_flight(vg),
        measured_ns=vg.measured_ns,
        critical={k: critical[k] for k in category_order(set(critical))},
        busy={k: used[k] for k in category_order(set(used))},
        steps=(),
        path=(),
        input_tokens=int(c.parts[:, 7].sum()),
        cached_tokens=int(c.cached_tokens.sum()),
        trims=c.trims,
        **c.outside,
        lateness=c.lateness,
    )


class Recorded(NamedTuple):
    """A run known by its typed header only (what :func:`agentloop.config.tiers.faster_tier`
    reads of a trace)."""

    run: RunHeader


class ColumnReport(NamedTuple):
    """Everything ``report`` prints of a big trace, worked out on its columns (the graph not
    kept: the rows are columns, the per-tier and per-agent tables made already)."""

    c: Columns
    header: RunHeader
    head: Report  # steps and path empty: they are the columns below
    steps: StepColumns
    path: PathColumns
    spent: CostBreakdown
    tiers: list[dict[str, Any]]  # :func:`agentloop.analysis.agents.usage` by tier ...
    agents: list[dict[str, Any]] | None  # ... and by agent, when there are sub-agents
    tier_line: str | None = None  # the headline's faster-tier line, if asked for (report_of)

    @property
    def report(self) -> Report:
        """The whole :class:`Report`, a Python object per step and path segment."""
        return dataclasses.replace(self.head, steps=self.steps.rows(), path=self.path.rows())

    @property
    def text_report(self) -> Report:
        """The same :class:`Report` for the text renderer, its steps and path as views that
        make the rows it prints, not a Python object for each of them."""
        return dataclasses.replace(
            self.head, steps=StepRowsView(self.steps), path=PathRowsView(self.path)
        )

    def document_text(self, option: int) -> Iterator[Any]:
        """``orjson.dumps(self.document(), option=option)`` (``option``: with
        ``OPT_INDENT_2``) as pieces to write one after another (:func:`jsontext.dump`), the
        steps and path made a column at a time (:mod:`agentloop.analysis.report_json`). The
        cache's pages are let go before the steps and every few chunks after: the per-tier rows
        read the model columns, and the path's texts are picked from the names as they are
        written (a million spans' resident pages grew 58 -> 121 MB while it wrote)."""
        doc = jsontext.dump(self.document(text=True), option)
        return dropping(doc, self.c.drop_pages)

    def document(self, text: bool = False) -> dict[str, Any]:
        """What ``report --json`` prints: :func:`agentloop.analysis.report.report_document`,
        its steps and path straight from the columns (``text``: as :class:`jsontext.Raw`
        text already, for :meth:`document_text`)."""
        doc = report_json(self.head)
        if text:
            doc["steps"] = steps_text(self.steps)
            doc["critical_path"] = path_text(self.path)
        else:
            doc["steps"] = steps_json(self.steps)
            rows = self.path.rows()
            doc["critical_path"] = path_json(*zip(*rows, strict=True)) if rows else []
        doc["cost"] = cost.as_json(self.spent)
        doc["tiers"] = self.tiers
        if self.agents is not None:
            doc["agents"] = self.agents
        doc.update(unsplit_fields(list(self.c.unsplit)))
        return doc

    def usage_text(self) -> str:
        """:func:`agentloop.analysis.agents.render_usage`."""
        return render_usage_rows(self.tiers, self.agents)


def _tier_line(vg: VGraph, header: RunHeader, tiers: dict[str, Any] | None) -> str:
    """:func:`agentloop.analysis.whatif.faster_tier_line`, re-timed on the columns."""
    from agentloop.analysis import vwhatif

    return tier_line(Recorded(header), tiers, lambda sc: vwhatif.headline(vg, sc))


_NONE = np.zeros(0, np.int32)
# what a report's graph holds in place of its candidate lists once the headline is re-timed: the
# recorded path, tallies and rows follow the recorded links only (a pass that read these would
# see no position: its arrays would not fit the instants')
_NO_CANDIDATES = Cands(np.zeros(0, np.bool_), _NONE, _NONE, _NONE, _NONE, _NONE, _NONE, _NONE)


def report_of(c: Columns, path: object = None, tiers: dict[str, Any] | None = None) -> ColumnReport:
    """The report, cost and critical path of a trace's columns (``path``: its file, named in
    a header's error; ``tiers``: the headline's faster-tier line is re-timed first, before the
    report's rows are made beside the passes' arrays)."""
    vg = build(c)
    header = parse_header(c.header, path)
    line = None if tiers is None else _tier_line(vg, header, tiers)
    vg = dataclasses.replace(vg, cd=_NO_CANDIDATES)  # the last re-timing done: 30 MB freed
    idx, ns, gap = segments(vg)
    on = np.zeros(len(vg), np.bool_)
    on[idx[~gap]] = True
    c.drop_pages()  # between the parts: each reads columns of the file the next does not
    report = build_report(vg, header)
    rg = RowGraph.of(vg)
    del vg  # the passes are done: the gaps and links go before the rows are made
    release_heap()
    c.drop_pages()
    # the per-tier and per-agent tables made now, so the report keeps no graph
    per_tier = usage_of_columns(rg, header, on, "tier")
    subs = kind_is(c, "agent").any()
    per_agent = usage_of_columns(rg, header, on, "agent") if subs else None
    del on
    release_heap()
    c.drop_pages()
    steps = step_columns(rg)
    c.drop_pages()
    out = ColumnReport(
        c,
        header,
        report,
        steps,
        path_columns(rg, idx, ns, gap),
        cost.of_columns(c, header),
        per_tier,
        per_agent,
        line,
    )
    release_heap()  # before the text is made: what the arrays left on the heap
    return out
