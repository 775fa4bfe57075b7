"""One change per key per transaction, on Arrow batches: the rule of model/netting.py (see
there) applied to a micro-batch's columns before any sink."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.model.events import TableInfo


def values_differ(old: pa.Array, new: pa.Array) -> pa.Array:
    """Per position, whether two value columns differ as Python values do (NULL equals NULL)."""
    return pc.fill_null(pc.not_equal(old, new), pc.xor(pc.is_null(old), pc.is_null(new)))


def transactions_netting_changes(table: TableInfo, commit_ts: pa.Array, ops: pa.Array,
                                 before: pa.Array, after: pa.Array) -> pa.Array:
    """The commit_ts of every transaction whose rows `net_changes_per_key` may change (with
    repeats; a few it would keep as they are): one of two or more rows with an update that moves
    the handle key or changes nothing, or with a handle key on two rows. The columns are one
    table's rows in (commit_ts, seq) order, each image (where its op has one) with one value per
    column."""
    names = table.column_names
    positions = [names.index(c) for c in table.handle_key if c in names]
    if not positions or len(positions) != len(table.handle_key):
        return pa.array([], pa.int64())
    # _net_txn keeps a one-row transaction as it is: only the rows of longer ones are checked.
    longer = _rows_of_longer_transactions(commit_ts)
    if not longer.any():
        return pa.array([], pa.int64())
    if not longer.all():
        mask = pa.array(longer)
        commit_ts, ops, before, after = (column.filter(mask) for column in (commit_ts, ops, before, after))
    is_update, is_insert = pc.equal(ops, "update"), pc.equal(ops, "insert")
    keys: dict[str, pa.Array] = {"commit_ts": commit_ts}
    moved = pa.array(np.zeros(len(ops), dtype=bool))
    for position in positions:
        old, new = pc.list_element(before, position), pc.list_element(after, position)
        keys[f"key{position}"] = pc.if_else(is_insert, new, old)
        moved = pc.or_(moved, pc.and_(is_update, values_differ(old, new)))
    return pa.chunked_array([
        commit_ts.filter(moved),
        commit_ts.filter(is_update).filter(_unchanged(before.filter(is_update), after.filter(is_update))),
        _keys_on_two_rows(commit_ts, keys),
    ], pa.int64()).combine_chunks()


def _keys_on_two_rows(commit_ts: pa.Array, keys: dict[str, pa.Array]) -> pa.Array:
    """The commit_ts of each transaction with a handle key on two of its rows (with repeats)."""
    if len(keys) == 2 and commit_ts[0] == commit_ts[-1]:
        # One transaction keyed by one column, as most tables of a batch over many tables are:
        # a distinct count costs a tenth of a group_by.
        (key,) = (column for name, column in keys.items() if name != "commit_ts")
        return commit_ts.slice(0, 1 if pc.count_distinct(key, mode="all").as_py() < len(key) else 0)
    # One table's rows of a batch: handing them to Acero's thread pool cost more than grouping
    # them (~360 against ~150 us a call for 120 rows), once per table of a batch over many tables.
    touched = pa.table(keys).group_by(list(keys), use_threads=False).aggregate([([], "count_all")])
    return touched["commit_ts"].filter(pc.greater(touched["count_all"], 1))


def _rows_of_longer_transactions(commit_ts: pa.Array) -> np.ndarray:
    """Per row of rows in commit_ts order, whether its transaction has more than one row."""
    values = commit_ts.to_numpy(zero_copy_only=False)
    same = values[1:] == values[:-1]
    longer = np.zeros(len(values), dtype=bool)
    longer[1:] |= same
    longer[:-1] |= same
    return longer


def _unchanged(before: pa.Array, after: pa.Array) -> pa.Array:
    """Per row of equal-length images, whether before == after."""
    differs = values_differ(pc.list_flatten(before), pc.list_flatten(after)).to_numpy(zero_copy_only=False)
    changed = np.zeros(len(before), dtype=bool)
    changed[pc.list_parent_indices(before).to_numpy()[differs]] = True
    return pa.array(~changed)
