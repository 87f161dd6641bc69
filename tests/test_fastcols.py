"""The fast cold builder is a screen: its Columns are the checked path's, or it hands the file over."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.analysis import _fastreport, store
from agentloop.analysis._cacheread import CallNames
from agentloop.analysis.columnar import Columns, columns_of
from agentloop.analysis.fastcols import fast_columns
from agentloop.analysis.graph import build_graph
from agentloop.analysis.synthetic import TraceBuilder, agent_lines, model_attrs, tier_record
from agentloop.analysis.synthetic_runs import StepSpec, fanout_run, sequential_run
from agentloop.errors import TraceFileError
from agentloop.trace.fields import MAX_INSTANT_NS
from agentloop.trace.reader import load_trace

# the fuzz tests' settings: the same examples every run (derandomised), a tmp_path per test
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

S = 1_000_000_000
MS = 1_000_000
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = sorted((ROOT / "traces" / "reference").glob("*.jsonl"))


def checked(path: Path) -> Columns:
    """Today's path: the checked reader, the Graph, ``columns_of``."""
    return columns_of(build_graph(load_trace(path)))


def differences(a: Columns, b: Columns) -> list[str]:
    """The fields of two Columns that differ (arrays by dtype, shape and value; a cache's call
    names, read when asked for, as the dict of lists they read as)."""
    out = []
    for f in dataclasses.fields(Columns):
        x, y = (getattr(c, f.name) for c in (a, b))
        x, y = (dict(v) if isinstance(v, CallNames) else v for v in (x, y))
        if isinstance(x, np.ndarray):
            same = x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
        elif isinstance(x, pa.Array):
            same = x.type == y.type and x.equals(y)
        else:
            same = type(x) is type(y) and x == y
        if not same:
            out.append(f.name)
    return out


def killed() -> list[bytes]:
    """Step 1 finished; step 2's model call was in flight when the run was killed."""
    b = sequential_run([StepSpec(300 * MS, visible=61, tools=(("read", 500 * MS),))], finish=False)
    run = b.records[1]["id"]
    st_ = b.start("step", "step 2", 1807 * MS, run, ["s2"], step=2)
    b.start("model", "chat demo", 1808 * MS, st_, ["s4"], step=2)
    return b.lines()


def measured_under_load() -> list[bytes]:
    """Model calls with the client's lateness (issue 28), one without."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    prev: list[str] = []
    for k, err in enumerate((0.031, 0.002, 0.25, None, 3)):
        step = b.start("step", f"step {k + 1}", k * S, run, prev, step=k + 1)
        m = b.start("model", "chat demo", k * S + MS, step, step=k + 1)
        attrs = model_attrs(k * S + MS, 100 * MS, 0, 30, 60.0, step=k + 1)
        if err is not None:
            attrs |= {"timing_error_s": err, "timing_under_load": err > 0.01}
        b.end(m, k * S + 800 * MS, **attrs)
        b.end(step, k * S + 900 * MS)
        prev = [step]
    b.end(run, 5 * S)
    b.finish(5 * S)
    return b.lines()


def marked_agent() -> list[bytes]:
    """A sub-agent named with the character the fast builder marks a step number's place
    with in a label's form: it asks the label's owner call by call."""
    lines = fanout_run([2, 1], rounds=2).lines()
    return [
        line.replace(b'"gen_ai.agent.name":"w0"', b'"gen_ai.agent.name":"w\\u0000"')
        for line in lines
    ]


def odd_invocations(first: bytes = b"-1", second: bytes = b"0") -> list[bytes]:
    """Sub-agents' invocations the writer does not write (-1 and 0): a label's form is made
    per agent and invocation, grouped apart from a missing one's."""
    lines = fanout_run([2, 1], rounds=2).lines()
    inv = b'"agent.invocation":'
    return [
        line.replace(inv + b"1", inv + first).replace(inv + b"2", inv + second) for line in lines
    ]


def wide_invocations() -> list[bytes]:
    """A hostile trace's invocations far apart (2**62 and 3): a key of agent times the widest
    invocation overflowed, and two agents' step labels took each other's forms."""
    return odd_invocations(str(2**62).encode(), b"3")


