"""SQL for chunked checksums: pure functions of a table's shape, so they are unit-tested as text.

Every column is compared through one canonical text expression, the same on both sides, so a
checksum and a row read agree on what "equal" means: binary data as HEX (no charset conversion),
BIT as its number, text converted to utf8mb4, everything else CAST AS CHAR (sessions run in UTC,
so TIMESTAMP values compare as instants). CONCAT_WS skips NULLs, so a trailing string of ISNULL
flags tells NULL from ''.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

BINARY_DATA_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
SPATIAL_DATA_TYPES = frozenset({"geometry", "point", "linestring", "polygon", "multipoint",
                                "multilinestring", "multipolygon", "geometrycollection"})


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # information_schema.COLUMNS.DATA_TYPE, lower case
    column_type: str = ""  # COLUMN_TYPE, lower case (`char(8) binary`, `int(10) unsigned`)


@dataclass(frozen=True)
class TableShape:
    """What the diff needs of a table: its columns in order and the key chunks are cut by."""

    schema: str
    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # primary key, else a NOT NULL unique key; empty: the table is one chunk

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def quote_table(shape: TableShape) -> str:
    return f"{quote_name(shape.schema)}.{quote_name(shape.table)}"


def canonical_expression(column: Column) -> str:
    """One column as comparable text (NULL stays NULL)."""
    name = quote_name(column.name)
    if column.data_type in BINARY_DATA_TYPES or column.data_type in SPATIAL_DATA_TYPES:
        return f"HEX({name})"
    if column.data_type in ("char", "varchar") and "binary" in column.column_type:
        return f"HEX({name})"
    if column.data_type == "bit":
        return f"CAST({name}+0 AS CHAR)"
    if column.data_type in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum",
                            "set", "json"):
        return f"CONVERT({name} USING utf8mb4)"
    return f"CAST({name} AS CHAR)"


def row_expression(shape: TableShape) -> str:
    """CONCAT_WS over every column plus the NULL flags: equal rows give equal text."""
    values = [canonical_expression(c) for c in shape.columns]
    null_flags = "CONCAT(" + ", ".join(f"ISNULL({quote_name(c.name)})" for c in shape.columns) + ")"
    return "CONCAT_WS(',', " + ", ".join(values + [null_flags]) + ")"


@dataclass(frozen=True)
class Chunk:
    """Rows with lower < key <= upper (None: unbounded on that side), in key order."""

    index: int
    lower: Optional[tuple[Any, ...]]
    upper: Optional[tuple[Any, ...]]

    def describe(self) -> str:
        def bound(values):
            return "-inf" if values is None else "(" + ", ".join(map(_short, values)) + ")"
        return f"chunk {self.index} ({bound(self.lower)}, {bound(self.upper) if self.upper is not None else '+inf'}]"


def _short(value: Any) -> str:
    text = value.hex() if isinstance(value, (bytes, bytearray)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _key_tuple(shape: TableShape) -> str:
    names = ", ".join(quote_name(k) for k in shape.key)
    return f"({names})" if len(shape.key) > 1 else names


def _placeholders(count: int) -> str:
    return "(" + ", ".join(["%s"] * count) + ")" if count > 1 else "%s"


def chunk_condition(shape: TableShape, chunk: Chunk) -> tuple[str, list[Any]]:
    """`WHERE` text for a chunk (row-value comparison on a composite key) and its parameters."""
    parts, args = [], []
    if chunk.lower is not None:
        parts.append(f"{_key_tuple(shape)} > {_placeholders(len(shape.key))}")
        args.extend(chunk.lower)
    if chunk.upper is not None:
        parts.append(f"{_key_tuple(shape)} <= {_placeholders(len(shape.key))}")
        args.extend(chunk.upper)
    return (" AND ".join(parts) if parts else "TRUE"), args


def next_boundary_sql(shape: TableShape, after: Optional[tuple[Any, ...]], chunk_size: int) -> tuple[str, list[Any]]:
    """The key `chunk_size` rows past `after`: the upper bound of the next chunk."""
    keys = ", ".join(quote_name(k) for k in shape.key)
    where, args = chunk_condition(shape, Chunk(0, after, None))
    order = ", ".join(quote_name(k) for k in shape.key)
    return (f"SELECT {keys} FROM {quote_table(shape)} WHERE {where} ORDER BY {order} "
            f"LIMIT 1 OFFSET {int(chunk_size) - 1}", args)


def checksum_sql(shape: TableShape, chunk: Chunk) -> tuple[str, list[Any]]:
    """COUNT(*) and BIT_XOR of the first 64 bits of each row's MD5, for one chunk."""
    where, args = chunk_condition(shape, chunk)
    digest = f"CAST(CONV(SUBSTRING(MD5({row_expression(shape)}), 1, 16), 16, 10) AS UNSIGNED)"
    return f"SELECT COUNT(*), BIT_XOR({digest}) FROM {quote_table(shape)} WHERE {where}", args


def rows_sql(shape: TableShape, chunk: Chunk) -> tuple[str, list[Any]]:
    """Every row of a chunk as canonical text, key columns first (for the row-level report)."""
    where, args = chunk_condition(shape, chunk)
    select = ", ".join(canonical_expression(c) for c in shape.columns)
    order = ", ".join(quote_name(k) for k in shape.key) if shape.key else "1"
    return f"SELECT {select} FROM {quote_table(shape)} WHERE {where} ORDER BY {order}", args


def key_positions(shape: TableShape) -> list[int]:
    names = shape.column_names
    return [names.index(k) for k in shape.key]


def same_columns(source: Sequence[Column], target: Sequence[Column]) -> bool:
    """Same column names and data types in the same order (display widths may differ)."""
    return [(c.name.lower(), c.data_type) for c in source] == [(c.name.lower(), c.data_type) for c in target]
