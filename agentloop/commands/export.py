"""``agentloop export TRACE``: a trace as Perfetto JSON, as OTLP JSON, or sent to a collector;
a trace or a suite folder as Parquet tables (``--format parquet -o DIR``)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import orjson

from agentloop.analysis.graph import load_quickly
from agentloop.errors import ConfigError

FORMATS = ("perfetto", "otlp-json", "parquet")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="export a trace to Perfetto, OTLP JSON or a collector",
        description=(
            "Write a trace as Chrome trace-event JSON for Perfetto's UI (--format perfetto) or as "
            "an OTLP/JSON ExportTraceServiceRequest (--format otlp-json), or send it to an "
            "OTLP/HTTP collector (--otlp URL). --format parquet -o DIR writes a trace or a whole "
            "suite folder as tables (runs, spans, model_calls, tool_calls, critical_path) for "
            "DuckDB, polars or pandas. Incomplete traces export what they hold, with the spans "
            "in flight marked."
        ),
    )
    p.add_argument("trace", type=Path, help="trace file (JSONL); with parquet, or a suite folder")
    p.add_argument("--format", choices=FORMATS, help="file format to write (with -o)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="file to write")
    p.add_argument(
        "--otlp",
        metavar="URL",
        help="send the spans to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318)",
    )
    p.set_defaults(func=main)


def _write(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(data))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror}") from None


def _parquet(source: Path, out: Path) -> dict[str, int]:
    """Tables of one trace or of every run of a suite folder, written into ``out``."""
    from agentloop.analysis.store import load_columns
    from agentloop.analysis.tables import trace_tables, write_tables

    if not source.is_dir():
        parts = [trace_tables(source.name, load_columns(source))]
    else:
        from agentloop.suite.records import load_suite

        parts = []
        for r in load_suite(source).runs:
            if r.trace and (source / r.trace).is_file():
                extra = {
                    "repeat": r.repeat,
                    "success": r.success,
                    "elapsed_s": r.elapsed_s,
                    "cost_usd": r.cost_usd,
                }
                run = f"{source.name}/{r.trace}"
                parts.append(trace_tables(run, load_columns(source / r.trace), extra))
        if not parts:
            raise ConfigError(f"{source}: no run of this suite left a trace to export")
    try:
        return write_tables(out, parts)
    except OSError as exc:
        raise ConfigError(f"{out}: cannot write: {exc.strerror}") from None


async def main(args: argparse.Namespace) -> int:
    if args.otlp is None and (args.format is None or args.output is None):
        raise ConfigError("export needs --format FORMAT -o FILE, or --otlp URL (or both)")
    if (args.format is None) != (args.output is None):
        raise ConfigError("--format and -o go together: which format, written where")
    if args.format == "parquet":
        if args.otlp:
            raise ConfigError("--otlp sends one trace's spans: use it without --format parquet")
        rows = await asyncio.to_thread(_parquet, args.trace, args.output)
        print(
            f"wrote {args.output}: "
            + ", ".join(f"{name}.parquet ({n:,} rows)" for name, n in rows.items())
        )
        return 0
    if args.trace.is_dir():
        raise ConfigError(f"{args.trace}: a folder exports only as --format parquet")
    trace = await asyncio.to_thread(load_quickly, args.trace)
    note = "" if trace.complete else f" (incomplete trace: {len(trace.in_flight)} in flight)"
    if args.format == "perfetto":
        from agentloop.export.perfetto import to_perfetto

        data = to_perfetto(trace)
        await asyncio.to_thread(_write, args.output, data)
        print(
            f"wrote {args.output}: {len(data['traceEvents'])} trace events{note}; "
            f"open it in Perfetto's UI or chrome://tracing"
        )
    if args.format == "otlp-json" or args.otlp:
        from agentloop.export.otlp import otlp_json, send_otlp, trace_spans

        spans = trace_spans(trace)
        if args.format == "otlp-json":
            await asyncio.to_thread(_write, args.output, otlp_json(spans))
            print(f"wrote {args.output}: {len(spans)} spans as OTLP JSON{note}")
        if args.otlp:
            await asyncio.to_thread(send_otlp, spans, args.otlp)
            print(f"sent {len(spans)} spans to {args.otlp}{note}")
    return 0
