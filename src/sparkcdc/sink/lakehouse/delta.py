"""Delta Lake tables through delta-rs (`deltalake`), written from the driver as Arrow.

Each table is the path `<root>/<table-path>` (`{schema}/{table}` by default). Every commit
carries a `txn` action (appId = the changefeed, version = the batch's commit-ts; delta-rs
`transaction_version` reads it back) and the same pair in commitInfo as user metadata, so
`DESCRIBE HISTORY` shows the commit-ts of every version.

A batch is one MERGE: the plan's upserts and deleted keys as the source, matched on the key
(copy-on-write: delta-rs rewrites the files that hold a matched key; it does not write deletion
vectors). Schema changes: ADD COLUMN without a value for existing rows is metadata only; an
ADD COLUMN with a default, DROP/RENAME COLUMN and widening rewrite the table in one commit
(without column mapping, the only form every Delta reader understands). RENAME TABLE copies the
table's files under the new path, then deletes the old path. DROP TABLE deletes the path.
"""

from __future__ import annotations

import posixpath
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import ErrStorageIO
from sparkcdc.sink.lakehouse.changes import MergePlan
from sparkcdc.sink.lakehouse.config import LakehouseTarget
from sparkcdc.sink.lakehouse.evolution import SchemaEvolution
from sparkcdc.sink.lakehouse.sink import CHANGEFEED_PROPERTY, COMMIT_TS_PROPERTY, Commit, TableName