def calls_without_a_step() -> list[bytes]:
    """Every third model call started without its step (a sub-agent's too): its call row's
    label is the span's name, a form of its own beside the numbered calls of its agent."""
    lines, k = [], 0
    for line in fanout_run([2, 1], rounds=2).lines():
        if b'"kind":"model"' in line and b'"type":"span_start"' in line:
            k += 1
            if k % 3 == 0:
                line = re.sub(rb'"step":\d+,?', b"", line)
        lines.append(line)
    return lines


def odd_edges() -> list[bytes]:
    """An ``after`` naming an unknown span: the Graph notes it, so the screen hands it over."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    m = b.start("model", "chat demo", 2 * MS, run, ["nope"], step=1)
    b.end(m, 900 * MS, **model_attrs(5 * MS, 100 * MS, 40, 50, 60.0))
    b.end(run, 990 * MS)
    b.finish(995 * MS)
    return b.lines()


def unsplit() -> list[bytes]:
    """An imported call whose phases nothing split (issue 25): the checked path notes it."""
    b = TraceBuilder()
    run = b.start("run", "invoke_agent demo", 0)
    m = b.start("model", "chat demo", MS, run, step=1)
    b.end(m, S, **model_attrs(MS, 100 * MS, 0, 30, 60.0), unknown=["timing.t_first_visible"])
    b.end(run, S)
    b.finish(S)
    return b.lines()


def with_setup() -> list[bytes]:
    """A set-up span with a part under it before the run span, a check span after it (issue
    24): kept out of the agent's time, the set-up's workspace and sandbox in the header."""
    b = TraceBuilder()
    setup = b.start("setup", "set-up", 0)
    part = b.start("tool", "execute_tool mcp", 10, setup)
    b.end(part, 20, **{"gen_ai.tool.name": "mcp"})
    b.end(setup, MS, workspace="/w", sandbox={"kind": "bubblewrap"})
    run = b.start("run", "invoke_agent demo", MS)
    m = b.start("model", "chat demo", 2 * MS, run, step=1)
    b.end(m, S, **model_attrs(2 * MS, 100 * MS, 0, 30, 60.0))
    b.end(run, S)
    check = b.start("check", "success check", S)
    b.end(check, S + MS, passed=True)
    b.finish(S + MS)
    return b.lines()


def check_left_open() -> list[bytes]:
    """The set-up as :func:`with_setup`'s, a check span still open at the end (killed in its
    check): report's wall-time parts name it open."""
    b = TraceBuilder()
    setup = b.start("setup", "set-up", 0)
    b.end(setup, MS, workspace="/w")
    run = b.start("run", "invoke_agent demo", MS)
    m = b.start("model", "chat demo", 2 * MS, run, step=1)
    b.end(m, S, **model_attrs(2 * MS, 100 * MS, 0, 30, 60.0))
    b.end(run, S)
    b.start("check", "success check", S)
    return b.lines()


def after_the_setup() -> list[bytes]:
    """A span ``after`` the set-up span: the Graph drops that edge with a note."""
    lines = with_setup()
    rec = orjson.loads(lines[6])
    assert rec["id"] == "s4"
    lines[6] = orjson.dumps({**rec, "after": ["s1"]})
    return lines


