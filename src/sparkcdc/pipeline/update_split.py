"""TiCDC's UPDATE split for MQ and storage sinks (product document 003).

An update that changes a primary-key or unique-key value becomes a DELETE of the pre-image and
an INSERT of the post-image, so consumers keyed by those columns never see a key "move"; when a
transaction had such a split, its rows are reordered deletes, then updates, then inserts
(TiCDC's `trySplitAndSortUpdateEvent`). `output-raw-change-event = true` turns this off.
"""

from __future__ import annotations

from itertools import groupby
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.model.events import RowChange, TableInfo
from sparkcdc.pipeline.netting import values_differ

_OP_ORDER = {"delete": 0, "update": 1, "insert": 2}


def key_changed(key_positions: Sequence[int], row: RowChange) -> bool:
    return any(row.before[i] != row.after[i] for i in key_positions)


def _key_positions(table: TableInfo) -> list[int]:
    return [i for i, c in enumerate(table.columns) if c.is_primary_key or c.is_unique_key or c.name in table.handle_key]


def split_key_updates(table: TableInfo, rows: Sequence[RowChange]) -> list[RowChange]:
    """Rows (whole transactions in commit order) with key-changing updates split."""
    key_positions = _key_positions(table)
    if not key_positions:
        return list(rows)
    result: list[RowChange] = []
    for _, txn in groupby(rows, key=lambda r: r.commit_ts):
        txn_rows: list[RowChange] = []
        split = False
        for row in txn:
            if row.op == "update" and key_changed(key_positions, row):
                split = True
                txn_rows.append(RowChange(row.commit_ts, row.schema, row.table, "delete",
                                          before=row.before, seq=row.seq))
                txn_rows.append(RowChange(row.commit_ts, row.schema, row.table, "insert",
                                          after=row.after, seq=row.seq))
            else:
                txn_rows.append(row)
        if split:
            txn_rows.sort(key=lambda r: _OP_ORDER[r.op])  # stable: upstream order within each op
        result.extend(txn_rows)
    return result


def transactions_split_changes(table: TableInfo, commit_ts: pa.Array, ops: pa.Array,
                               before: pa.Array, after: pa.Array) -> pa.Array:
    """The commit_ts of every transaction `split_key_updates` would change (with repeats): one
    with an update that changes a primary-key, unique-key or handle-key value. Every update's
    images hold one value per column."""
    updates = np.flatnonzero(pc.equal(ops, "update").to_numpy(zero_copy_only=False))
    split = np.zeros(len(updates), dtype=bool)
    # Only the updates' key values are read, straight from the images' value arrays.
    before_starts, after_starts = before.offsets.to_numpy()[updates], after.offsets.to_numpy()[updates]
    for position in _key_positions(table):
        old = before.values.take(pa.array(before_starts + position))
        new = after.values.take(pa.array(after_starts + position))
        split |= values_differ(old, new).to_numpy(zero_copy_only=False)
    return commit_ts.take(pa.array(updates[split]))
