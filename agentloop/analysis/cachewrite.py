"""A cold trace's columnar cache written by a thread while the columns are built and analysed.

:func:`agentloop.analysis.store.load_columns` given a pool writes each group of columns the cold
builder hands over by the pool's thread while the builder goes on (Arrow's IPC writer, without
the GIL), and seals the file (its directory, its CRC read back, the rename) while the command
analyses the columns, views of the file just written. :func:`written_meanwhile` is that pool,
joined when the ``with`` block ends: the cache is whole (or, when it could not be written,
absent) once the block is left. A write that fails costs the next analysis its rebuild, never
this command its answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor


@contextlib.contextmanager
def written_meanwhile() -> Iterator[Executor]:
    """The cache writer's thread for :func:`~agentloop.analysis.store.load_columns` (its
    ``pool``), joined on leaving the block."""
    with ThreadPoolExecutor(1, thread_name_prefix="agentloop-cache") as pool:
        yield pool
