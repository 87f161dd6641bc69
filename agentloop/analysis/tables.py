"""Traces as tables a data team queries: spans, model calls, tool calls, critical path, runs.

:func:`trace_tables` turns one trace's columns into five Arrow tables keyed by ``run`` (the
trace's file name, unique in a suite folder); :func:`write_tables` writes a set of them as
Parquet files in a folder, one file per table, that DuckDB, polars and pandas read as they are.
Times are integer nanoseconds (``*_ns``) from the run span's start, so runs line up. The
columns are listed in README.md ("Traces as tables").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentloop.analysis.columnar import Columns
from agentloop.analysis.strcols import kind_is
from agentloop.analysis.vector import VGraph, build, on_path, tally

TABLES = ("runs", "spans", "model_calls", "tool_calls", "critical_path")


def trace_tables(run: str, c: Columns, extra: dict[str, Any] | None = None) -> dict[str, pa.Table]:
    """The five tables of one trace; ``extra``: more columns for its ``runs`` row (a suite's
    record of the run: task repeat, success, cost)."""
    vg = build(c)
    n = len(c)
    rec = np.empty(2 * n + 1, np.int64)
    rec[0:-1:2], rec[1::2], rec[-1] = c.t0, c.t1, vg.start_ns
    on = np.zeros(n, np.bool_)
    if len(vg.roots):
        pos = on_path(vg, rec, vg.back_link)
        on[pos[(pos & 1) == 1] >> 1] = True
    cats, _ = tally(vg, rec, vg.back_link, vg.recorded_dur, vg.end_ns, None)
    header = c.header
    tier = (header.get("tier") or {}).get("name")
    task = (header.get("task") or {}).get("name")
    runs = np.full(n, run, object)
    step_of = vg.step_of
    step = pc.if_else(
        pa.array(step_of >= 0),
        c.step_label.take(pa.array(np.maximum(step_of, 0))),
        pa.scalar(None, pa.string()),
    )
    t0, t1 = c.t0 - vg.start_ns, c.t1 - vg.start_ns
    spans = _spans(c, runs, step, t0, t1, on)
    m = vg.models
    p = c.parts
    model_calls = _model_calls(c, vg, runs, step, tier, t0, t1, on)
    tools = np.flatnonzero(kind_is(c, "tool"))
    tool_calls = _tool_calls(c, vg, runs, step, t0, t1, on, tools)
    critical = pa.table(
        {
            "run": pa.array([run] * len(cats), pa.string()),
            "tier": pa.array([tier] * len(cats), pa.string()),
            "category": pa.array(list(cats), pa.string()),
            "ns": pa.array(list(cats.values()), pa.int64()),
        }
    )
    row = {
        "run": run,
        "run_id": header.get("run_id"),
        "task": task,
        "tier": tier,
        "model": (header.get("tier") or {}).get("model"),
        "status": (c.end or {}).get("status", "incomplete"),
        "complete": c.complete,
        "measured_ns": vg.measured_ns,
        "spans": n,
        "model_calls": len(m),
        "tool_calls": len(tools),
        "input_tokens": int(p[:, 7].sum()),
        "output_tokens": int((p[:, 8] + p[:, 9]).sum()),
        **(extra or {}),
    }
    return {
        "runs": pa.Table.from_pylist([row]),
        "spans": spans,
        "model_calls": model_calls,
        "tool_calls": tool_calls,
        "critical_path": critical,
    }


def _spans(c: Columns, runs: Any, step: Any, t0: Any, t1: Any, on: Any) -> pa.Table:
    """The ``spans`` table: every span with its parent, step, instants and critical-path mark."""
    return pa.table(
        {
            "run": pa.array(runs, pa.string()),
            "span_id": c.ids,
            "parent_id": pc.if_else(
                pa.array(c.parent >= 0),
                c.ids.take(pa.array(np.maximum(c.parent, 0))),
                pa.scalar(None, pa.string()),
            ),
            "kind": c.kinds.cast(pa.string()),
            "name": c.names,
            "status": c.statuses.cast(pa.string()),
            "step": step,
            "start_ns": t0,
            "end_ns": t1,
            "duration_ns": t1 - t0,
            "in_flight": c.in_flight,
            "on_critical_path": on,
        }
    )


def _model_calls(
    c: Columns, vg: VGraph, runs: Any, step: Any, tier: Any, t0: Any, t1: Any, on: Any
) -> pa.Table:
    """The ``model_calls`` table: each model span's phases, tokens and speed."""
    m = vg.models
    p = c.parts
    return pa.table(
        {
            "run": pa.array(runs[m], pa.string()),
            "span_id": c.ids.take(pa.array(m, pa.int64())),
            "step": step.take(pa.array(m, pa.int64())),
            "tier": pa.array([tier] * len(m), pa.string()),
            "start_ns": t0[m],
            "duration_ns": (t1 - t0)[m],
            **{f"{k}_ns": p[:, j] for j, k in enumerate(("base", "reasoning", "decode", "tail"))},
            **{f"{k}_ns": p[:, j + 4] for j, k in enumerate(("wait", "retry", "overhead"))},
            "input_tokens": p[:, 7],
            "cached_input_tokens": c.cached_tokens,
            "reasoning_tokens": p[:, 8],
            "visible_tokens": p[:, 9],
            "output_tokens": p[:, 8] + p[:, 9],
            "output_tps": c.output_tps,
            "timed": c.timed,
            "on_critical_path": on[m],
        }
    )


def _tool_calls(
    c: Columns, vg: VGraph, runs: Any, step: Any, t0: Any, t1: Any, on: Any, tools: Any
) -> pa.Table:
    """The ``tool_calls`` table: each tool span's tool, status, instants and queueing."""
    return pa.table(
        {
            "run": pa.array(runs[tools], pa.string()),
            "span_id": c.ids.take(pa.array(tools, pa.int64())),
            "step": step.take(pa.array(tools, pa.int64())),
            "tool": pa.array(
                [
                    None if x is None else x.removeprefix("tool:")
                    for x in c.tool_category.take(pa.array(tools, pa.int64())).to_pylist()
                ],
                pa.string(),
            ),
            "status": c.statuses.take(pa.array(tools, pa.int64())).cast(pa.string()),
            "start_ns": t0[tools],
            "duration_ns": (t1 - t0)[tools],
            "queued_ns": vg.queue_at(tools),
            "in_flight": c.in_flight[tools],
            "on_critical_path": on[tools],
        }
    )


def write_tables(folder: Path, parts: list[dict[str, pa.Table]]) -> dict[str, int]:
    """Write each table (all traces' rows together) as ``folder/<table>.parquet``; rows each."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = {}
    for name in TABLES:
        t = pa.concat_tables([p[name] for p in parts], promote_options="default")
        pq.write_table(t, folder / f"{name}.parquet", compression="zstd")
        rows[name] = t.num_rows
    return rows
