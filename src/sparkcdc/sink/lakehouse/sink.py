"""The lakehouse sink: each micro-batch becomes one commit per table, carrying the batch's commit-ts.

Contract with the batch writer (pipeline/batch_sink.py): `write_rows` / `write_arrow` hand over
a batch's rows per table; they are only buffered. `write_ddl` (a DDL ends its batch) first
commits the buffered rows with commit-ts `ddl.commit_ts - 1`, then applies the DDL as a
schema change recorded at `ddl.commit_ts`; `write_checkpoint(end)` commits the rest with `end`.
`flush` does nothing: a table commit needs the commit-ts, which those two calls bring.

Exactly once: every commit records (changefeed, commit-ts) in the table itself (Delta: the
`txn` action `appId`/`version`; Iceberg: a table property, and the snapshot summary). That
commit-ts is the table's watermark: everything committed upstream at or below it is in the
table. A batch replayed after a crash (the checkpoint in the metadata store moves only after
`write_checkpoint`) drops the rows at or below each table's watermark and applies a DDL only
to a table whose watermark is below the DDL's commit-ts, so nothing is applied twice and a
table's history has one commit per batch commit-ts. Lake sinks get whole transactions
(`SinkSpec.splits_large_transactions`), so every row of a batch is at or below its end.

Crash semantics: each table's commit stands alone (tables are committed COMMIT_WORKERS at a
time); a crash leaves some committed (their watermarks say so) and others not; the replay
finishes the batch. Bad input
is found before any commit of the batch: an existing table whose schema differs, a keyless
table in upsert mode, a DDL the formats cannot express (ErrLakehouse*). A partition DDL that
removes or moves rows without row events (TRUNCATE/DROP/EXCHANGE/CONVERT PARTITION, LIST
REORGANIZE) stops the changefeed after the rows before it: the sink does not know which rows a
partition holds, and must not keep rows the upstream lost (TRUNCATE PARTITION ALL empties the table).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence, Union

import pyarrow as pa

from sparkcdc import failpoint
from sparkcdc.config.replica import DeltaConfig, IcebergConfig
from sparkcdc.errors import (ErrLakehouseSchemaChange, ErrLakehouseTableIncompatible, ErrStorageIO,
                             ErrStorageUnavailable, SparkCDCError)
from sparkcdc.model import tso
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.parser import (ConvertPartition, ConvertTable, DDLParseError, ExchangePartition,
                                    RemovePartitionRows, parse)
from sparkcdc.sink.contract import Sink
from sparkcdc.sink.lakehouse.changes import (OLD_PREFIX, ChangeBuffer, MergePlan, changelog_schema, changelog_table,
                                              merge_plan, truncate_marker)
from sparkcdc.sink.lakehouse.evolution import SchemaEvolution, schema_evolution
from sparkcdc.sink.lakehouse.types import arrow_schema, default_array

log = logging.getLogger(__name__)

# Tables committed at once: a table commit is ~20 ms (Delta) to ~40 ms (Iceberg) of mostly I/O and
# Rust, so a batch touching many tables is bound by their sum when committed one by one.
COMMIT_WORKERS = 4

# Snapshot summary / commit info keys, for readers mapping a table version to its commit-ts.
CHANGEFEED_PROPERTY = "sparkcdc.changefeed"
COMMIT_TS_PROPERTY = "sparkcdc.commit-ts"


@dataclass(frozen=True)
class TableName:
    """An upstream table; each format maps it to a path or an identifier."""

    schema: str
    table: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass(frozen=True)
class Commit:
    """What a table commit records: whose and up to which upstream commit-ts."""

    app_id: str  # the changefeed: <namespace>/<id>
    commit_ts: int

    def properties(self) -> dict[str, str]:
        return {CHANGEFEED_PROPERTY: self.app_id, COMMIT_TS_PROPERTY: str(self.commit_ts)}


class LakeTables(Protocol):
    """One table format's operations (sink/lakehouse/delta.py, iceberg.py). Every write is one
    atomic table commit that records `commit` (and so moves the table's watermark)."""

    def watermark(self, name: TableName) -> Optional[int]:
        """The newest commit-ts this changefeed recorded in the table; 0 if none; None: no table."""

    def schema(self, name: TableName) -> pa.Schema: ...
    def create(self, name: TableName, schema: pa.Schema, commit: Optional[Commit]) -> None: ...
    def merge(self, name: TableName, plan: MergePlan, commit: Commit) -> None: ...
    def append(self, name: TableName, rows: pa.Table, commit: Commit) -> None: ...
    def truncate(self, name: TableName, commit: Commit) -> None: ...
    def drop(self, name: TableName) -> None: ...
    def tables(self, schema: str) -> list[TableName]: ...
    def rename(self, old: TableName, new: TableName, commit: Commit) -> None:
        """Move the table; once the new name exists with `commit` recorded, the old is gone."""

    def evolve(self, name: TableName, evolution: SchemaEvolution, schema: pa.Schema,
               fill: Callable[[int], dict[str, pa.Array]], commit: Commit) -> None:
        """Change the table's schema to `schema`; `fill(n)` gives added columns' values for n existing rows."""

    def compact(self, name: TableName) -> None: ...
    def close(self) -> None: ...


# The failpoint that kills the server between a batch's table commits and its checkpoint
# (sparkcdc.failpoint, docs/failpoints.md).
KILL_AFTER_LAKE_COMMIT = "kill-after-lake-commit"

PartitionRows = Union[ExchangePartition, ConvertPartition, ConvertTable, RemovePartitionRows]


def normalized(schema: pa.Schema) -> dict[str, pa.DataType]:
    """Column name -> type, as read back from either format (large types as plain ones)."""
    plain = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}

    def type_of(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(kind) and kind.tz in ("UTC", "+00:00", "Etc/UTC"):
            return pa.timestamp(kind.unit, tz="UTC")
        return plain.get(kind, kind)

    return {f.name: type_of(f.type) for f in schema}


class LakehouseSink(Sink):
    """A changefeed's Delta or Iceberg tables (one per upstream table)."""

    accepts_arrow = True

    def __init__(self, tables: LakeTables, options: Union[DeltaConfig, IcebergConfig], app_id: str):
        self._tables = tables
        self._options = options
        self._app_id = app_id
        self._pending: dict[TableName, ChangeBuffer] = {}
        self._commits_since_compaction: dict[TableName, int] = {}
        self._checked: dict[TableName, pa.Schema] = {}
        self._committed_batches = 0
        self._written = 0  # Arrow bytes of the changes committed to the tables
        self._written_lock = threading.Lock()

    @property
    def bytes_written(self) -> int:
        return self._written

    @property
    def changelog(self) -> bool:
        return self._options.mode == "changelog"

    # -- rows ------------------------------------------------------------------------------
    def _buffer(self, info: TableInfo) -> ChangeBuffer:
        name = TableName(info.schema, info.table)
        buffer = self._pending.get(name)
        if buffer is None or buffer.info != info:
            if buffer is not None and buffer.chunks:
                raise AssertionError(f"{name}: two table versions in one batch")  # a DDL ends its batch
            buffer = self._pending[name] = ChangeBuffer(info)
        return buffer

    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None:
        if rows:
            self._buffer(table).add_rows(rows)

    def write_arrow(self, table: TableInfo, commit_ts, ops, before, after) -> None:
        if len(commit_ts):
            self._buffer(table).add_arrow(commit_ts, ops, before, after)

    def flush(self) -> None:
        """Nothing to do: rows are committed with their batch's commit-ts (module docstring)."""

    def write_checkpoint(self, ts: int) -> int:
        with _table_errors(f"committing the batch ending at {ts}"):
            committed = self._commit(ts)
        if committed:
            self._committed_batches += 1
            if (armed := failpoint.value(KILL_AFTER_LAKE_COMMIT)) is not None and self._committed_batches == int(armed):
                failpoint.kill_process_group(KILL_AFTER_LAKE_COMMIT, f"after lakehouse batch {armed}'s table commits, "
                                                                     "before its checkpoint")
        return ts

    def close(self) -> None:
        self._pending.clear()
        self._tables.close()

    # -- committing a batch ------------------------------------------------------------------
    def _table_schema(self, info: TableInfo) -> pa.Schema:
        return changelog_schema(info, self._options.old_value) if self.changelog else arrow_schema(info)

    def _ensure(self, info: TableInfo) -> None:
        """Create the table if it is missing, else check it has the upstream's columns."""
        name = TableName(info.schema, info.table)
        expected = self._table_schema(info)
        if self._checked.get(name) == expected:
            return
        if not self.changelog and not info.handle_key:
            raise ErrLakehouseTableIncompatible(
                f"table {name} has no primary key and no unique key on NOT NULL columns, so upsert mode cannot "
                f"match its rows; set mode = \"changelog\" in [sink.{self._format}] or exclude the table with a "
                "filter rule")
        if self._tables.watermark(name) is None:
            self._tables.create(name, expected, None)
        else:
            self._check_schema(name, expected, "")
        self._checked[name] = expected

    def _check_schema(self, name: TableName, expected: pa.Schema, during: str) -> None:
        found = normalized(self._tables.schema(name))
        wanted = normalized(expected)
        if found != wanted:
            differences = [f"{column}: table has {found.get(column, 'nothing')}, upstream needs "
                           f"{wanted.get(column, 'nothing')}"
                           for column in sorted(set(found) | set(wanted)) if found.get(column) != wanted.get(column)]
            raise ErrLakehouseTableIncompatible(
                f"the {self._format} table for {name} exists with other columns than the upstream's{during} "
                f"({'; '.join(differences[:5])}). Nothing was written. Drop or move that table (sparkcdc then "
                "creates it), or map this changefeed's tables elsewhere (" + self._mapping_hint + ")")

    @property
    def _format(self) -> str:
        return "delta" if isinstance(self._options, DeltaConfig) else "iceberg"

    @property
    def _mapping_hint(self) -> str:
        return "[sink.delta] table-path" if self._format == "delta" else "[sink.iceberg] namespace / table-name"

    def _commit(self, ts: int) -> bool:
        """Commit every buffered table's rows with commit-ts `ts`, COMMIT_WORKERS tables at a time;
        whether anything was written."""
        pending = [buffer for buffer in self._pending.values() if buffer.chunks]
        self._pending = {}
        for buffer in pending:  # bad input stops the batch before its first commit
            self._ensure(buffer.info)
        commit = Commit(self._app_id, ts)
        if len(pending) <= 1:
            return any([self._commit_table(buffer, commit) for buffer in pending])
        # Each table is its own commit with its own watermark: no order between them to keep.
        with ThreadPoolExecutor(max_workers=min(COMMIT_WORKERS, len(pending)), thread_name_prefix="lake-commit") as pool:
            futures = [pool.submit(self._commit_table, buffer, commit) for buffer in pending]
        return any([future.result() for future in futures])

    def _commit_table(self, buffer: ChangeBuffer, commit: Commit) -> bool:
        name = TableName(buffer.info.schema, buffer.info.table)
        watermark = self._tables.watermark(name) or 0
        if watermark >= commit.commit_ts:
            return False  # committed before a crash: the replay must not apply it again
        rows = buffer.after(watermark)
        if rows.num_rows == 0:
            return False
        began = time.monotonic()
        if self.changelog:
            self._tables.append(name, changelog_table(buffer.info, rows, self._options.old_value), commit)
        else:
            self._tables.merge(name, merge_plan(buffer.info, rows), commit)
        log.debug("%s: %d changes committed at %d in %.2fs", name, rows.num_rows, commit.commit_ts,
                  time.monotonic() - began)
        with self._written_lock:  # tables commit on several threads
            self._written += rows.nbytes
        self._maybe_compact(name)
        return True

    def _maybe_compact(self, name: TableName) -> None:
        every = self._options.compact_every
        if every <= 0:
            return
        count = self._commits_since_compaction.get(name, 0) + 1
        if count >= every:
            began = time.monotonic()
            self._tables.compact(name)
            log.info("%s: compacted after %d commits in %.2fs", name, count, time.monotonic() - began)
            count = 0
        self._commits_since_compaction[name] = count

    # -- DDL -------------------------------------------------------------------------------
    def write_ddl(self, ddl: DDLEvent) -> None:
        with _table_errors(f"applying the DDL {ddl.query!r} at {ddl.commit_ts}"):
            self._apply_ddl(ddl)

    def _apply_ddl(self, ddl: DDLEvent) -> None:
        self._commit(ddl.commit_ts - 1)
        commit = Commit(self._app_id, ddl.commit_ts)
        kind = ddl.ddl_type
        if kind == T.DROP_DATABASE:
            for name in self._tables.tables(ddl.schema):
                self._drop(name, commit)
            return
        if not ddl.table or kind in T.DATABASE_DDLS:
            return
        name = TableName(ddl.schema, ddl.table)
        if kind in _PARTITION_DDLS and (change := _partition_rows(ddl)) is not None:
            if isinstance(change, RemovePartitionRows) and change.statement == "TRUNCATE PARTITION" \
                    and not change.partitions:
                kind = T.TRUNCATE_TABLE  # TRUNCATE PARTITION ALL empties the table, as TRUNCATE TABLE
            else:
                self._refuse_partition_rows(name, ddl, change, commit)
        if kind == T.CREATE_TABLE and ddl.table_info is not None:
            self._create(name, ddl, commit)
        elif self._options.schema_mode == "strict" and self._changes_table(ddl, kind):
            raise ErrLakehouseSchemaChange(
                f"table {name}: the DDL {ddl.query!r} changes a replicated table and [sink.{self._format}] "
                "schema-mode is \"strict\". Nothing was written for it. Set schema-mode = \"evolve\" to apply "
                "DROP/TRUNCATE/RENAME TABLE and ADD/DROP/RENAME COLUMN and widening to the lake table, or exclude "
                "the table with a filter rule")
        elif kind == T.DROP_TABLE:
            self._drop(name, commit)
        elif kind == T.TRUNCATE_TABLE:
            if self._behind(name, commit):
                if self.changelog:  # the log keeps its history; a row says the table was emptied
                    self._tables.append(name, truncate_marker(self._table_schema(ddl.pre_table_info or ddl.table_info),
                                                              ddl.commit_ts), commit)
                else:
                    self._tables.truncate(name, commit)
        elif kind == T.RENAME_TABLE and ddl.pre_table_info is not None:
            self._rename(TableName(ddl.pre_table_info.schema, ddl.pre_table_info.table), name, commit)
        elif ddl.table_info is not None and ddl.pre_table_info is not None:
            self._evolve(name, ddl, commit)

    def _changes_table(self, ddl: DDLEvent, kind: str) -> bool:
        if kind in (T.DROP_TABLE, T.TRUNCATE_TABLE, T.RENAME_TABLE):
            return True
        if ddl.table_info is None or ddl.pre_table_info is None:
            return False
        return self._table_schema(ddl.table_info) != self._table_schema(ddl.pre_table_info)

    def _refuse_partition_rows(self, name: TableName, ddl: DDLEvent, change: "PartitionRows", commit: Commit) -> None:
        """Stop at a partition DDL that moves or removes rows without row events, when a lake table
        it touches exists: the sink cannot know which rows a partition holds, and a lake table
        that kept them would differ from the upstream without anyone knowing."""
        tables = [name] + ([TableName(change.table.schema, change.table.table)]
                           if isinstance(change, (ExchangePartition, ConvertPartition, ConvertTable)) else [])
        affected = [table for table in tables if self._behind(table, commit)]
        if not affected:
            return  # no lake table holds the rows (not replicated here, or not created yet)
        changefeed = self._app_id.split("/", 1)[-1]
        listed = ", ".join(map(str, affected))
        raise ErrLakehouseSchemaChange(
            f"table {name}: the DDL {ddl.query!r} (commit-ts {ddl.commit_ts}) {_partition_effect(change)} upstream "
            f"without row events, and the {self._format} sink cannot tell which rows that is (it does not know the "
            f"table's partitions), so the lake table would silently differ from the upstream. The rows before the "
            f"DDL are committed, nothing after it. To go on: delete those rows from the lake table(s) ({listed}) "
            f"yourself, or drop them and copy them again: resume after the DDL (`sparkcdc cli changefeed resume -c "
            f"{changefeed} --overwrite-checkpoint-ts {ddl.commit_ts + 1}`), then `sparkcdc cli changefeed snapshot "
            f"-c {changefeed} --tables {','.join(f'{t.schema}.{t.table}' for t in affected)}` (with [snapshot] mode "
            "= \"initial\", docs/snapshot.md); or exclude the table with a filter rule")

    def _behind(self, name: TableName, commit: Commit) -> bool:
        """Whether the table exists and has not yet recorded `commit` (the DDL is not applied)."""
        watermark = self._tables.watermark(name)
        return watermark is not None and watermark < commit.commit_ts

    def _create(self, name: TableName, ddl: DDLEvent, commit: Commit) -> None:
        schema = self._table_schema(ddl.table_info)
        watermark = self._tables.watermark(name)
        if watermark is None:
            if not self.changelog and not ddl.table_info.handle_key:
                return  # not replicated (no valid index): created if force-replicate brings rows
            self._tables.create(name, schema, commit)
        elif watermark < commit.commit_ts:
            self._check_schema(name, schema, " (at its CREATE TABLE)")
        self._checked[name] = schema

    def _drop(self, name: TableName, commit: Commit) -> None:
        self._checked.pop(name, None)
        if self._behind(name, commit):
            self._tables.drop(name)

    def _rename(self, old: TableName, new: TableName, commit: Commit) -> None:
        self._checked.pop(old, None)
        self._checked.pop(new, None)
        new_watermark = self._tables.watermark(new)
        if new_watermark is not None and new_watermark >= commit.commit_ts:
            if self._tables.watermark(old) is not None:
                self._tables.drop(old)  # a crash between the rename's steps
            return
        if self._tables.watermark(old) is not None:
            self._tables.rename(old, new, commit)

    def _evolve(self, name: TableName, ddl: DDLEvent, commit: Commit) -> None:
        before, after = ddl.pre_table_info, ddl.table_info
        upstream_evolution = schema_evolution(ddl, before, after)
        if upstream_evolution.changes_nothing or not self._behind(name, commit):
            self._checked.pop(name, None)
            return
        evolution = upstream_evolution
        if self.changelog and self._options.old_value:
            evolution = upstream_evolution.with_copies(OLD_PREFIX)
        schema = self._table_schema(after)
        now_text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(tso.physical_ms(ddl.commit_ts) / 1000))

        def fill(rows: int) -> dict[str, pa.Array]:
            """Added columns' values for existing rows: the upstream's default; an old image
            (changelog `_old_<column>`) from before the column existed has none."""
            values = {column.name: pa.nulls(rows, schema.field(column.name).type) for column in evolution.added}
            values.update({column.name: default_array(column, rows, now_text) for column in upstream_evolution.added})
            return values

        self._tables.evolve(name, evolution, schema, fill, commit)
        self._checked.pop(name, None)
        log.info("%s: schema changed by %r at %d", name, ddl.query, ddl.commit_ts)