FAST: dict[str, Callable[[], list[bytes]]] = {
    "agent": lambda: list(agent_lines(40)),
    "agent, 5 tools": lambda: list(agent_lines(25, tools_per_step=5)),
    "parallel": lambda: sequential_run(
        [
            StepSpec(300 * MS, visible=61, tools=(("a", 1 * S), ("b", 3 * S), ("c", 3 * S))),
            StepSpec(300 * MS, visible=2, reasoning=30, tools=(("a", 1 * S),)),
            StepSpec(200 * MS, visible=1, tools=(("b", 10 * MS),)),
        ]
    ).lines(),
    "retries": lambda: sequential_run(
        [StepSpec(300 * MS, visible=61, attempts=((500 * MS, 1 * S),), tail_ns=3 * MS)]
    ).lines(),
    "sub-agents": lambda: fanout_run([4, 1, 2, 1, 1], rounds=2).lines(),
    "sub-agents, tiers": lambda: fanout_run(
        [3, 1],
        tiers=[tier_record("a", output_tps=50), tier_record("b", output_tps=500)],
        sub_tier="b",
    ).lines(),
    "killed": killed,
    "an agent name holding the mark": marked_agent,
    "invocations -1 and 0": odd_invocations,
    "invocations 2**62 and 3": wide_invocations,
    "model calls without a step": calls_without_a_step,
    "measured under load": measured_under_load,
    "set-up and check spans": with_setup,
    "check left open": check_left_open,
    **{f"reference {p.stem}": (lambda p=p: p.read_bytes().splitlines()) for p in REFERENCE},
}


def with_event() -> list[bytes]:
    """A ``span_event`` record (a context trim) inside the run span."""
    lines = list(agent_lines(3))
    event = {"type": "span_event", "span": "s1", "t": 5000, "name": "context.trim", "attrs": {}}
    return [*lines[:3], orjson.dumps(event), *lines[3:]]


def with_old_trims() -> list[bytes]:
    """An older trace's trims: a model span's ``context.trimmed`` end attribute (the checked
    path reads them from there when there are no trim events)."""
    out = []
    for line in agent_lines(3):
        rec = orjson.loads(line)
        if rec["type"] == "span_end" and "timing" in rec.get("attrs", {}):
            rec["attrs"]["context.trimmed"] = [{"dropped": 1}]
        out.append(orjson.dumps(rec))
    return out


HANDED_OVER: dict[str, Callable[[], list[bytes]]] = {
    "span event": with_event,
    "older trims": with_old_trims,
    "cut last line": lambda: [*list(agent_lines(3))[:-1], list(agent_lines(3))[-1][:-9]],
    "odd edges": odd_edges,
    "after the set-up": after_the_setup,
    "unsplit": unsplit,
    "header only": lambda: TraceBuilder().lines()[:1],
}


def edited(old: bytes, new: bytes, where: bytes = b'"gen_ai.tool.name":"a"') -> list[bytes]:
    """The fuzz's base trace with ``old`` replaced by ``new`` in the first line holding
    ``where`` (a tool span's end record, unless told)."""
    lines = base_lines()
    i = next(k for k, line in enumerate(lines) if where in line)
    assert old in lines[i]
    lines[i] = lines[i].replace(old, new, 1)
    return lines


def with_tool_data(value: bytes) -> list[bytes]:
    """A tool span's ``data`` holding ``value`` as written: a key no column reads."""
    return edited(b'"output":""', b'"output":"","data":{"x":' + value + b"}")


