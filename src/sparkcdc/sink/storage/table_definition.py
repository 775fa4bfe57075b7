"""Schema files of the storage sink (pkg/sink/cloudstorage/table_definition.go).

`schema_<tableVersion>_<crc10>.json` holds the table definition, indented like Go's
json.MarshalIndent with four spaces. The checksum is a CRC32-IEEE (TiCDC's PositionInertia
over one write) of the definition without Query/Type/TableVersion, columns sorted by name.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from sparkcdc.model.events import ColumnInfo, DDLEvent, TableInfo
from sparkcdc.schema.ddl_types import action_type
from sparkcdc.sink.codec import gojson
from sparkcdc.sink.codec.mysqltypes import display_length, type_name

DEFINITION_VERSION = 1

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
        return self._checksum

    @cached_property
    def _checksum(self) -> int:
        # Once per definition: a new table's schema file needs it for its name and to look for
        # an identical schema stored before.
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
