"""Canonical values (model/events.py) as typed DB-API parameters, for every statement that binds
them: the MySQL sink's SQL (sink/mysql/sql.py) and the upstream row lookup (upstream/row_lookup.py).

A parameter must read back as exactly the stored value, since updates, deletes and lookups find
their row by comparing the key's values with what the server stores.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from sparkcdc.model.events import GEOMETRY_TYPES, INTEGER_TYPES, ColumnInfo, Value


def float32_value(text: str) -> float:
    """A FLOAT column's value as the double the server compares it as: the text rounded to
    float32, widened. `3.3` is the float32 3.299999952316284; bound as the double 3.3 it would
    match no stored row in a WHERE clause (the server compares FLOAT with a double constant in
    double precision), while the widened value matches and writes back the same float32."""
    return struct.unpack("<f", struct.pack("<f", float(text)))[0]


def to_parameter(column: ColumnInfo, text: Value) -> Any:
    """The canonical text of one value as a typed DB-API parameter (None stays NULL)."""
    if text is None:
        return None
    kind = column.mysql_type
    if kind in INTEGER_TYPES or kind in ("bit", "year"):
        return int(text)
    if kind == "decimal":
        return Decimal(text)
    if kind == "float":
        return float32_value(text)
    if kind == "double":
        return float(text)
    if column.is_binary or kind in GEOMETRY_TYPES:
        return text.encode("latin-1")
    return text
