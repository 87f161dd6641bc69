"""``agentloop report TRACE``: where a recorded run's time went, per category, step and path."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentloop.analysis import cost
from agentloop.analysis.graph import build_graph, gc_paused, load_quickly
from agentloop.analysis.report import (
    build_report,
    report_document,
    unsplit_calls,
    unsplit_note,
)
from agentloop.analysis.report_text import render_report
from agentloop.analysis.runend import COLUMNAR_BYTES
from agentloop.config.tiers import load_tiers
from agentloop.trace.reader import Trace


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="where a recorded run's time went",
        description=(
            "Time per category (base, reasoning, decode, tail, wait, retry, overhead, each tool, "
            "framework), a per-step table with cumulative time, and the critical path from the "
            "recorded dependency edges. Incomplete traces are analysed as far as they go."
        ),
    )
    p.add_argument("trace", type=Path, help="trace file (JSONL)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a self-contained HTML report: waterfall, categories, steps, speedup curve",
    )
    p.add_argument(
        "--transcript",
        action="store_true",
        help="print the run as a conversation instead: prompts, model text, tool calls and "
        "output (long ones folded), the answer and the success check",
    )
    p.set_defaults(func=main)


def load_for_analysis(path: Path) -> Trace:
    """Load a trace for a one-shot analysis command, and freeze a big one out of the collector's
    sight.

    The CLI's decision, not the library's: after loading a million spans, every full collection
    would rescan them all (seconds); ``gc.freeze`` moves them out of the collector's sight
    (reference counting still frees them). Garbage is collected first so nothing collectable is
    frozen; loading makes no reference cycles. A trace under the columnar size (about 10,000
    spans) is not worth it: its rescans cost milliseconds, and the full collection before the
    freeze costs as much as the caller's heap (0.1 s a command in a test worker's process, where
    the CLI runs in-process).
    """
    try:
        big = Path(path).stat().st_size >= COLUMNAR_BYTES
    except OSError:
        big = False  # the load says what is wrong with the path
    if not big:
        return load_quickly(path)
    gc.collect()
    trace = load_quickly(path)
    gc.freeze()
    return trace


@contextlib.contextmanager
def analysis_status(path: Path, cached: bool = True) -> Iterator[None]:
    """While a big trace is read and checked (seconds to a minute), a live status line on a
    terminal's stderr (rich), as a run shows its progress; nothing when stderr is not a
    terminal or the trace is small. ``cached``: the command reads the columnar cache, so a
    fresh one shows nothing either and a missing one is made."""
    from agentloop.analysis import store

    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size < COLUMNAR_BYTES or not sys.stderr.isatty() or (cached and store.is_fresh(path)):
        yield
        return
    from rich.console import Console

    what = f"reading {path.name} ({size / 1e6:,.0f} MB): every record checked"
    if cached:
        what += ", once; the columns are cached for the next question"
    with Console(stderr=True).status(what):
        yield


@contextlib.contextmanager
def big_trace_columns(path: Path) -> Iterator[Any]:
    """The columns of a trace big enough to analyse on them (:func:`agentloop.analysis.store.
    columns_for_analysis`), else None, for the block to analyse: a cold trace's cache is
    written meanwhile, by a thread joined when the block ends (:mod:`agentloop.analysis.
    cachewrite`); the C heap gives big blocks their own mappings first
    (:func:`agentloop.analysis.columnar.map_big_blocks`: a big trace's freed arrays go back to
    the system), Arrow allocates from it (:func:`agentloop.analysis.columnar.arrow_on_heap`),
    and numpy asks for no huge pages (:func:`agentloop.analysis.columnar.small_pages`)."""
    from agentloop.analysis import store
    from agentloop.analysis.cachewrite import written_meanwhile
    from agentloop.analysis.columnar import (
        arrow_on_heap,
        map_big_blocks,
        release_heap,
        small_pages,
    )

    map_big_blocks()
    arrow_on_heap()
    small_pages()
    with written_meanwhile() as pool:
        with analysis_status(path), gc_paused():
            columns = store.columns_for_analysis(path, pool)
        release_heap(arrow=True)  # what a cold build freed: the C heap's, Arrow's pool's
        yield columns


def emit_json(data: dict[str, Any]) -> None:
    """``data`` as indented JSON on stdout. The bytes go to stdout's binary buffer when it has
    one: a long run's report is 200 MB of JSON, and decoding it to text, adding the newline and
    encoding it back made three more copies (0.4 s, 700 MB)."""
    write_parts([orjson.dumps(data, option=JSON_OPTIONS)])


JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE


def write_parts(parts: Iterable[Any]) -> None:
    """Bytes (or buffers) to stdout one after another, to its binary buffer when it has one."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (io.StringIO)
        sys.stdout.write(b"".join(parts).decode())
        return
    sys.stdout.flush()  # what was printed before comes first
    for part in parts:
        buffer.write(part)
    buffer.flush()


