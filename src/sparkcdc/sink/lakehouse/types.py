"""MySQL column types as lake table columns: one mapping for Delta and Iceberg.

Row images reach the sink as canonical text (model/events.py); each column becomes the Arrow
type below, which both formats store natively (Delta and Iceberg have no 8/16-bit integers
that every reader maps alike, no unsigned types, no TIME beyond 24 h, no JSON):

| MySQL                                          | lake column (Arrow; Delta / Iceberg)                 |
|------------------------------------------------|-------------------------------------------------------|
| tinyint, smallint, mediumint, int (signed), year, tinyint..mediumint unsigned | int32 (integer / int) |
| int unsigned, bigint                           | int64 (long)                                          |
| bigint unsigned, bit(64)                       | decimal(20,0): every value exact                      |
| bit(1..63)                                     | int64, the bits' unsigned value                       |
| decimal(p,s), p <= 38                          | decimal(p,s)                                          |
| decimal(p,s), p > 38                           | string, the exact canonical text (the formats stop at 38 digits) |
| float / double                                 | float32 / float64                                     |
| char, varchar, *text, enum, set, json          | string (enum: the member; set: members joined by `,`) |
| binary, varbinary, *blob, geometry             | binary, the bytes                                     |
| date                                           | date32; the zero date and dates with zero parts: NULL |
| datetime(fsp)                                  | timestamp(us) without time zone (Delta timestamp_ntz) |
| timestamp(fsp)                                 | timestamp(us, UTC) (Delta timestamp / Iceberg timestamptz) |
| time(fsp)                                      | string `[-]HH:MM:SS[.f]` (up to 838 hours)            |

Every column is nullable in the lake: NOT NULL is the upstream's rule to keep, and a column
added by a DDL must take NULL in older files. `canonical_texts` is the inverse used by readers
and tests: every value maps back to the canonical text it came from (zero dates aside).
"""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.model.events import BINARY_TYPES, ColumnInfo, TableInfo

MAX_DECIMAL_PRECISION = 38
_SMALL_INTEGERS = frozenset({"tinyint", "smallint", "mediumint"})
_STRING_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json",
                           "time", "uuid", "inet4", "inet6"})
_GEOMETRY_TYPES = frozenset({"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                             "multipolygon", "geometrycollection"})
UNSIGNED_BIGINT = pa.decimal128(20, 0)
UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
LOCAL_TIMESTAMP = pa.timestamp("us")


def arrow_type(column: ColumnInfo) -> pa.DataType:
    """The lake column type of one upstream column (the table in the module docstring)."""
    kind = column.mysql_type
    if kind in _SMALL_INTEGERS or kind == "year":
        return pa.int32()
    if kind == "int":
        return pa.int64() if column.unsigned else pa.int32()
    if kind == "bigint":
        return UNSIGNED_BIGINT if column.unsigned else pa.int64()
    if kind == "bit":
        return UNSIGNED_BIGINT if (column.length or 1) >= 64 else pa.int64()
    if kind == "decimal":
        precision, scale = column.precision or 10, column.scale or 0
        return pa.decimal128(precision, scale) if precision <= MAX_DECIMAL_PRECISION else pa.string()
    if kind == "float":
        return pa.float32()
    if kind == "double":
        return pa.float64()
    if kind == "date":
        return pa.date32()
    if kind == "datetime":
        return LOCAL_TIMESTAMP
    if kind == "timestamp":
        return UTC_TIMESTAMP
    if column.is_binary or kind in BINARY_TYPES or kind in _GEOMETRY_TYPES:
        return pa.binary()
    if kind in _STRING_TYPES:
        return pa.string()
    return pa.string()  # a type added to MariaDB later: its canonical text, never lost


def arrow_schema(info: TableInfo) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c), nullable=True) for c in info.columns])


def typed_array(column: ColumnInfo, texts: pa.Array) -> pa.Array:
    """Canonical texts (a string array, nulls for NULL) as the column's lake type."""
    target = arrow_type(column)
    texts = texts.cast(pa.string()) if texts.type != pa.string() else texts
    if pa.types.is_string(target):
        return texts
    if pa.types.is_binary(target):
        return _latin1_bytes(texts)
    if target == pa.date32() or pa.types.is_timestamp(target):
        return _temporal(texts, target)
    return pc.cast(texts, target)


