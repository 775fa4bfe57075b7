"""Which transactions of a micro-batch netting, update split or the row checks would change, on
Arrow columns: the columnar writer's test (pipeline/batch_sink.py) for the rule of
model/netting.py (see there) and the split of update_split.py.

The batch writer hands an Arrow-accepting sink every transaction these would pass unchanged as
columns; `rows_to_rewrite` names the others for a whole batch at once, over all its tables, with a
fixed number of Arrow and numpy calls per batch. Checked table by table, a batch over 1,000 tables
spent ~1.2 ms per table here, most of the driver's time (docs/benchmarks.md, "Many tables").

A table's transaction takes the RowChange path when
- a row of its table is malformed (an unknown op; an image missing, extra, or not one value per
  column): the whole table does, and the RowChange path decides what that means;
- it has two or more rows and netting may change it (a few it would keep as they are): an update
  that moves the handle key or changes nothing, or a handle key on two of its rows (tables with a
  handle key only; `net_changes_per_key` keeps a one-row transaction as it is);
- with split_updates, an update changes a primary-key, unique-key or handle-key value;
- it is a snapshot chunk's (commit-ts in `snapshot_ts`) and the sink marks snapshot rows.
Snapshot chunks are inserts of distinct chunk-key values at commit-ts of their own: neither
netting nor split would change them, so they are not checked, which spares a chunk-sized group-by
of keys per chunk.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.model.change_batch import OP_CODES, OP_NAMES
from sparkcdc.model.events import TableInfo
from sparkcdc.model.netting import handle_positions
from sparkcdc.pipeline.update_split import key_positions

# Per op code (model.change_batch.OP_CODES), whether the op has a before and an after image.
_HAS_BEFORE = np.array([op != "insert" for op in sorted(OP_CODES, key=OP_CODES.get)])
_HAS_AFTER = np.array([op != "delete" for op in sorted(OP_CODES, key=OP_CODES.get)])
_INSERT, _UPDATE = OP_CODES["insert"], OP_CODES["update"]

# Update rows whose whole images are compared at once: the values taken are a copy, so the
# driver holds one window's instead of the batch's.
_COMPARED_ROWS = 32_768


def values_differ(old: pa.Array, new: pa.Array) -> pa.Array:
    """Per position, whether two value columns differ as Python values do (NULL equals NULL)."""
    return pc.fill_null(pc.not_equal(old, new), pc.xor(pc.is_null(old), pc.is_null(new)))


def rows_to_rewrite(rows: pa.Table, tables: Sequence[tuple[TableInfo, int, int]], split_updates: bool,
                    snapshot_ts: frozenset[int] = frozenset(), marks_snapshot: bool = False) -> np.ndarray:
    """Per row of `rows` (columns commit_ts, op, before, after), whether it must take the
    RowChange path (module docstring). Each of `tables` is a table version and its rows'
    [low, high) in `rows`, in (commit_ts, seq) order; rows of no table are False."""
    count = rows.num_rows
    if count == 0 or not tables:
        return np.zeros(count, dtype=bool)
    # Per-table values are indexed by each row's table number; rows of no table get the last
    # entry (-1), a table of no columns and no keys.
    group = np.full(count, -1, dtype=np.int64)
    for number, (_, low, high) in enumerate(tables):
        group[low:high] = number
    in_table = group >= 0
    widths = np.array([len(info.columns) for info, _, _ in tables] + [0])[group]
    handle = _positions([handle_positions(info) for info, _, _ in tables])[group]  # per row
    split = _positions([key_positions(info) if split_updates else [] for info, _, _ in tables])[group]

    commit_ts = rows["commit_ts"].to_numpy()
    codes = pc.fill_null(pc.index_in(rows["op"], value_set=OP_NAMES), -1).to_numpy()
    known = codes >= 0
    codes = np.where(known, codes, 0)
    before_lengths, after_lengths = (pc.fill_null(pc.list_value_length(rows[name]), -1).to_numpy()
                                     for name in ("before", "after"))
    well_formed = (known & (before_lengths == np.where(_HAS_BEFORE[codes], widths, -1))
                   & (after_lengths == np.where(_HAS_AFTER[codes], widths, -1)))
    malformed = np.zeros(len(tables) + 1, dtype=bool)
    malformed[group[in_table & ~well_formed]] = True
    copied = np.isin(commit_ts, np.fromiter(snapshot_ts, np.int64)) if snapshot_ts else np.zeros(count, dtype=bool)
    checked = in_table & ~malformed[group] & ~copied

    # A transaction is a run of one table's rows at one commit-ts.
    starts = np.ones(count, dtype=bool)
    starts[1:] = (group[1:] != group[:-1]) | (commit_ts[1:] != commit_ts[:-1])
    txn = np.cumsum(starts) - 1
    changed = np.zeros(int(txn[-1]) + 1, dtype=bool)
    is_update = codes == _UPDATE

    netted = checked & (np.bincount(txn[checked], minlength=len(changed))[txn] > 1) & (handle >= 0).any(axis=1)
    before, after = rows["before"], rows["after"]
    for positions, candidates in ((handle, netted & is_update), (split, checked & is_update)):
        for slot in range(positions.shape[1]):  # an update that changes a key value
            updates = np.flatnonzero(candidates & (positions[:, slot] >= 0))
            slot_positions = positions[updates, slot]
            differ = values_differ(_image_values(before, updates, slot_positions),
                                   _image_values(after, updates, slot_positions))
            changed[txn[updates[differ.to_numpy(zero_copy_only=False)]]] = True
    updates = np.flatnonzero(netted & is_update)
    changed[txn[updates[_unchanged(before, after, updates, widths[updates])]]] = True
    changed[_keys_on_two_rows(before, after, np.flatnonzero(netted), txn, codes, handle)] = True
    return in_table & (malformed[group] | changed[txn] | (copied & marks_snapshot))


def _positions(per_table: list[list[int]]) -> np.ndarray:
    """Per table (and the no-table entry last), its positions padded with -1 to the longest."""
    slots = max((len(p) for p in per_table), default=0)
    padded = np.full((len(per_table) + 1, slots), -1, dtype=np.int64)
    for number, positions in enumerate(per_table):
        padded[number, :len(positions)] = positions
    return padded


def _image_values(images: pa.ChunkedArray, rows: np.ndarray, positions: np.ndarray) -> pa.Array:
    """The value at `positions[i]` of row `rows[i]`'s image (rows ascending, each image present
    with that many values); null where the position is -1. Only these values are copied."""
    parts, start = [], 0
    for chunk in images.chunks:
        end = start + len(chunk)
        first, last = np.searchsorted(rows, [start, end])
        if last > first:
            indices = chunk.offsets.to_numpy()[rows[first:last] - start] + positions[first:last]
            parts.append(chunk.values.take(pa.array(indices, mask=positions[first:last] < 0)))
        start = end
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def _unchanged(before: pa.ChunkedArray, after: pa.ChunkedArray, rows: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Per row of `rows` (ascending, each with both images of `widths` values), whether before ==
    after, comparing up to _COMPARED_ROWS rows' values at a time."""
    unchanged = np.zeros(len(rows), dtype=bool)
    for first in range(0, len(rows), _COMPARED_ROWS):
        window, window_widths = rows[first:first + _COMPARED_ROWS], widths[first:first + _COMPARED_ROWS]
        # Every value of every row: row i's values are its image's positions 0 .. widths[i] - 1.
        ends = np.cumsum(window_widths)
        positions = np.arange(int(ends[-1])) - np.repeat(ends - window_widths, window_widths)
        value_rows = np.repeat(window, window_widths)
        differs = values_differ(_image_values(before, value_rows, positions),
                                _image_values(after, value_rows, positions)).to_numpy(zero_copy_only=False)
        unchanged[first:first + len(window)] = ~np.logical_or.reduceat(differs, ends - window_widths)
    return unchanged


def _keys_on_two_rows(before: pa.ChunkedArray, after: pa.ChunkedArray, rows: np.ndarray, txn: np.ndarray,
                      codes: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The transactions (with repeats) with a handle key on two of `rows`: an insert's key is in
    its after image, any other row's in its before image; `positions` are per row of the batch."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    inserts = codes[rows] == _INSERT
    # Keys from before images, then from after images: one order for every key column.
    ordered = np.concatenate([rows[~inserts], rows[inserts]])
    split = int(np.count_nonzero(~inserts))
    keys = {"txn": pa.array(txn[ordered])}
    for slot in range(positions.shape[1]):
        slot_positions = positions[ordered, slot]
        keys[f"key{slot}"] = pa.concat_arrays([
            _image_values(before, ordered[:split], slot_positions[:split]),
            _image_values(after, ordered[split:], slot_positions[split:])])
    # Acero's thread pool costs more than it saves on a batch's keys (~360 against ~150 us a
    # call for 120 rows when this ran per table).
    touched = pa.table(keys).group_by(list(keys), use_threads=False).aggregate([([], "count_all")])
    return touched["txn"].filter(pc.greater(touched["count_all"], 1)).to_numpy()