# what a typed decoder may read otherwise than the checked reader (a missing key and null, a
# number past a column's int64 or a float's range, text JSON does not allow, a key twice, two
# records on a line), each with whether the checked path refuses the file (a count past int64:
# the reader takes it, the columns' int64 arrays cannot)
TRAPS: dict[str, tuple[Callable[[], list[bytes]], bool]] = {
    "a tool's ok null (missing: false)": (lambda: edited(b'"ok":true', b'"ok":null'), True),
    "a tool's output null (missing: empty)": (
        lambda: edited(b'"output":""', b'"output":null'),
        True,
    ),
    "a tool's arguments null, spaced": (
        lambda: edited(b'"output":""', b'"output":"","arguments" :  null'),
        True,
    ),
    "a tool's call id null, escaped": (
        lambda: edited(b'"output":""', b'"output":"","gen_ai.tool.call\\u002eid":null'),
        True,
    ),
    "a tool's queue time null": (lambda: edited(b'"ok":true', b'"queued_ns":null'), True),
    "a count written as a float": (lambda: edited(b'"ok":true', b'"queued_ns":1.0'), True),
    "a count past int64": (lambda: edited(b'"ok":true', b'"queued_ns":9223372036854775808'), True),
    "a step past int64": (
        lambda: edited(b'"step":1,', b'"step":9223372036854775808,', b'"timing"'),
        True,
    ),
    "a key twice in a record": (lambda: edited(b'"ok":true', b'"ok":true,"ok":false'), False),
    "a model's output text": (
        lambda: edited(b'"output":{"text":""', b'"output":"","x":{"text":""', b'"timing"'),
        True,
    ),
    "a tool's output an object": (lambda: edited(b'"output":""', b'"output":{}'), True),
    "a model's output text null": (
        lambda: edited(b'"output":{"text":""', b'"output":{"text":null', b'"timing"'),
        True,
    ),
    "NaN in a key no column reads": (lambda: with_tool_data(b"NaN"), True),
    "-Infinity in a key no column reads": (lambda: with_tool_data(b"[1, -Infinity]"), True),
    "1e400 in a key no column reads": (lambda: with_tool_data(b"1e400"), True),
    "not UTF-8 in a key no column reads": (lambda: with_tool_data(b'"\xff"'), True),
    "a lone surrogate in a key no column reads": (lambda: with_tool_data(b'"\\ud800"'), True),
    "a record that is null": (
        lambda: [*base_lines()[:1], b"null", *base_lines()[1:]],
        True,
    ),
    "null after a record on its line": (
        lambda: edited(b'"output":""}}', b'"output":""}}null'),
        True,
    ),
    "two records on one line": (
        lambda: edited(b'"output":""}}', b'"output":""}}{"type":"span_end","id":"s1","t":1}'),
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(TRAPS))
def test_a_trap_for_a_typed_decoder_is_handed_over_or_agrees(tmp_path: Path, name: str):
    """A null the checked reader refuses where it takes a missing key, a number or text JSON
    does not allow, a value of another type: the screen hands over what the checked path
    refuses, and builds the checked path's columns or hands over the rest."""
    make, refused = TRAPS[name]
    p = write(tmp_path, make())
    fast = fast_columns(p)
    try:
        ref = checked(p)
    except (TraceFileError, OverflowError):
        assert refused
        assert fast is None
    else:
        assert not refused
        assert fast is None or [] == differences(fast, ref)


def test_text_that_looks_like_a_trap_is_read_fast(tmp_path: Path):
    """``null``, ``NaN``, ``Infinity`` and a key's name inside text, a null under a key no
    default hangs on, an escaped control character: the screen still builds the columns."""
    text = b'"output":"\\"ok\\":null, ok: null Info NaNs \\u001b[0m","data":{"ok":{},"y":null}'
    p = write(tmp_path, edited(b'"output":""', text))
    fast = fast_columns(p)
    assert fast is not None
    assert [] == differences(fast, checked(p))


def write(tmp_path: Path, lines: list[bytes], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_bytes(b"".join(line + b"\n" for line in lines))
    return p


def test_the_reference_traces_are_in_the_parity_set():
    """The fast shapes include every reference trace (a glob that found none tests nothing)."""
    assert len(REFERENCE) >= 2


@pytest.mark.parametrize("name", list(FAST))
def test_a_clean_trace_gives_the_checked_paths_columns_field_by_field(tmp_path: Path, name: str):
    """A trace in the writer's shape is built fast, and every field equals the checked path's."""
    p = write(tmp_path, FAST[name]())
    fast = fast_columns(p)
    assert fast is not None
    assert [] == differences(fast, checked(p))


@pytest.mark.parametrize("name", list(HANDED_OVER))
def test_what_the_checked_path_notes_or_drops_is_handed_over(tmp_path: Path, name: str):
    """Traces the checked path notes something about (Graph notes, unsplit calls, set-up spans)
    or has no spans are left to it."""
    assert fast_columns(write(tmp_path, HANDED_OVER[name]())) is None


def test_an_older_traces_trims_reach_the_columns_through_the_checked_path(tmp_path: Path):
    """What the fast builder hands over is not lost: the trims in an older trace's model spans
    are in the columns ``load_columns`` makes (and report reads)."""
    p = write(tmp_path, with_old_trims())
    assert [1, 1, 1] == [t["dropped"] for t in store.load_columns(p).trims]


def test_load_columns_builds_fast_writes_the_cache_and_reads_it_back(tmp_path: Path):
    """The cache written from the fast columns reads back as the checked path's columns."""
    p = write(tmp_path, list(agent_lines(30)))
    first = store.load_columns(p)
    assert store.is_fresh(p)
    again = store.read_cache(p)
    assert again is not None
    assert [] == differences(first, checked(p))
    assert [] == differences(again, checked(p))


def test_a_damaged_trace_still_gets_the_readers_message(tmp_path: Path):
    """The screen hands a bad trace over: load_columns raises the checked reader's error."""
    lines = list(agent_lines(3))
    lines[4] = lines[4].replace(b'"t":', b'"t":-', 1)
    p = write(tmp_path, lines)
    with pytest.raises(TraceFileError) as fast_way:
        store.load_columns(p)
    with pytest.raises(TraceFileError) as checked_way:
        load_trace(p)
    assert str(checked_way.value) == str(fast_way.value)


# -- the fuzz: mutate a small clean trace; the screen hands it over, or agrees ----------------

# values a mutation writes (no number past a float's range: see fastcols' module docstring)
ODD = [
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    2**63,
    MAX_INSTANT_NS + 1,
    1.5,
    "",
    "s1",
    "s2",
    "s3",
    "s99",
    "x",
    "model",
    "tool",
    "step",
    "setup",
    "span_start",
    "span_end",
    "span_event",
    "end",
    [],
    ["s1"],
    [1],
    {},
    {"a": 1},
]


def base_lines() -> list[bytes]:
    return sequential_run(
        [
            StepSpec(300 * MS, visible=61, tools=(("a", 1 * S), ("b", 2 * S))),
            StepSpec(200 * MS, visible=2, reasoning=30, attempts=((100 * MS, 50 * MS),)),
        ]
    ).lines()


def mutate_value(data: st.DataObject, rec: Any) -> Any:
    """``rec`` with one value somewhere inside it replaced, or one key dropped."""
    if not isinstance(rec, (dict, list)) or not rec or data.draw(st.integers(0, 3)) == 0:
        return data.draw(st.sampled_from(ODD))
    if isinstance(rec, dict):
        key = data.draw(st.sampled_from(sorted(rec)))
        if data.draw(st.integers(0, 4)) == 0:
            return {k: v for k, v in rec.items() if k != key}
        return {**rec, key: mutate_value(data, rec[key])}
    i = data.draw(st.integers(0, len(rec) - 1))
    return [*rec[:i], mutate_value(data, rec[i]), *rec[i + 1 :]]


def mutate(data: st.DataObject, lines: list[bytes]) -> bytes:
    """The trace's bytes after one to three mutations: a value, a line's place, the bytes."""
    lines = list(lines)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["value", "value", "value", "drop", "copy", "swap"]))
        if how == "value":
            lines[i] = orjson.dumps(mutate_value(data, orjson.loads(lines[i])))
        elif how == "drop" and len(lines) > 1:
            del lines[i]
        elif how == "copy":
            lines.insert(data.draw(st.integers(0, len(lines))), lines[i])
        elif how == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    raw = b"".join(line + b"\n" for line in lines)
    cut = data.draw(st.sampled_from(["none", "none", "cut", "blank", "cr", "space"]))
    at = data.draw(st.integers(0, len(raw)))
    if cut == "cut":
        return raw[:at]
    insert = {"blank": b"\n", "cr": b"\r", "space": b" "}.get(cut, b"")
    return raw[:at] + insert + raw[at:]


