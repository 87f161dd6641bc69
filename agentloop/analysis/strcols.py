"""String columns on arrays: a dictionary column's codes, a mask of the rows equal to a value.

The cache's string columns are Arrow arrays, views of the file (:mod:`agentloop.analysis.
store`): a dictionary column's codes are read as they lie, without decoding its strings.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from agentloop.analysis.cands import Ix
from agentloop.analysis.columnar import B, Columns


def codes(d: pa.DictionaryArray) -> Ix:
    """A dictionary column's indices, -1 for null (int32 or wider: without nulls, the cache's
    own int32 indices, not a copy)."""
    ix = d.indices
    valid = validity(ix)
    if valid is None:
        return _wide(ix.to_numpy())
    vals = ix.buffers()[1]  # a null's slot holds any value: the validity bitmap says
    raw = np.frombuffer(
        vals,
        dtype=ix.type.to_pandas_dtype(),
        count=len(ix),
        offset=ix.offset * ix.type.bit_width // 8,
    )
    return np.where(valid, _wide(raw), -1)


def validity(a: pa.Array) -> np.ndarray | None:
    """Which of ``a``'s values are not null, from its validity bitmap (None: none is null)."""
    if not a.null_count:
        return None
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], np.uint8), bitorder="little")
    return bits[a.offset : a.offset + len(a)].astype(np.bool_)


def _wide(codes: np.ndarray) -> Ix:
    """Codes as int32 or int64: a narrower type would wrap at ``codes + 1``."""
    out: Ix = codes if codes.dtype in (np.int32, np.int64) else codes.astype(np.int32)
    return out


def kind_is(c: Columns, kind: str) -> B:
    """Per span: whether its kind is ``kind``."""
    return equals(c.kinds, kind)


def equals(col: pa.Array, value: str) -> B:
    """Per row of a string column: whether it is ``value`` (null: no). A dictionary column's
    codes are compared, as they lie in the file: Arrow's comparison decodes every string first
    (a million spans' kinds: 20 MB)."""
    if isinstance(col, pa.DictionaryArray) and not col.null_count:
        names = col.dictionary.to_pylist()
        if value not in names:
            return np.zeros(len(col), np.bool_)
        out: B = col.indices.to_numpy() == names.index(value)
        return out
    import pyarrow.compute as pc  # only here: 9 MB of a warm command's imports

    return np.asarray(pc.equal(col, value).fill_null(False), np.bool_)
