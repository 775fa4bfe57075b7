"""One change per key per transaction, as TiCDC sees them: the rule on row changes.

TiKV reports a transaction's net effect per key; the binlog reports every statement's row
images (insert then update of the same row, a PK moved twice, ...). TiCDC's rules (update split,
deletes-before-inserts ordering, MySQL batching) assume the former, so each transaction's rows of
a table are reduced to their net effect per handle key first:

| first seen as        | last state  | emitted                               |
|----------------------|-------------|---------------------------------------|
| absent (insert)      | present     | INSERT of the final image             |
| absent (insert)      | absent      | nothing                               |
| present (update/del) | present     | UPDATE from the first to the final image (nothing if equal) |
| present              | absent      | DELETE of the first image             |

An update that changes the handle key is a delete of the old key and an insert of the new one.
Keys are emitted in the order they were first touched. Tables without a handle key keep every row.
Rows of one commit-ts are one transaction; a reader that knows only a coarser time (a storage
sink's canal-json without the TiDB extension: milliseconds) nets the transactions of one tick
together, which leaves the same final state. pipeline/netting.py applies the rule to Arrow batches.
"""

from __future__ import annotations

from itertools import groupby
from typing import Optional, Sequence

from sparkcdc.model.events import RowChange, TableInfo, Value

Image = Optional[tuple[Value, ...]]


def handle_positions(table: TableInfo) -> list[int]:
    """The handle key's column positions; none when the table has no handle key or one of its
    columns is missing (such rows are never netted)."""
    names = table.column_names
    positions = [names.index(c) for c in table.handle_key if c in names]
    return positions if len(positions) == len(table.handle_key) else []


def net_changes_per_key(table: TableInfo, rows: Sequence[RowChange]) -> list[RowChange]:
    positions = handle_positions(table)
    if not positions:
        return list(rows)
    result: list[RowChange] = []
    for _, txn in groupby(rows, key=lambda r: r.commit_ts):
        result.extend(_net_txn(list(txn), positions))
    return result


def _net_txn(rows: list[RowChange], positions: list[int]) -> list[RowChange]:
    if len(rows) == 1:
        return rows
    first: dict[tuple, Image] = {}  # key -> image before the transaction (None: absent)
    last: dict[tuple, Image] = {}  # key -> image after the transaction (None: absent)
    first_row: dict[tuple, RowChange] = {}

    def touch(key: tuple, before: Image, after: Image, row: RowChange) -> None:
        if key not in first:
            first[key] = before
            first_row[key] = row
        last[key] = after

    for row in rows:
        if row.op == "insert":
            touch(tuple(row.after[i] for i in positions), None, row.after, row)
        elif row.op == "delete":
            touch(tuple(row.before[i] for i in positions), row.before, None, row)
        else:
            old_key = tuple(row.before[i] for i in positions)
            new_key = tuple(row.after[i] for i in positions)
            if old_key == new_key:
                touch(old_key, row.before, row.after, row)
            else:
                touch(old_key, row.before, None, row)
                touch(new_key, None, row.after, row)

    netted: list[RowChange] = []
    for key, before in first.items():
        after = last[key]
        template = first_row[key]
        if before is None and after is None:
            continue
        if before is None:
            op = "insert"
        elif after is None:
            op = "delete"
        elif before == after:
            continue
        else:
            op = "update"
        netted.append(RowChange(template.commit_ts, template.schema, template.table, op,
                                before=before, after=after, seq=template.seq))
    return netted
