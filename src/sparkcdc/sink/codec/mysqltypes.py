"""Column type facts TiCDC's codecs rely on, computed from our ColumnInfo.

Mirrors TiDB's `types.TypeToStr` (base name, with the binary charset turning text types into
their binary twins) and the enum/set numeric encodings TiCDC's mounter produces.
"""

from __future__ import annotations

from typing import Optional

from sparkcdc.model.events import BINARY_CHARSET, ColumnInfo

_TEXT_TO_BLOB = {
    "tinytext": "tinyblob",
    "text": "blob",
    "mediumtext": "mediumblob",
    "longtext": "longblob",
    "char": "binary",
    "varchar": "varbinary",
}

# MySQL's default display widths (TiDB `GetDefaultFieldLengthAndDecimal`), signed/unsigned.
INTEGER_DISPLAY_WIDTH = {
    "tinyint": (4, 3),
    "smallint": (6, 5),
    "mediumint": (9, 8),
    "int": (11, 10),
    "bigint": (20, 20),
}
BLOB_LENGTH = {
    "tinyblob": 255,
    "blob": 65535,
    "mediumblob": 16777215,
    "longblob": 4294967295,
    "tinytext": 255,
    "text": 65535,
    "mediumtext": 16777215,
    "longtext": 4294967295,
}


def type_name(col: ColumnInfo) -> str:
    """The bare type name as TiDB's TypeToStr writes it (`varbinary`, `blob`, `int`...)."""
    name = col.mysql_type.lower()
    if name == "bool" or name == "boolean":
        name = "tinyint"
    if name == "integer":
        name = "int"
    if col.charset == BINARY_CHARSET and name in _TEXT_TO_BLOB:
        return _TEXT_TO_BLOB[name]
    return name


def is_binary(col: ColumnInfo) -> bool:
    return col.is_binary or type_name(col) in ("binary", "varbinary", "geometry") or (
        type_name(col).endswith("blob")
    )


def display_length(col: ColumnInfo) -> Optional[int]:
    """The column's flen as TiDB keeps it, defaulted where our metadata has no width."""
    name = type_name(col)
    if name in INTEGER_DISPLAY_WIDTH:
        signed, unsigned = INTEGER_DISPLAY_WIDTH[name]
        return unsigned if col.unsigned else signed
    if name in BLOB_LENGTH:
        return BLOB_LENGTH[name]
    if name in ("char", "binary", "bit"):
        return col.length if col.length is not None else 1
    if name in ("varchar", "varbinary"):
        return col.length
    if name == "year":
        return 4
    if name == "float":
        return 12
    if name == "double":
        return 22
    if name == "decimal":
        return col.precision if col.precision is not None else 10
    return None


def enum_index(col: ColumnInfo, name: str) -> int:
    """1-based position of an enum member; 0 for the invalid value ''."""
    if name == "" and "" not in col.elements:
        return 0
    return col.elements.index(name) + 1


def enum_name(col: ColumnInfo, index: int) -> str:
    return "" if index == 0 else col.elements[index - 1]


def set_mask(col: ColumnInfo, text: str) -> int:
    if text == "":
        return 0
    mask = 0
    for member in text.split(","):
        mask |= 1 << col.elements.index(member)
    return mask


def set_names(col: ColumnInfo, mask: int) -> str:
    return ",".join(e for i, e in enumerate(col.elements) if mask & (1 << i))


def mounted_value(col: ColumnInfo, value: str) -> str:
    """The canonical text as TiCDC's mounter holds the value: enum and set as their numbers,
    anything else as it is. What canal-json writes and what partition dispatchers hash."""
    name = type_name(col)
    try:
        if name == "enum":
            return str(enum_index(col, value))
        if name == "set":
            return str(set_mask(col, value))
    except ValueError:
        raise ValueError(f"column {col.name}: {value!r} is not a member of the {name}") from None
    return value
