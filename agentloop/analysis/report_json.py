"""``report --json``'s steps and critical path as JSON text, a column and a chunk at a time.

The indented JSON text orjson writes of the rows, made a column at a time and a chunk of rows
at a time as they are written (:mod:`agentloop.analysis.jsontext`): a long run has 200,000 steps
and a million path segments, 220 MB of text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from agentloop.analysis import jsontext
from agentloop.analysis.report_rows import PathColumns, Picked, StepColumns


def _secs(ns: Any) -> jsontext.Column:
    return jsontext.numbers(np.asarray(ns, np.int64) / 1e9)  # as report._seconds divides


def _ints(v: Any) -> jsontext.Column:
    return jsontext.numbers(np.asarray(v, np.int64))


def steps_text(sc: StepColumns) -> jsontext.Raw:
    """:func:`agentloop.analysis.report.steps_json` as the indented JSON text orjson writes
    of it in the report (the list at two spaces), made a column at a time, a chunk of steps
    at a time (:class:`jsontext.Chunked`)."""
    off = np.asarray(sc.tool_off, np.int64)

    def tools(at: int, n: int) -> jsontext.Column:  # steps at .. at + n: their tool rows
        lo, hi = int(off[at]), int(off[at + n])
        rows = [
            ("name", jsontext.strings(sc.tool_names[lo:hi])),
            ("seconds", _secs(sc.tool_ns[lo:hi])),
        ]
        return jsontext.listings(rows, off[at : at + n + 1] - lo, 6)

    def model(at: int, n: int) -> jsontext.Column:
        parts = ("base", "reasoning", "decode", "other")
        return jsontext.records([(k, _secs(getattr(sc, k)[at : at + n])) for k in parts], 6)

    fields = [
        ("step", _chunks(jsontext.strings, sc.step)),
        ("start_s", _chunks(_secs, sc.start_ns)),
        ("duration_s", _chunks(_secs, sc.duration_ns)),
        ("model_s", jsontext.Chunked(model)),
        ("tools", jsontext.Chunked(tools)),
        ("input_tokens", _chunks(_ints, sc.input_tokens)),
        ("output_tokens", _chunks(_ints, sc.output_tokens)),
        ("reasoning_tokens", _chunks(_ints, sc.reasoning_tokens)),
        ("cached_tokens", _chunks(_ints, sc.cached_tokens)),
        ("cumulative_s", _chunks(_secs, sc.cumulative_ns)),
        ("in_flight", _chunks(lambda v: jsontext.bools(np.asarray(v, np.bool_)), sc.in_flight)),
    ]
    return jsontext.listing(fields, len(sc.step), 2)


def path_text(p: PathColumns) -> jsontext.Raw:
    """:func:`agentloop.analysis.report.path_json` as :func:`steps_text` writes the steps."""
    fields = [
        (k, _chunks(jsontext.strings, col))
        for k, col in (("step", p.step), ("kind", p.kind), ("name", p.name))
    ]
    return jsontext.listing([*fields, ("seconds", _chunks(_secs, p.ns))], len(p.step), 2)


def _chunks(
    text: Callable[[Any], jsontext.Column | jsontext.Quoted], values: Any
) -> jsontext.Chunked:
    """The JSON of ``values`` (a list, an array or :class:`Picked`) made by ``text`` a chunk
    of rows at a time, as they are written: whole, a million path segments' seconds alone were
    60 MB of text and offsets at once."""
    if isinstance(values, Picked):
        return jsontext.Chunked(lambda a, n: text(values.slice(a, n)))
    return jsontext.Chunked(lambda a, n: text(values[a : a + n]))


def dropping(parts: Iterator[Any], drop: Callable[[], None]) -> Iterator[Any]:
    """``parts`` as they are, ``drop`` (:meth:`agentloop.analysis.columnar.Columns.drop_pages`)
    called before the first and every :data:`DROP_EVERY` after."""
    for k, part in enumerate(parts):
        if not k % DROP_EVERY:
            drop()
        yield part


DROP_EVERY = 16  # parts written between two drops of the cache's pages: 65,536 rows of a list
