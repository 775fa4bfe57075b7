"""One table's row changes of a micro-batch, and what they become in a lake table.

This is the one place that decides what a batch does to a table, for Delta and Iceberg alike:

- upsert mode (`merge_plan`): the last change per key wins, ordered by (commit-ts, seq) as the
  rows arrive. Each change is one or two events on keys: an update that moves its key deletes
  the old key and writes the new one; a delete deletes its key; an insert or update writes its
  key. The table is then: rows of every touched key removed, the `upserts` written. A format
  applies that as one MERGE (Delta) or one copy-on-write overwrite snapshot (Iceberg).
- changelog mode (`changelog_table`): every change appended as a row with `_op`, `_commit_ts`,
  `_seq` (its position in its transaction) and, with old-value, the before image as `_old_<c>`;
  a TRUNCATE TABLE appends one row with `_op = 'truncate'` (`truncate_marker`).

Rows at or below the table's watermark (the commit-ts its last commit recorded) were applied
before a crash and are dropped (`ChangeBuffer.after`): a replayed batch is applied once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.model.events import RowChange, TableInfo
from sparkcdc.model.change_batch import OP_NAMES
from sparkcdc.sink.codec.arrow_input import arrow_rows
from sparkcdc.sink.lakehouse.types import arrow_schema, typed_table

_IMAGE = pa.list_(pa.string())
# The changelog table's own columns, ahead of the upstream's.
OP_COLUMN, COMMIT_TS_COLUMN, SEQ_COLUMN = "_op", "_commit_ts", "_seq"
OLD_PREFIX = "_old_"
_KEY_SEPARATOR = "\x00"


@dataclass
class ChangeBuffer:
    """A table version's changes of one batch as Arrow columns, in (commit-ts, seq) order."""

    info: TableInfo
    chunks: list[pa.Table] = field(default_factory=list)

    def add_arrow(self, commit_ts, ops, before, after) -> None:
        rows = arrow_rows(self.info, commit_ts, ops, before, after)
        self.chunks.append(pa.table({"commit_ts": rows.commit_ts, "op": rows.op_codes.cast(pa.int8()),
                                     "before": rows.before, "after": rows.after}))

    def add_rows(self, rows: Sequence[RowChange]) -> None:
        codes = {name: code for code, name in enumerate(OP_NAMES.to_pylist())}
        self.chunks.append(pa.table({
            "commit_ts": pa.array([r.commit_ts for r in rows], pa.int64()),
            "op": pa.array([codes[r.op] for r in rows], pa.int8()),
            "before": pa.array([r.before for r in rows], _IMAGE),
            "after": pa.array([r.after for r in rows], _IMAGE),
        }))

    def rows(self) -> pa.Table:
        if not self.chunks:
            return pa.table({"commit_ts": pa.array([], pa.int64()), "op": pa.array([], pa.int8()),
                             "before": pa.array([], _IMAGE), "after": pa.array([], _IMAGE)})
        return pa.concat_tables(self.chunks).combine_chunks()

    def after(self, watermark: int) -> pa.Table:
        """The changes of transactions committed after `watermark`."""
        rows = self.rows()
        return rows.filter(pc.greater(rows["commit_ts"], watermark)) if watermark else rows


@dataclass(frozen=True)
class MergePlan:
    """What one batch does to a keyed table: delete every row whose key is in `touched`, then
    write `upserts` (typed as the lake table). `deletes` are the touched keys not rewritten."""

    upserts: pa.Table
    deletes: pa.Table  # key columns only
    key: tuple[str, ...]

    @property
    def touched(self) -> pa.Table:
        return pa.concat_tables([self.upserts.select(list(self.key)), self.deletes])

    def __len__(self) -> int:
        return self.upserts.num_rows + self.deletes.num_rows


def _key_text(info: TableInfo, images: pa.Array, positions: list[int]) -> pa.Array:
    """Each image's key as one string (canonical texts joined by NUL); null without an image."""
    parts = [pc.fill_null(pc.list_element(images, p), "") for p in positions]
    if len(parts) == 1:
        joined = parts[0]
    else:
        joined = pc.binary_join_element_wise(*parts, _KEY_SEPARATOR)
    return pc.if_else(pc.is_null(images), pa.scalar(None, pa.string()), joined)


