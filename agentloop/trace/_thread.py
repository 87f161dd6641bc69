"""The process's trace writer thread: records leave the event loop as bytes, in order.

A run's records pass through the redactor and truncator before the sinks, and a large record
(a tool's 138k-character output) costs milliseconds there, on the event loop that is timing
every stream of the process (issue 28). So :class:`agentloop.trace.writer.Pipeline` takes a
snapshot of each record on the loop (one ``orjson.dumps``, microseconds even for a large one:
later changes to the caller's dicts cannot reach the trace) and hands it to this thread, which
parses, redacts, truncates and writes it with the pipeline's sinks. One thread and one FIFO for
the process: every pipeline's records are written in the order they were given, each with its
own ``write(2)`` as soon as the thread reaches it (microseconds behind on a quiet machine), so
a killed run leaves every record up to the few in flight. A pipeline's ``close`` waits for its
records to be written; the thread itself is started on first use and is a daemon (it holds
nothing once the queue is empty).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import orjson

# a job: the function that processes one item on the thread, and the item
Job = tuple[Callable[[Any], None], Any]

_queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def snapshot(record: dict[str, Any]) -> bytes | dict[str, Any]:
    """The record frozen as JSON bytes (a dict it cannot encode is passed on as it is)."""
    try:
        return orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # a value orjson does not know: the processors and sinks see it as given
        return dict(record)


def thaw(item: bytes | dict[str, Any]) -> dict[str, Any]:
    """The record a :func:`snapshot` froze."""
    out: dict[str, Any] = orjson.loads(item) if isinstance(item, bytes) else item
    return out


def submit(fn: Callable[[Any], None], item: Any) -> None:
    """Run ``fn(item)`` on the writer thread, after every job submitted before it."""
    _start()
    _queue.put((fn, item))


def wait_written() -> None:
    """Block until every job submitted before this call has run (from any thread but the
    writer's own)."""
    if threading.current_thread() is _thread:
        return
    done = threading.Event()
    submit(lambda _: done.set(), None)
    done.wait()


def writer_thread() -> threading.Thread | None:
    """The writer thread, once started (for tests: which thread wrote)."""
    return _thread


def _start() -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_work, name="agentloop-trace-writer", daemon=True)
            _thread.start()


def _work() -> None:
    while True:
        fn, item = _queue.get()
        try:
            fn(item)
        except Exception:  # the job reports its own failures; the thread goes on
            continue