def _latin1_bytes(texts: pa.Array) -> pa.Array:
    """The bytes each text holds as ISO-8859-1 (events.py's encoding of binary values)."""
    if pc.all(pc.fill_null(pc.string_is_ascii(texts), True)).as_py():
        return texts.cast(pa.binary())  # ASCII: the UTF-8 bytes are the bytes
    return pa.array([None if t is None else t.encode("latin-1") for t in texts.to_pylist()], pa.binary())


def _temporal(texts: pa.Array, target: pa.DataType) -> pa.Array:
    """Dates and datetimes; a zero date or one with zero parts (MariaDB allows them) is NULL."""
    naive = pa.date32() if target == pa.date32() else LOCAL_TIMESTAMP
    try:
        values = pc.cast(texts, naive)
    except pa.ArrowInvalid:
        valid = pc.invert(pc.fill_null(pc.match_substring_regex(texts, r"^0000-|-00[- ]|-00$"), False))
        values = pc.cast(pc.if_else(valid, texts, pa.scalar(None, pa.string())), naive)
    return values.cast(target) if naive != target else values


def typed_table(info: TableInfo, images: pa.Array) -> pa.Table:
    """One image per row (a list<string> column, `TableInfo.columns` order) as a typed table."""
    images = images.cast(pa.list_(pa.string())) if images.type != pa.list_(pa.string()) else images
    arrays = [typed_array(column, pc.list_element(images, index)) if len(images) else pa.array([], arrow_type(column))
              for index, column in enumerate(info.columns)]
    return pa.Table.from_arrays(arrays, schema=arrow_schema(info))


def default_array(column: ColumnInfo, length: int, now_text: str) -> pa.Array:
    """The value every existing row takes when `column` is added: its DEFAULT, the implicit
    default of a NOT NULL column without one (0, '', the first ENUM member), or NULL.
    `now_text` stands for CURRENT_TIMESTAMP (the DDL's time: the upstream uses its start)."""
    text = column.default
    if text is not None and text.upper().startswith(("CURRENT_TIMESTAMP", "NOW(", "LOCALTIME")):
        text = now_text
    if text is None and not column.nullable:
        text = implicit_default(column)
    return typed_array(column, pa.repeat(pa.scalar(text, pa.string()), length))


def implicit_default(column: ColumnInfo) -> Optional[str]:
    """MySQL's value for a NOT NULL column added without a DEFAULT."""
    kind = column.mysql_type
    if kind == "decimal":
        return "0" + ("." + "0" * column.scale if column.scale else "")
    if kind in ("tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "bit"):
        return "0"
    if kind == "year":
        return "0000"
    if kind == "enum":
        return column.elements[0] if column.elements else ""
    if kind == "time":
        return "00:00:00" + ("." + "0" * column.scale if column.scale else "")
    if kind in ("date", "datetime", "timestamp"):
        return None  # the zero date: NULL in the lake
    if kind in ("binary",) and column.length:
        return "\x00" * column.length
    return ""


# -- widening ------------------------------------------------------------------------------


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether a column of type `old` may become `new` in place: the promotions Iceberg's spec
    allows (int -> long, float -> double, decimal(P,S) -> decimal(P',S) with P' >= P), which are
    also lossless casts for the Delta rewrite. One rule for both formats."""
    if old == new:
        return True
    if old == pa.int32() and new == pa.int64():
        return True
    if old == pa.float32() and new == pa.float64():
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return old.scale == new.scale and new.precision >= old.precision
    return False


# -- back to canonical text (readers, tests) -----------------------------------------------


def canonical_texts(column: ColumnInfo, values: Sequence) -> list[Optional[str]]:
    """The canonical text (model/events.py) of each Python value read back from a lake column."""
    return [None if value is None else _canonical(column, value) for value in values]


def _canonical(column: ColumnInfo, value) -> str:
    kind = column.mysql_type
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    if kind == "float":
        return np.format_float_positional(np.float32(value), unique=True, trim="-")
    if kind == "double":
        return np.format_float_positional(np.float64(value), unique=True, trim="-")
    if kind == "year":
        return f"{int(value):04d}"
    if isinstance(value, Decimal):
        return format(value, "f") if column.mysql_type == "decimal" else str(int(value))
    if isinstance(value, _dt.datetime):
        fsp = column.scale or 0
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if value.year < 1000:
            text = f"{value.year:04d}" + text[text.index("-"):]
        return text + (f".{value.microsecond:06d}"[: fsp + 1] if fsp else "")
    if isinstance(value, _dt.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    return str(value)