_DELETE_FLAG = "__sparkcdc_delete"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class DeltaTables:
    """LakeTables for Delta Lake."""

    def __init__(self, target: LakehouseTarget, app_id: str):
        import deltalake  # noqa: F401 - fail at sink creation, not at the first batch

        self._target = target
        self._app_id = app_id
        self._storage = target.storage_options()
        self._fs = target.location.filesystem()
        self._tables: dict[TableName, object] = {}

    def _relative(self, name: TableName) -> str:
        return self._target.options.table_path.format(schema=name.schema, table=name.table)

    def uri(self, name: TableName) -> str:
        return self._target.path(self._relative(name))

    def _fs_path(self, name: TableName) -> str:
        return posixpath.join(self._target.location.root, self._relative(name))

    def _open(self, name: TableName):
        from deltalake import DeltaTable

        table = self._tables.get(name)
        if table is not None:
            table.update_incremental()
            return table
        if not DeltaTable.is_deltatable(self.uri(name), storage_options=self._storage):
            return None
        table = self._tables[name] = DeltaTable(self.uri(name), storage_options=self._storage)
        return table

    @staticmethod
    def _properties(commit: Optional[Commit]):
        from deltalake import CommitProperties, Transaction

        if commit is None:
            return None
        # userMetadata is the field Spark's DESCRIBE HISTORY shows; the other keys are for delta-rs.
        user_metadata = f"{CHANGEFEED_PROPERTY}={commit.app_id} {COMMIT_TS_PROPERTY}={commit.commit_ts}"
        return CommitProperties(custom_metadata={**commit.properties(), "userMetadata": user_metadata},
                                app_transactions=[Transaction(commit.app_id, commit.commit_ts)])

    def watermark(self, name: TableName) -> Optional[int]:
        table = self._open(name)
        if table is None:
            return None
        return table.transaction_version(self._app_id) or 0

    def schema(self, name: TableName) -> pa.Schema:
        return pa.schema(self._open(name).schema().to_arrow())

    def create(self, name: TableName, schema: pa.Schema, commit: Optional[Commit]) -> None:
        from deltalake import DeltaTable

        self._tables.pop(name, None)
        DeltaTable.create(self.uri(name), schema, mode="error", name=name.table,
                          storage_options=self._storage, commit_properties=self._properties(commit))

    def merge(self, name: TableName, plan: MergePlan, commit: Commit) -> None:
        table = self._open(name)
        deletes = plan.deletes
        for field in plan.upserts.schema:
            if field.name not in plan.key:
                deletes = deletes.append_column(field, pa.nulls(deletes.num_rows, field.type))
        source = pa.concat_tables([
            plan.upserts.append_column(_DELETE_FLAG, pa.repeat(pa.scalar(False), plan.upserts.num_rows)),
            deletes.select(plan.upserts.column_names).append_column(
                _DELETE_FLAG, pa.repeat(pa.scalar(True), deletes.num_rows)),
        ])
        on = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in plan.key)
        deleted = f"s.{_quoted(_DELETE_FLAG)}"
        (table.merge(source, on, source_alias="s", target_alias="t", commit_properties=self._properties(commit))
         .when_matched_delete(deleted)
         .when_matched_update_all(f"NOT {deleted}", except_cols=[_DELETE_FLAG])
         .when_not_matched_insert_all(f"NOT {deleted}", except_cols=[_DELETE_FLAG])
         .execute())

    def append(self, name: TableName, rows: pa.Table, commit: Commit) -> None:
        from deltalake import write_deltalake

        write_deltalake(self._open(name), rows, mode="append", storage_options=self._storage,
                        commit_properties=self._properties(commit))

    def truncate(self, name: TableName, commit: Commit) -> None:
        self._open(name).delete(commit_properties=self._properties(commit))

    def drop(self, name: TableName) -> None:
        self._tables.pop(name, None)
        path = self._fs_path(name)
        try:
            if self._fs.exists(path):
                self._fs.rm(path, recursive=True)
        except Exception as exc:  # noqa: BLE001 - every backend raises its own kinds
            raise ErrStorageIO(f"cannot delete the Delta table {self.uri(name)}: {exc}") from exc

    def tables(self, schema: str) -> list[TableName]:
        found = []
        base = posixpath.join(self._target.location.root, schema)
        try:
            entries = self._fs.ls(base, detail=False) if self._fs.exists(base) else []
        except FileNotFoundError:
            entries = []
        for entry in entries:
            name = TableName(schema, posixpath.basename(entry.rstrip("/")))
            if self._relative(name) == f"{schema}/{name.table}" and self.watermark(name) is not None:
                found.append(name)
        return found

    def rename(self, old: TableName, new: TableName, commit: Commit) -> None:
        # Object stores have no rename: copy, mark the copy with the DDL's commit-ts, delete the
        # original. A crash in between leaves a copy without the mark (redone) or both (the
        # sink's replay deletes the old one).
        self.drop(new)
        source, target = self._fs_path(old), self._fs_path(new)
        try:
            self._fs.copy(source, target, recursive=True)
        except Exception as exc:  # noqa: BLE001
            raise ErrStorageIO(f"cannot copy the Delta table {self.uri(old)} to {self.uri(new)}: {exc}") from exc
        self._open(new).alter.set_table_name(new.table, commit_properties=self._properties(commit))
        self.drop(old)

    def evolve(self, name: TableName, evolution: SchemaEvolution, schema: pa.Schema,
               fill: Callable[[int], dict[str, pa.Array]], commit: Commit) -> None:
        from deltalake import write_deltalake
        from deltalake.schema import Schema

        table = self._open(name)
        if not (evolution.dropped or evolution.renames or evolution.widened) and not any(
                values.null_count < len(values) for values in fill(1).values()):
            # Columns whose existing rows are NULL: a metadata-only commit.
            added = Schema.from_arrow(pa.schema([schema.field(c.name) for c in evolution.added])).fields
            table.alter.add_columns(list(added), commit_properties=self._properties(commit))
            return
        data = table.to_pyarrow_table()
        sources = {change.column.name: change.source for change in evolution.columns}
        values = fill(data.num_rows)
        arrays = []
        for field in schema:
            if field.name in values:
                arrays.append(values[field.name])
            else:
                arrays.append(pc.cast(data[sources.get(field.name, field.name)], field.type))
        rewritten = pa.Table.from_arrays(arrays, schema=schema)
        write_deltalake(table, rewritten, mode="overwrite", schema_mode="overwrite", storage_options=self._storage,
                        commit_properties=self._properties(commit))

    def compact(self, name: TableName) -> None:
        table = self._open(name)
        if table is not None:
            table.optimize.compact(target_size=self._target.options.target_file_size)

    def close(self) -> None:
        self._tables.clear()