def merge_plan(info: TableInfo, rows: pa.Table) -> MergePlan:
    """The last change per key of `rows` (ChangeBuffer columns, in order) as upserts and deletes."""
    positions = [info.column_names.index(name) for name in info.handle_key]
    before, after = rows["before"].combine_chunks(), rows["after"].combine_chunks()
    old_key, new_key = _key_text(info, before, positions), _key_text(info, after, positions)
    codes = rows["op"].to_numpy()
    count = rows.num_rows
    # Events in order: a row's delete of its old key (2i) comes before its write of the new (2i + 1).
    moved = pc.fill_null(pc.not_equal(old_key, new_key), True).to_numpy(zero_copy_only=False)
    deletes_old = (codes == 2) | ((codes == 1) & moved)
    writes_new = codes != 2
    order = np.arange(count, dtype=np.int64)
    events = pa.table({
        "key": pa.concat_arrays([old_key.filter(pa.array(deletes_old)), new_key.filter(pa.array(writes_new))]),
        "position": np.concatenate([2 * order[deletes_old], 2 * order[writes_new] + 1]),
    })
    last = events.group_by("key", use_threads=False).aggregate([("position", "max")])["position_max"].to_numpy()
    row = last // 2
    is_write = (last % 2) == 1
    write_rows = np.sort(row[is_write])
    delete_rows = np.sort(row[~is_write])
    upserts = typed_table(info, after.take(pa.array(write_rows, pa.int64())))
    deleted = typed_table(info, before.take(pa.array(delete_rows, pa.int64()))).select(list(info.handle_key))
    return MergePlan(upserts, deleted, tuple(info.handle_key))


def changelog_schema(info: TableInfo, old_value: bool) -> pa.Schema:
    fields = [pa.field(OP_COLUMN, pa.string()), pa.field(COMMIT_TS_COLUMN, pa.int64()), pa.field(SEQ_COLUMN, pa.int64())]
    fields += list(arrow_schema(info))
    if old_value:
        fields += [field.with_name(OLD_PREFIX + field.name) for field in arrow_schema(info)]
    return pa.schema(fields)


def truncate_marker(schema: pa.Schema, commit_ts: int) -> pa.Table:
    """A changelog table's record of a TRUNCATE TABLE: `_op = 'truncate'`, every column NULL."""
    values = {OP_COLUMN: pa.array(["truncate"]), COMMIT_TS_COLUMN: pa.array([commit_ts], pa.int64()),
              SEQ_COLUMN: pa.array([0], pa.int64())}
    return pa.Table.from_arrays([values.get(f.name, pa.nulls(1, f.type)) for f in schema], schema=schema)


def changelog_table(info: TableInfo, rows: pa.Table, old_value: bool) -> pa.Table:
    """Every change as a row: the after image (the before image for a delete) and its op,
    commit-ts and position in its transaction."""
    commit_ts = rows["commit_ts"].combine_chunks()
    codes = rows["op"].combine_chunks()
    before, after = rows["before"].combine_chunks(), rows["after"].combine_chunks()
    image = pc.if_else(pc.equal(codes, 2), before, after)
    ts = commit_ts.to_numpy()
    starts = np.concatenate([[0], np.flatnonzero(ts[1:] != ts[:-1]) + 1]) if len(ts) else np.array([], np.int64)
    first_of_run = np.repeat(starts, np.diff(np.concatenate([starts, [len(ts)]])))
    seq = np.arange(len(ts), dtype=np.int64) - first_of_run
    columns = [OP_NAMES.take(codes.cast(pa.int32())), commit_ts, pa.array(seq, pa.int64())]
    columns += typed_table(info, image).columns
    if old_value:
        columns += typed_table(info, before).columns
    return pa.Table.from_arrays(columns, schema=changelog_schema(info, old_value))
