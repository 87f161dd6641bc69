"""The field checks a trace file is parsed with: each names the file, line and field at fault.

A trace file is untrusted input: every field is checked where it is parsed, and a damaged one
raises :class:`agentloop.errors.TraceFileError` naming the file, the line and the field
(``tier.profile.output_tps``, ``attrs.timing.t_send``, ``after[1]`` ...), never a traceback.
Instants are integer ns on the run's clock, ``0 <= t <= MAX_INSTANT_NS``.

The checks are plain functions rather than pydantic models on purpose: a trace can hold millions
of span records, and pydantic's per-record validation measured 3x the cost of the JSON parse
itself (12 us against 3.7 us per reference record); the header, parsed once, goes through the
same helpers for one set of messages. The records (:mod:`agentloop.trace.schema`) and the typed
span attributes (:mod:`agentloop.trace.span_attrs`) are both checked with them.

Each check takes the :class:`Where`, the object, the key and the field's name for the message, and
returns the value typed: ``int_`` (an integer from 0 to :data:`MAX_COUNT`), ``str_``, ``obj`` (an object, ``{}`` when
absent or null), ``num`` (a finite number >= 0), ``opt_*`` (null allowed); ``instant`` checks a
value already read. ``int_`` and ``str_`` end in ``_`` so as not to shadow the builtins.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

from agentloop.errors import TraceFileError

MAX_INSTANT_NS = 100 * 86_400 * 10**9  # 100 days on the run's clock: later is a damaged file
MAX_COUNT = 2**63 - 1  # a count's (and a step's) bound: the analysis columns hold them in int64

__all__ = [
    "MAX_COUNT",
    "MAX_INSTANT_NS",
    "Where",
    "instant",
    "int_",
    "json_kind",
    "num",
    "obj",
    "opt_instant",
    "opt_int",
    "opt_str",
    "str_",
    "too_large",
]


class Where:
    """Where a value sits: file and line, for the error message."""

    __slots__ = ("line", "path")

    def __init__(self, path: object, line: int) -> None:
        self.path, self.line = path, line

    def fail(self, fld: str, msg: str) -> NoReturn:
        raise TraceFileError(f"{self.path}, line {self.line}, field '{fld}': {msg}")


def json_kind(v: object) -> str:
    return (
        "null"
        if v is None
        else type(v)
        .__name__.replace("str", "string")
        .replace("dict", "object")
        .replace("list", "array")
    )


def int_(
    w: Where,
    d: Mapping[str, Any],
    key: str,
    fld: str,
    default: int | None = 0,
) -> int:
    v = d.get(key, default)
    if type(v) is not int or v < 0:
        if v is None and default is None:
            w.fail(fld, "missing (an integer >= 0)")
        w.fail(fld, f"must be an integer >= 0, not {json_kind(v)} {v!r:.40}")
    if v > MAX_COUNT:
        too_large(w, fld, v)
    return v


def too_large(w: Where, fld: str, v: int) -> NoReturn:
    w.fail(fld, f"{v!r:.40} is past the largest count a trace holds ({MAX_COUNT}, int64)")


def opt_int(w: Where, d: Mapping[str, Any], key: str, fld: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if type(v) is not int or v < 0:
        w.fail(fld, f"must be an integer >= 0 or null, not {json_kind(v)} {v!r:.40}")
    if v > MAX_COUNT:
        too_large(w, fld, v)
    return v


def instant(w: Where, v: object, fld: str) -> int:
    if type(v) is not int:
        w.fail(fld, f"an instant must be integer ns, not {json_kind(v)} {v!r:.40}")
    if not 0 <= v <= MAX_INSTANT_NS:
        w.fail(fld, f"instant {v} ns is outside the run's clock (0 .. {MAX_INSTANT_NS})")
    return v


def opt_instant(w: Where, d: Mapping[str, Any], key: str, fld: str) -> int | None:
    v = d.get(key)
    return None if v is None else instant(w, v, fld)


def str_(w: Where, d: Mapping[str, Any], key: str, fld: str, default: str | None = "") -> str:
    v = d.get(key, default)
    if type(v) is not str:
        w.fail(fld, f"must be a string, not {json_kind(v)}")
    return v


def opt_str(w: Where, d: Mapping[str, Any], key: str, fld: str) -> str | None:
    v = d.get(key)
    if v is not None and type(v) is not str:
        w.fail(fld, f"must be a string or null, not {json_kind(v)}")
    return v


def obj(w: Where, d: Mapping[str, Any], key: str, fld: str) -> dict[str, Any]:
    v = d.get(key)
    if v is None:
        return {}
    if type(v) is not dict:
        w.fail(fld, f"must be an object, not {json_kind(v)}")
    return v


def num(w: Where, d: Mapping[str, Any], key: str, fld: str, *, positive: bool = False) -> float:
    v = d.get(key)
    if type(v) not in (int, float):
        w.fail(fld, f"must be a number, not {json_kind(v)} {v!r:.40}")
    x = float(v)  # type: ignore[arg-type]  # an int or a float: checked above
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        w.fail(fld, f"must be a finite number {'> 0' if positive else '>= 0'}, not {v!r}")
    return x
