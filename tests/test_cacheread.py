"""A cache's call names are read when asked for, and only as many as its metadata says."""

from __future__ import annotations

import orjson
import pytest

from agentloop.analysis import store
from agentloop.analysis._cacheread import CALL_NAMES_KEY, CallNames
from agentloop.analysis.columnar import CALL_NAMES, columns_of
from agentloop.analysis.graph import build_graph
from agentloop.analysis.synthetic import agent_lines
from agentloop.trace.reader import parse_lines


def test_a_caches_call_names_read_back_are_the_built_ones():
    """Every list of names (tiers, agents, the cost's step labels) reads back as built."""
    c = columns_of(build_graph(parse_lines(list(agent_lines(30)))))
    back = store.from_table(store.to_table(c, {}))
    assert isinstance(back.call_names, CallNames)
    assert list(back.call_names) == list(CALL_NAMES)
    assert {k: back.call_names[k] for k in CALL_NAMES} == c.call_names
    assert len(c.call_names["label"]) == 30


@pytest.mark.parametrize("names", [[], ["1"] * 31, list(range(30)), {"a": 1}])
def test_a_list_of_call_names_not_as_counted_is_refused_when_asked_for(names):
    """Labels fewer or more than the metadata's count, or not strings, raise ValueError when
    read (the other lists still read)."""
    c = columns_of(build_graph(parse_lines(list(agent_lines(30)))))
    t = store.to_table(c, {})
    meta = dict(t.schema.metadata or {})
    meta[CALL_NAMES_KEY + b"label"] = orjson.dumps(names)
    back = store.from_table(t.replace_schema_metadata(meta))
    assert back.call_names["tier"] == c.call_names["tier"]
    with pytest.raises(ValueError, match="call names"):
        back.call_names["label"]
