"""Writing one micro-batch to the sink, then advancing the checkpoint.

Order per batch: every row, grouped by table and ordered by (commit_ts, seq) within it, reduced
to one change per key per transaction (netting.py) and split where the sink wants key changes
as delete + insert (update_split.py), is written and flushed; then the batch's DDL (at most one,
the batch's last transaction) runs as a barrier; with a redo log (sparkcdc.redo), every row and
DDL of the batch is durable in it before the sink gets any of them. After the DDL the
checkpoint-ts (the batch end) is persisted, first in the sink (`metadata`) and then in the
metadata store. A crash anywhere before that replays the batch from the previous checkpoint:
duplicates, never gaps. With an initial snapshot (pipeline/snapshot.py) the batch first waits for
chunk reads that began below its end, takes in the read chunks whose place is inside it (at their
free commit-ts, so they sort among the transactions like one more), and marks them done after the
flush, before the checkpoint.

The sink is driven through its contract (sink/contract.py). Rows are grouped with Arrow compute
(`tables_of`). A sink that takes Arrow columns (the storage sink, the Kafka sink with canal-json,
and the MySQL sink: `Sink.accepts_arrow`, `write_arrow`) gets every transaction that netting,
update split and the filters would pass unchanged as columns, encoded or rendered without a
Python object per row; only the other transactions (in a transaction of two or more rows a key
touched twice or a key-moving or no-op update; a key change the sink splits; a filtered or
projected table), and every row for other sinks or with a redo log, become RowChanges. Which
transactions those are is found for all the batch's tables at once (netting.rows_to_rewrite).

A sink may want some tables' rows in binlog order instead (`Sink.keeps_binlog_order`: the MySQL
sink's tables linked by cascading foreign keys, sink/mysql/foreign_keys.py): those are not
netted or split, and go to `write_ordered` as whole upstream transactions across tables, each
with its binlog end position and how the upstream ran its foreign key checks.
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc import failpoint
from sparkcdc.filter.change_filters import ChangeFilters
from sparkcdc.model.change_batch import RANGE_MARKER, batch_bounds, runs_of_equal
from sparkcdc.model.events import DDLEvent, OrderedTransaction, RowChange, TableInfo
from sparkcdc.model.netting import net_changes_per_key
from sparkcdc.pipeline.netting import rows_to_rewrite
from sparkcdc.pipeline.update_split import split_key_updates
from sparkcdc.schema.bdr import bdr_ddls
from sparkcdc.schema.rules import DDLPolicy, replicated_ddls
from sparkcdc.sink.contract import Sink
from sparkcdc.upstream.txn_index import TxnIndex


@dataclass(frozen=True)
class BatchResult:
    start: int
    end: int
    rows: int  # row changes the sink got
    ddls: int
    # Where the time went (the changefeed's metrics), and the bytes the sink sent for the batch.
    write_seconds: float = 0.0  # rows handed to the sink (and, with a redo log, to the log first)
    flush_seconds: float = 0.0  # the sink's flush of the rows, and its checkpoint write
    ddl_seconds: float = 0.0  # the DDL barrier, flushed
    bytes_written: int = 0


_ROW_COLUMNS = ("commit_ts", "seq", "op", "before", "after")


@dataclass(frozen=True)
class TableRows:
    """One table's row changes of a batch as Arrow columns `_ROW_COLUMNS`, in (commit_ts, seq) order."""

    schema: str
    table: str
    rows: pa.Table
    low: int = 0  # where `rows` begins in the batch's sorted rows (tables_of)

    def changes(self, snapshot_ts: frozenset[int] = frozenset()) -> list[RowChange]:
        return _row_changes(self.schema, self.table, self.rows, snapshot_ts)


def _row_changes(schema: str, table: str, rows: pa.Table, snapshot_ts: frozenset[int] = frozenset()) -> list[RowChange]:
    """The rows as RowChanges; those at a commit-ts of `snapshot_ts` (placed snapshot chunks) are
    marked as snapshot reads."""
    # ~4 us a row on a loaded 2-core machine: the columnar path exists to skip this.
    return [RowChange(commit_ts, schema, table, op, None if before is None else tuple(before),
                      None if after is None else tuple(after), seq, commit_ts in snapshot_ts)
            for commit_ts, seq, op, before, after in zip(*(rows[c].to_pylist() for c in _ROW_COLUMNS))]