@FUZZ
@given(data=st.data())
def test_a_mutated_trace_is_handed_over_or_agrees_with_the_checked_path(tmp_path: Path, data):
    """Whatever a mutation does (types, ranges, ids, order, a cut, a stray byte), the screen
    either hands the file over or builds exactly the columns of a checked load that passed."""
    p = tmp_path / "m.jsonl"
    p.write_bytes(mutate(data, data.draw(st.sampled_from([base_lines, with_setup]))()))
    fast = fast_columns(p)
    try:
        ref = checked(p)
    except Exception:  # a TraceFileError; any other refusal (a crash) is the reader's too
        assert fast is None
        return
    if fast is not None:
        assert [] == differences(fast, ref)


def test_the_fuzz_base_traces_are_built_fast(tmp_path: Path):
    """The fuzz mutates traces the screen takes whole (else it would test only hand-overs)."""
    assert fast_columns(write(tmp_path, base_lines())) is not None
    assert fast_columns(write(tmp_path, with_setup())) is not None


def test_call_forms_are_grouped_as_a_dict_of_their_values_would() -> None:
    """_fastreport.groups (one key of every column's digits) against the dict it replaced:
    the same groups, numbered and first seen in the same order, for values far apart (int64's
    ends: renumbered, not overflowed) and columns of every width."""
    rng = np.random.default_rng(27)
    edges = np.iinfo(np.int64)
    for _ in range(300):
        n = int(rng.integers(0, 80))
        parts = [
            rng.integers(-3, 3, n),
            rng.integers(0, 2, n).astype(bool),
            rng.choice([-(2**40), 0, 2**40, 2**41], n),
            rng.choice([edges.min, edges.max, 0, -1], n),
            rng.integers(0, 4, n).astype(np.int8),
            rng.integers(0, n + 1, n),
        ]
        first, group = _fastreport.groups(parts)
        seen: dict[tuple[int, ...], int] = {}
        want = [seen.setdefault(tuple(int(p[i]) for p in parts), len(seen)) for i in range(n)]
        assert want == group.tolist()
        assert [want.index(k) for k in range(len(seen))] == first.tolist()


