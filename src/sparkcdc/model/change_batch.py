"""The change batch: the Arrow record batch of row changes that executors decode and the driver writes.

One row per row change, in CHANGE_SCHEMA: the transaction's commit-ts, the row's seq inside it
(`piece << 32 | row` for a piece of a split transaction), the table's schema and name, the op and
the before/after images as `list<string>` of canonical values (model/events.py) in the table
version's column order. Every batch of the Spark source also carries one range marker row
(`marker_batch`: op RANGE_MARKER, commit_ts = the batch's end, seq = its start), so the writer
learns the batch's bounds even when it has no rows.

Op codes (OP_CODES: 0 insert, 1 update, 2 delete) are what the native decoder's builder writes and
what the native encoders and the columnar writers read: a row's code is its op's index in OP_NAMES.

Executors import this module in every fresh Python worker: it needs pyarrow and numpy (which
pyarrow loads anyway) and nothing of the driver's (no pyarrow.compute, no pandas).
"""

from __future__ import annotations

import array
import itertools
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from sparkcdc.model.events import Op

# A row image: one canonical text (or null) per column of the table version.
IMAGE_TYPE = pa.list_(pa.field("element", pa.string()))
CHANGE_SCHEMA = pa.schema([
    ("commit_ts", pa.int64()), ("seq", pa.int64()), ("schema_name", pa.string()), ("table_name", pa.string()),
    ("op", pa.string()), ("before", IMAGE_TYPE), ("after", IMAGE_TYPE),
])
OP_CODES: dict["Op", int] = {"insert": 0, "update": 1, "delete": 2}
# The op of the range marker row; never a row change's.
RANGE_MARKER = "range"


def string_array(texts: list[str]) -> pa.StringArray:
    """A string array built from its buffers: `pa.array` would import pandas (~1 s in a fresh
    Python worker) to check whether the list is a pandas object."""
    encoded = [text.encode("utf-8") for text in texts]
    offsets = array.array("i", itertools.accumulate((len(e) for e in encoded), initial=0))
    return pa.Array.from_buffers(pa.string(), len(texts), [None, pa.py_buffer(offsets.tobytes()),
                                                           pa.py_buffer(b"".join(encoded))])


def int64_array(values: list[int]) -> pa.Int64Array:
    """An int64 array built from its buffer (see `string_array`)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(array.array("q", values).tobytes())])


# The op names in op-code order: `OP_NAMES.take(codes)` names codes, `pc.index_in(ops, OP_NAMES)` codes names.
OP_NAMES = string_array(sorted(OP_CODES, key=OP_CODES.get))


def marker_batch(start: int, end: int) -> pa.RecordBatch:
    """The batch's one range marker row: commit_ts = end, seq = start."""
    image = pa.nulls(1, IMAGE_TYPE)
    return pa.RecordBatch.from_arrays(
        [int64_array([end]), int64_array([start]), string_array([""]), string_array([""]),
         string_array([RANGE_MARKER]), image, image],
        schema=CHANGE_SCHEMA,
    )


def batch_bounds(table: pa.Table) -> tuple[int, int] | None:
    """The (start, end] of a batch from its range marker rows; None for an empty batch."""
    import pyarrow.compute as pc  # the driver's: executors never call this

    markers = table.filter(pc.equal(table["op"], RANGE_MARKER))
    if markers.num_rows == 0:
        return None
    return int(pc.min(markers["seq"]).as_py()), int(pc.max(markers["commit_ts"]).as_py())


def runs_of_equal(values: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of equal consecutive values (of a column in transaction order:
    each transaction's rows, each table's)."""
    borders = [0, *(np.flatnonzero(values[1:] != values[:-1]) + 1).tolist(), len(values)]
    return list(zip(borders, borders[1:])) if len(values) else []


def image_array(rows: int, buffers: tuple) -> pa.Array:
    """A `list<string>` array from the native builder's buffers of one image column."""
    list_validity, list_offsets, list_nulls, value_validity, value_offsets, data, values, value_nulls = buffers
    strings = pa.Array.from_buffers(
        pa.string(), values,
        [pa.py_buffer(value_validity) if value_nulls else None, pa.py_buffer(value_offsets), pa.py_buffer(data)],
        null_count=value_nulls)
    return pa.Array.from_buffers(
        IMAGE_TYPE, rows, [pa.py_buffer(list_validity) if list_nulls else None, pa.py_buffer(list_offsets)],
        null_count=list_nulls, children=[strings])