def _load_showing(path: Path) -> Trace:
    with analysis_status(path, cached=False):
        return load_for_analysis(path)


async def main(args: argparse.Namespace) -> int:
    if args.html is None and not args.transcript:  # those read text, not numbers: the loops
        done = await asyncio.to_thread(_report_on_columns, args)
        if done is not None:  # a big trace: on its columns, cached beside it (issue 27)
            return done
    trace = await asyncio.to_thread(_load_showing, args.trace)
    graph = build_graph(trace)
    report = build_report(graph)
    if args.html is not None:  # issue 13: the same analysis as one HTML file
        from agentloop.export.html import report_html, write_html

        tiers = load_tiers()  # the headline names the fastest faster tier you have
        await asyncio.to_thread(write_html, args.html, lambda t: report_html(t, tiers=tiers), trace)
    if args.transcript:  # issue 24: the conversation, as the HTML page shows it beside the bars
        from agentloop.commands._transcript_term import print_transcript
        from agentloop.export.transcript import transcript

        print_transcript(transcript(trace))
        return 0
    spent = cost.of_trace(trace)  # issue 14: cost by category and step at the tier's prices
    if args.json:
        emit_json(report_document(trace, report, spent))
    else:
        from agentloop.analysis.agents import render_usage
        from agentloop.analysis.whatif import faster_tier_line

        line = faster_tier_line(graph, load_tiers())
        _print_text(report, line, unsplit_calls(trace), render_usage(graph), spent)
    return 0


def _report_on_columns(args: argparse.Namespace) -> int | None:
    """The report of a trace big enough to report on its columns (:func:`big_trace_columns`),
    else None."""
    with big_trace_columns(args.trace) as columns:
        return None if columns is None else _on_columns(args, columns)


def _on_columns(args: argparse.Namespace, columns: Any) -> int:
    """The report of a big trace from its columns: the same output as the loops'."""
    from agentloop.analysis.vreport import report_of

    tiers = None if args.json else load_tiers()  # the text's headline: re-timed first
    with gc_paused():  # a row per step and per path segment: no cycles
        r = report_of(columns, args.trace, tiers)
        if args.json:
            write_parts(r.document_text(JSON_OPTIONS))
            return 0
        _print_text(
            r.text_report, r.tier_line or "", list(columns.unsplit), r.usage_text(), r.spent
        )
    return 0


def _print_text(
    report: Any, line: str, unsplit: list[dict[str, Any]], per: str, spent: cost.CostBreakdown
) -> None:
    """The report as text: the headline (the run's times, then ``line``: what the fastest
    faster tier would buy), the sections, the unsplit calls' note, the per-tier and per-agent
    table (``per``, issue 23) and the cost (issue 14)."""
    head, gap, rest = render_report(report).partition("\n\n")
    if unsplit:  # an import's calls booked all as base: the line says so
        line += f" [{len(unsplit)} call(s) not split: see the note below]"
    print(f"{head}\n  {line}{gap}{rest}")
    if unsplit:
        print("\n" + unsplit_note(unsplit))
    if per:
        print("\n" + per)
    if spent.priced:
        print("\n" + cost.render(spent))
