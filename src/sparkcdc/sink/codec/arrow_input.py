"""`encode_arrow`'s columns checked and handed to the encoders: the Python reference path as
RowChanges per transaction, the native encoders as Arrow buffers.

A module of its own so that importing a codec does not load pyarrow; encode_arrow imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.model.change_batch import IMAGE_TYPE, OP_NAMES
from sparkcdc.model.events import RowChange, TableInfo


@dataclass(frozen=True)
class ArrowRows:
    """`encode_arrow`'s arguments checked and normalised: plain arrays (chunks combined), images
    as list<string>, ops as their codes (model.change_batch.OP_CODES, what native encoders read)."""

    commit_ts: pa.Int64Array
    op_codes: pa.Int32Array
    before: pa.ListArray
    after: pa.ListArray

    def __len__(self) -> int:
        return len(self.commit_ts)


def _plain(array, kind: pa.DataType, what: str) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type != kind:
        try:
            array = array.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(f"encode_arrow: {what} must be {kind}, not {array.type}") from exc
    return array


def arrow_rows(table: TableInfo, commit_ts, ops, before, after, check_widths: bool = True) -> ArrowRows:
    """Checks `encode_arrow`'s columns: equal lengths, no null commit_ts, known ops, and (unless
    the native encoders check it per row, as they do) row images of one value per column."""
    commit_ts = _plain(commit_ts, pa.int64(), "commit_ts")
    ops = _plain(ops, pa.string(), "ops")
    before = _plain(before, IMAGE_TYPE, "before")
    after = _plain(after, IMAGE_TYPE, "after")
    if not len(commit_ts) == len(ops) == len(before) == len(after):
        raise ValueError(f"encode_arrow: commit_ts, ops, before and after differ in length "
                         f"({len(commit_ts)}, {len(ops)}, {len(before)}, {len(after)})")
    if commit_ts.null_count:
        raise ValueError("encode_arrow: commit_ts has nulls")
    codes = pc.index_in(ops, value_set=OP_NAMES)
    if codes.null_count:
        unknown = sorted(set(ops.filter(pc.is_null(codes)).to_pylist()), key=str)
        raise ValueError(f"encode_arrow: unknown ops {unknown}; use insert, update or delete")
    for name, image in (("before", before), ("after", after)) if check_widths else ():
        lengths = pc.min_max(pc.list_value_length(image))
        for length in (lengths["min"].as_py(), lengths["max"].as_py()):
            if length is not None and length != len(table.columns):
                raise ValueError(f"encode_arrow: {name} image of {table.schema}.{table.table} has {length} "
                                 f"values but the table has {len(table.columns)} columns")
    return ArrowRows(commit_ts, codes, before, after)


_EMPTY_OFFSETS = pa.py_buffer(bytes(4))


def _image_buffers(image: pa.ListArray) -> tuple:
    values = image.values
    validity, offsets = image.buffers()[:2]
    value_validity, value_offsets, data = values.buffers()
    if offsets is None:  # an empty array built from buffers
        offsets, image_offset = _EMPTY_OFFSETS, 0
    else:
        image_offset = image.offset
    return (validity, image_offset, offsets, value_validity, values.offset, value_offsets or _EMPTY_OFFSETS, data)


def arrow_buffers(rows: ArrowRows) -> tuple:
    """The buffers and offsets native encoders read: (commit_ts, its offset, op codes, their
    offset, before, after), each image as (validity, offset, offsets, value validity, value
    offset, value offsets, data)."""
    return (rows.commit_ts.buffers()[1], rows.commit_ts.offset, rows.op_codes.buffers()[1], rows.op_codes.offset,
            _image_buffers(rows.before), _image_buffers(rows.after))


def arrow_transactions(table: TableInfo, rows: ArrowRows) -> Iterator[tuple[int, list[RowChange]]]:
    """The rows as RowChanges, one list per run of equal commit_ts (a transaction): the
    reference every columnar encoder must match."""
    changes: list[RowChange] = []
    current = None
    names = OP_NAMES.to_pylist()
    for ts, code, old, new in zip(rows.commit_ts.to_pylist(), rows.op_codes.to_pylist(),
                                  rows.before.to_pylist(), rows.after.to_pylist()):
        if ts != current:
            if changes:
                yield current, changes
            changes, current = [], ts
        changes.append(RowChange(ts, table.schema, table.table, names[code], None if old is None else tuple(old),
                                 None if new is None else tuple(new), len(changes)))
    if changes:
        yield current, changes
