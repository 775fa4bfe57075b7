"""TiCDC's UPDATE split for MQ and storage sinks (product document 003).

An update that changes a primary-key or unique-key value becomes a DELETE of the pre-image and
an INSERT of the post-image, so consumers keyed by those columns never see a key "move"; when a
transaction had such a split, its rows are reordered deletes, then updates, then inserts
(TiCDC's `trySplitAndSortUpdateEvent`). `output-raw-change-event = true` turns this off.
"""

from __future__ import annotations

from itertools import groupby
from typing import Sequence

from sparkcdc.model.events import RowChange, TableInfo

_OP_ORDER = {"delete": 0, "update": 1, "insert": 2}


def key_changed(positions: Sequence[int], row: RowChange) -> bool:
    return any(row.before[i] != row.after[i] for i in positions)


def key_positions(table: TableInfo) -> list[int]:
    """The positions of the columns whose change splits an update: primary-key, unique-key and
    handle-key columns."""
    return [i for i, c in enumerate(table.columns) if c.is_primary_key or c.is_unique_key or c.name in table.handle_key]


def split_key_updates(table: TableInfo, rows: Sequence[RowChange]) -> list[RowChange]:
    """Rows (whole transactions in commit order) with key-changing updates split."""
    positions = key_positions(table)
    if not positions:
        return list(rows)
    result: list[RowChange] = []
    for _, txn in groupby(rows, key=lambda r: r.commit_ts):
        txn_rows: list[RowChange] = []
        split = False
        for row in txn:
            if row.op == "update" and key_changed(positions, row):
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