def _recs(lines: list[bytes]) -> list[Any]:
    return [orjson.loads(x) for x in lines]


def _moved_end_first(r: list[Any]) -> list[Any]:
    """s4's end record before its start record."""
    i = next(k for k, x in enumerate(r) if x.get("type") == "span_end" and x["id"] == "s4")
    j = next(k for k, x in enumerate(r) if x.get("type") == "span_start" and x["id"] == "s4")
    end = r.pop(i)
    return [*r[:j], end, *r[j:]]


def _set(kind: str, sid: str, key: str, value: Any) -> Callable[[list[Any]], list[Any]]:
    def edit(r: list[Any]) -> list[Any]:
        x = next(x for x in r if x.get("type") == kind and x["id"] == sid)
        x[key] = value
        return r

    return edit


ORDER_BROKEN: dict[str, Callable[[list[Any]], list[Any]]] = {
    "an end record before its start": _moved_end_first,
    "a span ended twice": lambda r: [*r[:8], r[7], *r[8:]],  # s4's end record twice
    "an end earlier than its start": _set("span_end", "s4", "t", 1),
    "an end naming no span": _set("span_end", "s4", "id", "s99"),
    "a parent started later": _set("span_start", "s4", "parent", "s6"),
    "an after started later": _set("span_start", "s4", "after", ["s7"]),
    "an after of no span": _set("span_start", "s7", "after", ["s4", "s98"]),
}


@pytest.mark.parametrize("chunk", [2, 1 << 18])
@pytest.mark.parametrize("name", list(ORDER_BROKEN))
def test_records_out_of_order_are_handed_over_in_chunks_or_whole(
    tmp_path: Path, name: str, chunk: int, monkeypatch: pytest.MonkeyPatch
):
    """The builder's checks of the records' ids and order, made a chunk at a time (a chunk of
    two items here, so every check crosses chunks): each breach is left to the checked path,
    and a clean trace gives the same columns at either size."""
    from agentloop.analysis import _fastorder

    monkeypatch.setattr(_fastorder, "_CHUNK", chunk)
    lines = [orjson.dumps(x) for x in ORDER_BROKEN[name](_recs(base_lines()))]
    assert fast_columns(write(tmp_path, lines)) is None
    clean = fast_columns(write(tmp_path, base_lines(), "clean.jsonl"))
    assert clean is not None
    assert (
        clean.parent.tolist()
        == columns_of(build_graph(load_trace(tmp_path / "clean.jsonl"))).parent.tolist()
    )
