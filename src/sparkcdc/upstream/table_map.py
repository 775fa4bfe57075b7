"""A table's definition as the binlog itself describes it: a TABLE_MAP event with
binlog_row_metadata=FULL (what a back-fill uses for tables a DDL changed, upstream/backfill.py).

The event carries every column's name, type (with the length, precision, scale or fractional
seconds its rows need), signedness, nullability, collation, ENUM/SET members and geometry
subtype, and the primary key. It does not carry, so the definition lacks: unique and other
secondary keys (a table without a primary key therefore has no handle key, and is replicated
only under force-replicate), column defaults, comments, AUTO_INCREMENT, generated-column
expressions, and MariaDB's JSON (a LONGTEXT with a CHECK constraint, indistinguishable from a
LONGTEXT). The table's default charset is taken from its first character column.
"""

from __future__ import annotations

from typing import Optional

from pymysqlreplication.constants import FIELD_TYPE

from sparkcdc.model.events import ColumnInfo
from sparkcdc.schema.catalog import IndexDef, TableDef, max_bytes_per_char
from sparkcdc.schema.parser import charset_of_collation

_INTEGERS = {FIELD_TYPE.TINY: "tinyint", FIELD_TYPE.SHORT: "smallint", FIELD_TYPE.INT24: "mediumint",
             FIELD_TYPE.LONG: "int", FIELD_TYPE.LONGLONG: "bigint"}
_TEMPORAL = {FIELD_TYPE.DATETIME2: "datetime", FIELD_TYPE.TIMESTAMP2: "timestamp", FIELD_TYPE.TIME2: "time",
             FIELD_TYPE.DATETIME: "datetime", FIELD_TYPE.TIMESTAMP: "timestamp", FIELD_TYPE.TIME: "time"}
_TEXTS = ("tinytext", "text", "mediumtext", "longtext")
_BLOBS = ("tinyblob", "blob", "mediumblob", "longblob")
# MySQL's Field::geometry_type numbering (TABLE_MAP GEOMETRY_TYPE metadata).
_GEOMETRIES = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
               "geometrycollection")


def table_def_from_table_map(event) -> TableDef:
    """The definition a TABLE_MAP event (mysql-replication's TableMapEvent) describes."""
    nullable = _bits(event.null_bitmask, len(event.columns))
    metadata = event.optional_metadata
    geometry_types = iter(metadata.geometry_type_list or ())
    columns = []
    for number, binlog in enumerate(event.columns):
        column = _column(binlog, nullable[number], geometry_types)
        columns.append(column)
    key_numbers = list(metadata.simple_primary_key_list or ()) + sorted(metadata.primary_keys_with_prefix or {})
    key = tuple(columns[n].name for n in key_numbers)
    indexes = (IndexDef("PRIMARY", "primary", key),) if key else ()
    charset = next((c.charset for c in columns if c.charset and c.charset != "binary"), "utf8mb4")
    return TableDef(event.schema, event.table, tuple(columns), indexes, charset)


def _bits(bitmap, count: int) -> list[bool]:
    data = bytes(bitmap)
    return [bool(data[i >> 3] & (1 << (i & 7))) for i in range(count)]


def _column(binlog, nullable: bool, geometry_types) -> ColumnInfo:
    t = binlog.type
    name = binlog.name
    unsigned = bool(binlog.unsigned)
    charset = charset_of_collation(binlog.collation_name) if getattr(binlog, "collation_name", None) else None
    if t in _INTEGERS:
        return ColumnInfo(name, _INTEGERS[t], unsigned, nullable)
    if t == FIELD_TYPE.FLOAT:
        return ColumnInfo(name, "float", unsigned, nullable)
    if t == FIELD_TYPE.DOUBLE:
        return ColumnInfo(name, "double", unsigned, nullable)
    if t in (FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL):
        return ColumnInfo(name, "decimal", unsigned, nullable, precision=binlog.precision, scale=binlog.decimals)
    if t in _TEMPORAL:
        return ColumnInfo(name, _TEMPORAL[t], nullable=nullable, scale=getattr(binlog, "fsp", 0) or 0)
    if t in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return ColumnInfo(name, "date", nullable=nullable)
    if t == FIELD_TYPE.YEAR:
        return ColumnInfo(name, "year", nullable=nullable)
    if t == FIELD_TYPE.BIT:
        return ColumnInfo(name, "bit", nullable=nullable, length=binlog.bits)
    if t in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        members = (binlog.enum_values or [""])[1:] if t == FIELD_TYPE.ENUM else (binlog.set_values or [])
        return ColumnInfo(name, "enum" if t == FIELD_TYPE.ENUM else "set", nullable=nullable, charset=charset,
                          elements=tuple(members))
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING):
        binary = charset == "binary"
        kind = ("varbinary" if binary else "varchar") if t != FIELD_TYPE.STRING else ("binary" if binary else "char")
        return ColumnInfo(name, kind, nullable=nullable, charset=charset,
                          length=binlog.max_length // max_bytes_per_char(charset))
    if t == FIELD_TYPE.BLOB:
        ladder = _BLOBS if charset in (None, "binary") else _TEXTS
        return ColumnInfo(name, ladder[max(1, min(4, binlog.length_size)) - 1], nullable=nullable,
                          charset=charset or "binary")
    if t == FIELD_TYPE.JSON:
        return ColumnInfo(name, "json", nullable=nullable, charset="utf8mb4")
    if t == FIELD_TYPE.GEOMETRY:
        subtype: Optional[int] = next(geometry_types, 0)
        kind = _GEOMETRIES[subtype] if subtype is not None and 0 <= subtype < len(_GEOMETRIES) else "geometry"
        return ColumnInfo(name, kind, nullable=nullable)
    raise ValueError(f"column {name!r}: binlog type {t} has no SQL type here")