# The DDL types under which a partition change may move or remove rows without row events
# (CONVERT TABLE is an ADD PARTITION, CONVERT PARTITION a DROP PARTITION).
_PARTITION_DDLS = frozenset({T.TRUNCATE_PARTITION, T.DROP_PARTITION, T.EXCHANGE_PARTITION, T.REORGANIZE_PARTITION,
                             T.ADD_PARTITION})


def _partition_rows(ddl: DDLEvent) -> Optional[PartitionRows]:
    """What the partition DDL does to rows without row events (schema/parser.py), if anything."""
    try:
        return parse(ddl.extra.get("upstream_query", ddl.query), ddl.extra.get("default_schema", ddl.schema)
                     ).partition_rows
    except DDLParseError:  # the schema store parsed it; a sink that cannot must not guess
        return RemovePartitionRows(ddl.ddl_type.upper(), ())


def _partition_effect(change: PartitionRows) -> str:
    if isinstance(change, ExchangePartition):
        return f"swaps the rows of partition {change.partition} with those of table {change.table}"
    if isinstance(change, ConvertPartition):
        return f"moves the rows of partition {change.partition} into the new table {change.table}"
    if isinstance(change, ConvertTable):
        return f"moves the rows of table {change.table} into a new partition"
    partitions = ", ".join(change.partitions) or "every partition"
    if change.statement == "TRUNCATE PARTITION":
        return f"deletes the rows of partition(s) {partitions}"
    if change.statement == "DROP PARTITION":
        return f"drops partition(s) {partitions} with their rows"
    if change.statement == "REORGANIZE PARTITION":
        return (f"reorganizes LIST partition(s) {partitions}, which deletes the rows whose value no new partition "
                "lists")
    return f"may move or delete rows ({change.statement})"


# What a table library raises that retrying cannot fix: access denied, a path that is a file, and
# programming or data errors (pyarrow's ArrowInvalid is a ValueError). Anything else (an object
# store's timeout or 5xx, a commit conflict with another writer) may pass: the changefeed restarts
# from its checkpoint, and the watermarks make the replay harmless.
_PERMANENT_TABLE_ERRORS = (PermissionError, NotADirectoryError, IsADirectoryError, ValueError, TypeError, KeyError,
                           AttributeError, AssertionError)


@contextlib.contextmanager
def _table_errors(doing: str):
    """Errors of delta-rs / pyiceberg as SPARKCDC errors: ErrStorageUnavailable (retried) or ErrStorageIO."""
    try:
        yield
    except SparkCDCError:
        raise
    except Exception as exc:  # noqa: BLE001 - each library and backend raises its own kinds
        kind = ErrStorageIO if isinstance(exc, _PERMANENT_TABLE_ERRORS) else ErrStorageUnavailable
        raise kind(f"lakehouse sink: {doing} failed: {type(exc).__name__}: {str(exc)[:500]}; check the sink URI, "
                   "its storage and catalog; nothing after the table's last commit is applied until it passes") from exc
