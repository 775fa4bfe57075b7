"""Column defaults in the form TiDB records them, from a DDL's DEFAULT clause or from MariaDB's
information_schema COLUMN_DEFAULT (both parsed to a `DefaultValue` first).

A literal is converted to the column type's canonical text (the row value form of
`sparkcdc.model.events`): `DEFAULT '5'` on an INT is `5`, `DEFAULT 1.5` on DECIMAL(5,2) is `1.50`,
`DEFAULT '2024-01-02'` on DATETIME is `2024-01-02 00:00:00`, `DEFAULT b'101'` on BIT is `5`.
Expressions keep their normalized text (`CURRENT_TIMESTAMP(3)`, `uuid()`). DEFAULT NULL and no
default are both None, as in TiDB's ColumnInfo.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Optional

import numpy

from sparkcdc.model.events import INTEGER_TYPES, ColumnInfo
from sparkcdc.schema.parser import DefaultValue

_DATETIME = re.compile(r"^(\d{1,4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d*))?)?$")
_TIME = re.compile(r"^(-)?(\d+):(\d{1,2}):(\d{1,2})(?:\.(\d*))?$")


def canonical_default(column: ColumnInfo, value: Optional[DefaultValue]) -> Optional[str]:
    """The default TiDB would record for `column` given its DEFAULT clause (None: no clause)."""
    if value is None or value.kind == "null" or column.generated:
        return None
    if value.kind == "expression":
        return value.text
    try:
        return _literal(column, value)
    except (ValueError, InvalidOperation, ArithmeticError):
        return value.text  # MariaDB accepted something we do not convert: keep it as written


def _literal(column: ColumnInfo, value: DefaultValue) -> str:
    kind, text = value.kind, value.text
    name = column.mysql_type
    if name == "bit":
        if kind == "string" or kind == "bytes":
            return str(int.from_bytes(text.encode("latin-1"), "big"))
        return str(int(_number(text)))
    if kind == "bits" and name not in INTEGER_TYPES and name not in ("decimal", "float", "double", "year"):
        number = int(text)
        return number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big").decode("latin-1")
    if name in INTEGER_TYPES:
        return str(int(_number(text).to_integral_value(ROUND_HALF_UP)))
    if name == "decimal":
        scale = column.scale or 0
        return str(_number(text).quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP))
    if name == "double":
        return _shortest(float(_number(text)), numpy.float64)
    if name == "float":
        return _shortest(float(_number(text)), numpy.float32)
    if name == "year":
        year = int(_number(text))
        if kind != "string" and 0 < year < 70:
            year += 2000
        elif kind != "string" and 70 <= year < 100:
            year += 1900
        return f"{year:04d}"
    if name in ("date", "datetime", "timestamp"):
        return _datetime(name, text, column.scale or 0)
    if name == "time":
        return _time(text, column.scale or 0)
    return text


def _number(text: str) -> Decimal:
    return Decimal(text.strip())


def _shortest(number: float, width) -> str:
    return numpy.format_float_positional(width(number), unique=True, trim="-")


def _datetime(name: str, text: str, fsp: int) -> str:
    match = _DATETIME.match(text.strip())
    if not match:
        raise ValueError(text)
    year, month, day, hour, minute, second, fraction = match.groups()
    date = f"{int(year):04d}-{int(month):02d}-{int(day):02d}"
    if name == "date":
        return date
    clock = f"{int(hour or 0):02d}:{int(minute or 0):02d}:{int(second or 0):02d}"
    return f"{date} {clock}" + _fraction(fraction, fsp)


def _time(text: str, fsp: int) -> str:
    match = _TIME.match(text.strip())
    if not match:
        raise ValueError(text)
    sign, hours, minutes, seconds, fraction = match.groups()
    return f"{sign or ''}{int(hours):02d}:{int(minutes):02d}:{int(seconds):02d}" + _fraction(fraction, fsp)


def _fraction(digits: Optional[str], fsp: int) -> str:
    if fsp <= 0:
        return ""
    return "." + (digits or "").ljust(6, "0")[:fsp]
