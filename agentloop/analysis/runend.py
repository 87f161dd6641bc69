"""The columnar cache's run-end hook: a big run's trace gets its columns when the run ends.

Light on purpose (no numpy, no Arrow): every run's end calls :func:`cache_trace`, and most
traces are small enough to be analysed with the loops, so only a big one pays for importing
:mod:`agentloop.analysis.store` and building its columns.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

COLUMNAR_BYTES = 4 << 20  # traces from this size on are analysed on columns (about 10,000 spans)


def cache_trace(trace: str | Path) -> None:
    """Make the cache of a finished run's trace, if it is big enough to be analysed on columns
    (``await asyncio.to_thread(cache_trace, path)`` once the trace is closed:
    :func:`agentloop.wiring.execute.execute` does). Never raises for a trace that cannot be
    read or a folder that cannot be written: the JSONL is the record, the cache only saves the
    next analysis its reading."""
    from agentloop.errors import TraceFileError

    p = Path(trace)
    with contextlib.suppress(TraceFileError, OSError):
        if p.stat().st_size >= COLUMNAR_BYTES:
            from agentloop.analysis.store import load_columns

            load_columns(p)
