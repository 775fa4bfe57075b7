"""Schema files of the storage sink (pkg/sink/cloudstorage/table_definition.go).

`schema_<tableVersion>_<crc10>.json` holds the table definition, indented like Go's
json.MarshalIndent with four spaces. The checksum is a CRC32-IEEE (TiCDC's PositionInertia
over one write) of the definition without Query/Type/TableVersion, columns sorted by name.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Optional

from sparkcdc.model.events import ColumnInfo, DDLEvent, TableInfo
from sparkcdc.sink.codec import gojson
from sparkcdc.sink.codec.mysqltypes import display_length, type_name

DEFINITION_VERSION = 1

# TiDB's ActionType numbers (pkg/meta/model/job.go), by action name. Both TiDB's names and
# the event-filter spellings ("create database", "create index") are accepted.
ACTION_TYPES = {
    "create schema": 1, "create database": 1, "drop schema": 2, "drop database": 2,
    "create table": 3, "drop table": 4, "add column": 5, "drop column": 6, "add index": 7,
    "create index": 7, "drop index": 8, "add foreign key": 9, "drop foreign key": 10,
    "truncate table": 11, "modify column": 12, "rebase auto id": 13,
    "rebase auto_increment id": 13, "rename table": 14, "set default value": 15,
    "shard row id": 16, "modify table comment": 17, "rename index": 18, "add partition": 19,
    "add table partition": 19, "drop partition": 20, "drop table partition": 20,
    "create view": 21, "modify table charset and collate": 22, "truncate partition": 23,
    "truncate table partition": 23, "drop view": 24, "recover table": 25,
    "modify schema charset and collate": 26, "alter database": 26, "lock table": 27,
    "unlock table": 28, "repair table": 29, "add primary key": 32, "drop primary key": 33,
    "create sequence": 34, "alter sequence": 35, "drop sequence": 36, "add columns": 37,
    "drop columns": 38, "alter index visibility": 41, "exchange partition": 42,
    "exchange table partition": 42, "add check constraint": 43, "drop check constraint": 44,
    "alter check constraint": 45, "rename tables": 47, "create tables": 60,
    "multi-schema change": 61, "multi schema change": 61, "recover schema": 63,
    "reorganize partition": 64, "reorganize table partition": 64,
    "alter table partitioning": 71, "remove partitioning": 72, "remove table partitioning": 72,
}


def action_type(ddl_type: str) -> int:
    return ACTION_TYPES.get(ddl_type.lower(), 0)


def column_definition(col: ColumnInfo, output_column_id: bool = False, column_id: int = 0) -> dict:
    """One TableCol in TiCDC's field order; empty fields are omitted like Go's omitempty."""
    name = type_name(col)
    entry: dict = {}
    if output_column_id:
        entry["ColumnId"] = str(column_id)
    entry["ColumnName"] = col.name
    column_type = name.upper() + (" UNSIGNED" if col.unsigned else "")
    entry["ColumnType"] = column_type
    if col.default is not None:
        entry["ColumnDefault"] = _go_string(col, col.default)
    precision: Optional[str] = None
    scale: Optional[str] = None
    if name in ("timestamp", "datetime", "time"):
        if col.scale:
            scale = str(col.scale)
    elif name in ("float", "double"):
        precision = str(display_length(col))
        if col.scale:
            scale = str(col.scale)
    elif name == "decimal":
        precision = str(display_length(col))
        scale = str(col.scale or 0)
    elif name in ("enum", "set", "date", "json", "geometry"):
        pass
    else:
        length = display_length(col)
        if length is not None:
            precision = str(length)
    if precision:
        entry["ColumnPrecision"] = precision
    if scale:
        entry["ColumnScale"] = scale
    if not col.nullable:
        entry["ColumnNullable"] = "false"
    if col.is_primary_key:
        entry["ColumnIsPk"] = "true"
    return entry


def _go_string(col: ColumnInfo, default: str) -> str:
    """GetColumnDefaultValue as Go's json writes it: a BIT default is TiDB's (flen+7)/8 raw bytes
    and a binary one its bytes, both read as UTF-8 (invalid bytes become U+FFFD)."""
    if col.mysql_type == "bit":
        try:
            raw = int(default).to_bytes(((display_length(col) or 1) + 7) // 8, "big")
        except ValueError:
            return default
    elif col.is_binary:
        raw = default.encode("latin-1", "replace")
    else:
        return default
    return raw.decode("utf-8", "replace")


@dataclass(frozen=True)
class TableDefinition:
    """What a schema file says about one (schema, table) at one table version."""

    schema: str
    table: str
    table_version: int
    query: str
    type: int
    columns: tuple[dict, ...]

    @classmethod
    def from_table_info(cls, info: TableInfo, table_version: int, query: str = "",
                        action: int = 0, output_column_id: bool = False) -> "TableDefinition":
        columns = tuple(
            column_definition(c, output_column_id, i + 1) for i, c in enumerate(info.columns)
        )
        return cls(info.schema, info.table, table_version, query, action, columns)

    @classmethod
    def from_ddl(cls, ddl: DDLEvent, output_column_id: bool = False) -> "TableDefinition":
        if ddl.table_info is not None and ddl.table:
            return cls.from_table_info(ddl.table_info, ddl.commit_ts, ddl.query,
                                       action_type(ddl.ddl_type), output_column_id)
        # Database-level DDL, or a dropped table: no columns.
        return cls(ddl.schema, ddl.table, ddl.commit_ts, ddl.query, action_type(ddl.ddl_type), ())

    @property
    def is_table_schema(self) -> bool:
        return bool(self.columns)

    def to_json(self) -> str:
        return gojson.dumps_indent({
            "Table": self.table,
            "Schema": self.schema,
            "Version": DEFINITION_VERSION,
            "TableVersion": self.table_version,
            "Query": self.query,
            "Type": self.type,
            "TableColumns": list(self.columns) if self.columns else None,
            "TableColumnsTotal": len(self.columns),
        })

    def checksum(self) -> int:
        # TiCDC leaves Version unset (0) in the checksummed form and sorts columns by name
        # into a fresh slice, so a database's schema file sums `"TableColumns": []` although
        # the file itself says null (tiflow table_definition_test: schema_100_3233644819).
        without_query = gojson.dumps_indent({
            "Table": self.table,
            "Schema": self.schema,
            "Version": 0,
            "TableColumns": sorted(self.columns, key=lambda c: c["ColumnName"].encode()),
            "TableColumnsTotal": len(self.columns),
        })
        return zlib.crc32(without_query.encode()) & 0xFFFFFFFF

    def file_path(self) -> str:
        """`<schema>/meta/...` for a database, `<schema>/<table>/meta/...` for a table."""
        directory = f"{self.schema}/meta" if not self.table else f"{self.schema}/{self.table}/meta"
        return f"{directory}/schema_{self.table_version}_{self.checksum():010d}.json"

    @classmethod
    def from_json(cls, text: str) -> "TableDefinition":
        raw = json.loads(text)
        return cls(raw["Schema"], raw["Table"], raw["TableVersion"], raw.get("Query", ""),
                   raw.get("Type", 0), tuple(raw.get("TableColumns") or ()))
