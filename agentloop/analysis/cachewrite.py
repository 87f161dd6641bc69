"""A cold trace's columnar cache written in a thread while a command analyses the columns.

:func:`agentloop.analysis.store.load_columns` writes the cache it made before handing the
columns back (0.3-0.7 s of a million spans' cold ``whatif``, most of it in Arrow's C++ writer and
zlib's CRC, both without the GIL). A command that analyses the columns next takes the writer of
:func:`written_meanwhile` instead: the table is made at once (so the header's and metadata's
dicts are serialised before the analysis runs), every numpy array of the columns is made
read-only (an analysis writing into one raises, instead of racing the writer's read of it), and
the file is written by a thread joined when the ``with`` block ends. A write that fails costs
the next analysis its rebuild, never this command its answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from agentloop.analysis import store
from agentloop.analysis.columnar import Columns
from agentloop.log import get_logger


@contextlib.contextmanager
def written_meanwhile() -> Iterator[store.Writer]:
    """A cache writer for :func:`~agentloop.analysis.store.load_columns` (its ``write``) that
    writes in a thread, joined on leaving the block."""
    with ThreadPoolExecutor(1, thread_name_prefix="agentloop-cache") as pool:

        def write(trace: Path, c: Columns, key: dict[str, Any]) -> None:
            table = store.to_table(c, key)
            freeze(c)
            pool.submit(_quietly, trace, table)

        yield write


def freeze(c: Columns) -> None:
    """Make every numpy array of ``c`` read-only (the Arrow arrays are already)."""
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        if isinstance(value, np.ndarray):
            value.flags.writeable = False


def _quietly(trace: Path, table: Any) -> None:
    """:func:`~agentloop.analysis.store.write_table`, a failure logged, never raised."""
    try:
        store.write_table(trace, table)
    except Exception:  # a bug in the writer: the cache is a saving, not the command's answer
        get_logger("agentloop.analysis").warning("cache_write_failed", trace=str(trace))