def _in_order(codes: np.ndarray, commit_ts: np.ndarray, seq: np.ndarray) -> bool:
    """Whether the rows are already sorted by (code, commit_ts, seq)."""
    same_code, same_ts = codes[1:] == codes[:-1], commit_ts[1:] == commit_ts[:-1]
    return bool(np.all((codes[1:] > codes[:-1]) | (same_code & (commit_ts[1:] > commit_ts[:-1]))
                       | (same_code & same_ts & (seq[1:] >= seq[:-1]))))


def tables_of(batch: pa.Table) -> tuple[pa.Table, list[TableRows]]:
    """The batch's rows (`_ROW_COLUMNS`) sorted by table and (commit_ts, seq), range markers
    first, and its row changes per table, each a slice of those, tables in the order each first
    appears in (commit_ts, seq) order."""
    if batch.num_rows == 0:
        return batch.select(_ROW_COLUMNS), []
    schemas = pc.dictionary_encode(batch["schema_name"].combine_chunks())
    names = pc.dictionary_encode(batch["table_name"].combine_chunks())
    width = max(len(names.dictionary), 1)
    code = pc.add(pc.multiply(schemas.indices.cast(pa.int64()), width), names.indices.cast(pa.int64()))
    code = pc.if_else(pc.equal(batch["op"], RANGE_MARKER), -1, code)
    keys = pa.table({"code": code, "commit_ts": batch["commit_ts"], "seq": batch["seq"]})
    codes, commit_ts, seq = (keys[name].to_numpy() for name in ("code", "commit_ts", "seq"))
    if _in_order(codes, commit_ts, seq):
        # As a batch of one table comes (its marker first, then ranges in binlog order): the
        # sort and take would copy every row image for nothing.
        order, rows = None, batch.select(_ROW_COLUMNS)
    else:
        # One stable sort and one take; each table is then a zero-copy slice (markers sort first).
        order = pc.sort_indices(keys, [("code", "ascending"), ("commit_ts", "ascending"), ("seq", "ascending")])
        rows, codes = batch.select(_ROW_COLUMNS).take(order), code.take(order).to_numpy()
    groups = []
    for low, high in runs_of_equal(codes):
        table_code = int(codes[low])
        if table_code >= 0:
            first = low if order is None else order[low].as_py()  # a stable sort: ties keep batch order
            groups.append(((keys["commit_ts"][first].as_py(), keys["seq"][first].as_py(), first),
                           TableRows(schemas.dictionary[table_code // width].as_py(),
                                     names.dictionary[table_code % width].as_py(), rows.slice(low, high - low), low)))
    return rows, [table_rows for _, table_rows in sorted(groups, key=lambda group: group[0])]


class BatchRedo(Protocol):
    """The redo log as the batch writer sees it (sparkcdc.redo.writer.RedoWriter)."""

    is_local: bool  # on a local file system (each piece costs an fsync) or an object store (an upload)

    def batch(self, start: int, end: int): ...
    def checkpoint(self, ts: int) -> None: ...
    def flush_checkpoint(self, ts: int) -> None: ...


class BatchSnapshot(Protocol):
    """The initial snapshot as the batch writer sees it (sparkcdc.pipeline.snapshot.SnapshotStage)."""

    def wait_for_reads(self, end: int) -> None: ...
    def placements(self, start: int, end: int) -> list: ...
    def merge(self, batch: pa.Table, placements: list) -> pa.Table: ...
    def copying_tables(self) -> frozenset[tuple[str, str]]: ...
    def placed(self, placements: list) -> bool: ...


class BatchSyncpoint(Protocol):
    """Syncpoint recording (sparkcdc.sink.mysql.syncpoint.SyncpointWriter)."""

    def due(self, start: int, end: int) -> bool: ...
    def record(self, primary_ts: int, upstream_position: str | None) -> None: ...


# Failpoints of the batch writer (sparkcdc.failpoint, docs/failpoints.md).
KILL_AFTER_FIRST_TABLE = "kill-after-first-table"
KILL_AFTER_DDL = "kill-after-ddl"
PAUSE_INSIDE_TRANSACTION = "pause-inside-transaction"


# Rows per redo piece: a batch's redo is cut at transaction borders into pieces of about this
# many rows, so the sink applies piece k while piece k+1 is encoded and written. Each piece costs
# one fsync on file:// but one upload on an object store, so those get larger pieces.
REDO_PIECE_ROWS = 1000
REDO_PIECE_ROWS_OBJECT_STORE = 4000

# Rows per piece of a table's rows on the columnar path (whole transactions, so a longer one is a
# piece of its own): each piece is combined, checked and encoded alone, so the driver holds one
# piece's working copies instead of the whole table's. A snapshot batch of four 50,000-row chunks
# peaked 100 MiB lower (docs/benchmarks.md); the few more calls a catch-up batch makes cost nothing
# measurable.
WRITE_PIECE_ROWS = 32_768


def redo_pieces(planned: list[tuple[TableInfo, list[RowChange]]], start: int, end: int,
                piece_rows: int = REDO_PIECE_ROWS) -> list[tuple[int, int, list[tuple[TableInfo, list[RowChange]]]]]:
    """(piece start, piece end, rows per table) covering (start, end], cut between transactions."""
    commit_counts: dict[int, int] = {}
    for _, rows in planned:
        for row in rows:
            commit_counts[row.commit_ts] = commit_counts.get(row.commit_ts, 0) + 1
    cuts, in_piece = [], 0
    ordered = sorted(commit_counts)
    for commit_ts in ordered[:-1]:  # the last transaction's piece ends at the batch end
        in_piece += commit_counts[commit_ts]
        if in_piece >= piece_rows:
            cuts.append(commit_ts)
            in_piece = 0
    bounds = [start, *cuts, end]
    pieces = []
    for low, high in zip(bounds, bounds[1:]):
        tables = []
        for info, rows in planned:
            first = bisect.bisect_right(rows, low, key=lambda r: r.commit_ts)
            last = bisect.bisect_right(rows, high, key=lambda r: r.commit_ts)
            if last > first:
                tables.append((info, rows[first:last]))
        pieces.append((low, high, tables))
    return pieces


def ordered_transactions(tables: list[tuple[TableInfo, list[RowChange]]], index: TxnIndex) -> list[OrderedTransaction]:
    """The rows of `tables` as upstream transactions in commit order, each one's rows in binlog
    (seq) order across the tables, with the transaction's end position and foreign key checks."""
    changes = sorted(((row.commit_ts, row.seq, info, row) for info, rows in tables for row in rows),
                     key=lambda change: change[:2])
    records = index.txns_at([change[0] for change in changes])
    transactions = []
    for commit_ts, group in itertools.groupby(changes, key=lambda change: change[0]):
        record = records.get(commit_ts)
        if record is None:
            raise RuntimeError(f"no transaction at commit-ts {commit_ts} in the transaction index")
        transactions.append(OrderedTransaction(commit_ts, str(record.end), record.foreign_key_checks,
                                               tuple((info, row) for _, _, info, row in group)))
    return transactions


def _write_through_redo(redo: BatchRedo, start: int, end: int, planned: list[tuple[TableInfo, list[RowChange]]],
                        ddls: list[DDLEvent], sink: Sink, ordered: list[OrderedTransaction]) -> int:
    """Each piece is durable in the redo log (a reader's resolved-ts reaches its end) before the
    sink gets it; the redo thread works on the next piece while the sink takes this one. The
    `ordered` transactions' tables are logged netted like the others (`redo apply` writes them as
    any table) and go to the sink in binlog order once every piece is durable."""
    pieces = redo_pieces(planned, start, end, REDO_PIECE_ROWS if redo.is_local else REDO_PIECE_ROWS_OBJECT_STORE)
    logged = []
    for low, high, tables in pieces:
        piece = redo.batch(low, high)
        for info, rows in tables:
            piece.add_rows(info, rows)
        if high == end:
            piece.add_ddls(ddls)
        piece.seal()
        logged.append(piece)
    ordered_tables = {(info.schema, info.table) for transaction in ordered for info, _ in transaction.changes}
    written = 0
    for piece, (_, _, tables) in zip(logged, pieces):
        piece.wait()
        for position, (info, rows) in enumerate(tables):
            if (info.schema, info.table) in ordered_tables:
                continue
            sink.write_rows(info, rows)
            written += len(rows)
            if position == 0 and (trigger := failpoint.value(KILL_AFTER_FIRST_TABLE)) is not None:
                _kill_after_first_table(trigger, tables, sink)
    if ordered:
        sink.write_ordered(ordered)
        written += sum(len(transaction.changes) for transaction in ordered)
    return written


def _kill_after_first_table(trigger: str, tables: list[tuple[TableInfo, list[RowChange]]], sink: Sink) -> None:
    """The armed kill-after-first-table failpoint: with the first of several tables of the piece
    holding `trigger`'s rows written, flush it downstream and die."""
    if len(tables) > 1 and any(info.table == trigger for info, _ in tables):
        sink.flush()
        failpoint.kill_process_group(KILL_AFTER_FIRST_TABLE, f"after {tables[0][0].schema}.{tables[0][0].table} "
                                                             f"of a {len(tables)}-table redo piece")


def _planned_rows(info: TableInfo, rows: list[RowChange], split_updates: bool,
                  filters: ChangeFilters | None) -> tuple[TableInfo, list[RowChange]]:
    """One table's rows as the sink gets them: netted, split, filtered and projected."""
    rows = net_changes_per_key(info, rows)
    if split_updates:
        rows = split_key_updates(info, rows)
    if filters is not None:
        info, rows = filters.rows(info, rows)
    return info, rows


def _write_table(info: TableInfo, table_rows: TableRows, sink: Sink, split_updates: bool,
                 filters: ChangeFilters | None, snapshot_ts: frozenset[int] = frozenset(),
                 rewritten: np.ndarray | None = None) -> int:
    """Write one table's rows; returns how many the sink got.

    `rewritten` (netting.rows_to_rewrite, per row of the table), for a table that can go to the
    sink as Arrow columns, names the rows whose transactions netting or update split would change,
    or snapshot rows the sink marks: those take the RowChange path, the others go as columns,
    never becoming RowChanges. Without it (a sink without columns, a filtered or projected table)
    every row takes the RowChange path. The rows go in pieces of whole transactions of about
    WRITE_PIECE_ROWS (docstring there).
    """
    if rewritten is None:
        planned_info, changes = _planned_rows(info, table_rows.changes(snapshot_ts), split_updates, filters)
        sink.write_rows(planned_info, changes)
        return len(changes)
    rows = table_rows.rows
    written = 0
    for first, last in transaction_pieces(rows["commit_ts"].to_numpy(), WRITE_PIECE_ROWS, snapshot_ts):
        piece = rows.slice(first, last - first)
        columns = [piece[c].combine_chunks() for c in ("commit_ts", "op", "before", "after")]
        for low, high in runs_of_equal(rewritten[first:last]):
            if rewritten[first + low]:
                run = piece.slice(low, high - low)
                planned_info, changes = _planned_rows(info, _row_changes(table_rows.schema, table_rows.table, run,
                                                                         snapshot_ts), split_updates, filters)
                sink.write_rows(planned_info, changes)
                written += len(changes)
            else:
                sink.write_arrow(info, *(column.slice(low, high - low) for column in columns))
                written += high - low
    return written


def transaction_pieces(commit_ts: np.ndarray, rows: int, copied: frozenset[int] = frozenset()) -> list[tuple[int, int]]:
    """[first, last) bounds cutting rows in commit_ts order into pieces of whole transactions, each
    ending at the first transaction boundary at or after `rows` rows (a longer transaction is a
    piece of its own size). Rows at a commit-ts in `copied` are a snapshot's chunks, inserts of
    distinct keys rather than a transaction (the chunks placed after one upstream transaction
    share its free slot): they are cut anywhere."""
    pieces, first, count = [], 0, len(commit_ts)
    while first < count:
        last = first + rows
        if last >= count:
            last = count
        elif int(commit_ts[last]) not in copied:
            # The start of the transaction holding row `last`, or its end when it began at `first`.
            last = int(np.searchsorted(commit_ts, commit_ts[last], side="left"))
            if last <= first:
                last = int(np.searchsorted(commit_ts, commit_ts[first], side="right"))
        pieces.append((first, last))
        first = last
    return pieces


def write_batch(
    table: pa.Table,
    index: TxnIndex,
    sink: Sink,
    table_filter: Callable[[str, str], bool],  # (schema, table or "" for db-level DDL)
    on_checkpoint: Callable[[int], None],
    split_updates: bool = False,
    filters: ChangeFilters | None = None,  # event filters and column selectors
    ddl_policy: DDLPolicy = DDLPolicy(),  # allow list: force-replicate, skip unparseable DDL, BDR roles
    redo: BatchRedo | None = None,  # [consistent] level = "eventual": logged before the sink applies
    syncpoint: BatchSyncpoint | None = None,  # enable-sync-point
    snapshot: BatchSnapshot | None = None,  # [snapshot]: chunks placed into the batch
    target_ts: int = 0,  # the changefeed's target-ts: the batch that reaches it leaves nothing held
) -> BatchResult | None:
    bounds = batch_bounds(table)
    if bounds is None:
        return None
    start, end = bounds
    began, bytes_before = time.monotonic(), sink.bytes_written
    placements: list = []
    if snapshot is not None:
        # Every chunk read at a position inside the batch must be in hand before it is written.
        snapshot.wait_for_reads(end)
        placements = snapshot.placements(start, end)
        table = snapshot.merge(table, placements)
        sink.set_snapshot_tables(snapshot.copying_tables())
    snapshot_ts = frozenset(placement.commit_ts for placement in placements)
    written = 0
    planned: list[tuple[TableInfo, list[RowChange]]] = []
    in_binlog_order: list[tuple[TableInfo, list[RowChange]]] = []
    sorted_rows, tables = tables_of(table)
    # Each table with whether the sink keeps its binlog order and whether its rows may go as columns.
    replicated: list[tuple[TableInfo, TableRows, bool, bool]] = []
    infos = index.table_infos_at([(table_rows.schema, table_rows.table) for table_rows in tables], start)
    for table_rows, info in zip(tables, infos):
        if info is None:
            raise RuntimeError(f"no table info for {table_rows.schema}.{table_rows.table} at {start}")
        if info.is_eligible(ddl_policy.force_replicate):  # else the source does not decode them either
            ordered = sink.keeps_binlog_order(info)
            columnar = (redo is None and sink.accepts_arrow and not ordered
                        and not (filters is not None and filters.changes_rows_of(info)))
            replicated.append((info, table_rows, ordered, columnar))
    # Which transactions may go as columns, for every table of the batch at once.
    rewritten = rows_to_rewrite(sorted_rows, [(info, t.low, t.low + t.rows.num_rows)
                                              for info, t, _, columnar in replicated if columnar],
                                split_updates, snapshot_ts, sink.marks_snapshot_rows)
    for info, table_rows, ordered, columnar in replicated:
        if ordered:
            changes = table_rows.changes()
            in_binlog_order.append(filters.rows(info, changes) if filters is not None else (info, changes))
            if redo is None:
                continue
        if redo is None:
            # The sink's writers start while the next table is planned.
            low = table_rows.low
            written += _write_table(info, table_rows, sink, split_updates, filters, snapshot_ts,
                                    rewritten[low:low + table_rows.rows.num_rows] if columnar else None)
        else:
            planned.append(_planned_rows(info, table_rows.changes(snapshot_ts), split_updates, filters))
    # Allow list, valid-index and rename rules; a DDL that must stop the changefeed raises
    # after the rows before it are downstream, as it always did.
    ddl_error: Exception | None = None
    try:
        ddls = index.ddls_between(start, end)
        if ddl_policy.bdr_mode:  # the other primary's sink ran it: it came from where this changefeed writes
            marked = index.marked_between(start, end)
            ddls = [ddl for ddl in ddls if ddl.commit_ts not in marked]
        ddls = [part for d in ddls for part in replicated_ddls(d, table_filter, ddl_policy)]
        if filters is not None:
            ddls = [kept for kept in map(filters.ddl, ddls) if kept is not None]
        if ddl_policy.bdr_mode:
            ddls = bdr_ddls(ddls, ddl_policy.bdr_role)
    except Exception as exc:
        ddls, ddl_error = [], exc
    ordered = ordered_transactions(in_binlog_order, index) if in_binlog_order else []
    if redo is not None and (planned or ddls):
        written = _write_through_redo(redo, start, end, planned, ddls, sink, ordered)
    else:
        if redo is not None:
            redo.batch(start, end).seal(durable=False)  # keeps the log's chain of batches unbroken
        if ordered:
            sink.write_ordered(ordered)
            written += sum(len(transaction.changes) for transaction in ordered)
    handed = time.monotonic()
    # A sink that holds rows across batches (sink.holds_rows) writes them when its interval is up,
    # unless a DDL, a snapshot chunk or the changefeed's end needs them downstream now.
    if not sink.holds_rows or ddls or placements or (target_ts and end >= target_ts):
        sink.flush()
    flushed = time.monotonic()
    if ddl_error is not None:
        raise ddl_error
    if ddls and redo is not None:
        # Every row before the DDL is downstream: persist that before the DDL changes a table,
        # so redo apply never replays old-schema rows into it.
        redo.flush_checkpoint(ddls[0].commit_ts - 1)
    for ddl in ddls:
        sink.write_ddl(ddl)
    if ddls:
        sink.flush()
        if (text := failpoint.value(KILL_AFTER_DDL)) is not None and any(text in ddl.query for ddl in ddls):
            failpoint.kill_process_group(KILL_AFTER_DDL, f"after the DDL matching {text!r}, before its checkpoint")
    if (seconds := failpoint.value(PAUSE_INSIDE_TRANSACTION)) is not None:
        _pause_inside_transaction(table, end, float(seconds))
    ddl_done = time.monotonic()
    if placements:
        snapshot.placed(placements)  # downstream now: never read again, even if the checkpoint write fails
    if syncpoint is not None and syncpoint.due(start, end):
        position = index.position_at(end)
        syncpoint.record(end, str(position) if position is not None else None)
    checkpointing = time.monotonic()
    covered = sink.write_checkpoint(end)  # `end`, or 0 while the sink holds rows of this batch
    checkpointed = time.monotonic()
    if covered:
        on_checkpoint(covered)
        if redo is not None:
            redo.checkpoint(covered)
    return BatchResult(start, end, written, len(ddls), write_seconds=handed - began,
                       flush_seconds=(flushed - handed) + (checkpointed - checkpointing),
                       ddl_seconds=ddl_done - flushed, bytes_written=sink.bytes_written - bytes_before)


def _pause_inside_transaction(table: pa.Table, end: int, seconds: float) -> None:
    """The failpoint: a batch that ends inside a large transaction (it holds rows past its end,
    the transaction's first pieces) waits `seconds` before its checkpoint, once per transaction."""
    commit_ts = pc.max(table["commit_ts"]).as_py()
    if commit_ts is None or commit_ts <= end or commit_ts in _paused:
        return
    _paused.add(commit_ts)
    failpoint.log.warning("FAILPOINT %s: pausing %.0fs after a batch ending inside transaction %d",
                          PAUSE_INSIDE_TRANSACTION, seconds, commit_ts)
    time.sleep(seconds)


_paused: set[int] = set()  # transactions the failpoint paused in (a process-wide failpoint's own state)
