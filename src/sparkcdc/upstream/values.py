"""Turns the values mysql-replication decodes into sparkcdc's canonical text (see model/events.py).

`converter(column)` returns one function per column, chosen once per table, so the per-value
work is a single call. `null_value(column, none_source)` tells SQL NULL apart from the values
mysql-replication also reports as None (zero dates, the empty set).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

import numpy

from sparkcdc.model.events import ColumnInfo

Converter = Callable[[Any], str]

_NULL_SOURCE = "null"


def _integer(value: Any) -> str:
    return str(value)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def _bytes(value: Any) -> str:
    if isinstance(value, str):  # a binary column decoded under a text charset (should not happen)
        return value
    return value.decode("latin-1")


def _fixed_binary(length: int) -> Converter:
    # BINARY(n) is right-padded with 0x00; the binlog stores it with the padding stripped.
    def convert(value: Any) -> str:
        text = _bytes(value)
        return text + "\x00" * (length - len(text)) if len(text) < length else text

    return convert


def _double(value: float) -> str:
    text = repr(value)
    if "e" in text or "n" in text:  # exponent, inf, nan
        return numpy.format_float_positional(value, unique=True, trim="-")
    return text[:-2] if text.endswith(".0") else text


def _float(value: float) -> str:
    return numpy.format_float_positional(numpy.float32(value), unique=True, trim="-")


def _decimal(scale: int) -> Converter:
    spec = f".{scale}f"

    def convert(value: Any) -> str:
        text = format(value, spec)
        if text[0] == "-" and not value:  # no negative zero
            text = text[1:]
        return text

    return convert


def _bit(value: Any) -> str:
    if isinstance(value, str):  # mysql-replication gives the bits as '0101...'
        return str(int(value, 2)) if value else "0"
    if isinstance(value, bytes):
        return str(int.from_bytes(value, "big"))
    return str(value)


def _date(value: Any) -> str:
    return "%04d-%02d-%02d" % (value.year, value.month, value.day)


def _fraction(fsp: int) -> Callable[[int], str]:
    if fsp <= 0:
        return lambda microsecond: ""
    return lambda microsecond: (".%06d" % microsecond)[: fsp + 1]


def _datetime(fsp: int) -> Converter:
    fraction = _fraction(fsp)

    def convert(value: Any) -> str:
        return "%04d-%02d-%02d %02d:%02d:%02d%s" % (
            value.year, value.month, value.day, value.hour, value.minute, value.second, fraction(value.microsecond)
        )

    return convert


def _timestamp(fsp: int) -> Converter:
    as_datetime = _datetime(fsp)
    zero = zero_datetime(fsp)

    def convert(value: Any) -> str:
        # mysql-replication decodes the zero TIMESTAMP (stored as 0) as the epoch, which is not a
        # valid TIMESTAMP value otherwise (the range starts at 1970-01-01 00:00:01 UTC).
        if value.year == 1970 and value.month == 1 and value.day == 1 and value.hour == 0 and value.minute == 0 and value.second == 0 and value.microsecond == 0:
            return zero
        return as_datetime(value)

    return convert


def _time(fsp: int) -> Converter:
    fraction = _fraction(fsp)

    def convert(value: Any) -> str:
        micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
        sign = "-" if micros < 0 else ""
        micros = abs(micros)
        seconds, microsecond = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return "%s%02d:%02d:%02d%s" % (sign, hour, minute, second, fraction(microsecond))

    return convert


def _year(value: Any) -> str:
    # YEAR 0000 is stored as 0, which mysql-replication turns into 1900 (not a valid YEAR otherwise).
    return "0000" if value == 1900 else "%04d" % value


def _set(elements: tuple[str, ...]) -> Converter:
    def convert(value: Any) -> str:
        if isinstance(value, str):
            return value
        return ",".join(e for e in elements if e in value)

    return convert


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return json.dumps(_plain_json(value), ensure_ascii=False, separators=(", ", ": "))


def _plain_json(value: Any) -> Any:
    # MySQL's binary JSON arrives with bytes keys and strings.
    if isinstance(value, dict):
        return {_plain_json(k): _plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


def zero_datetime(fsp: int) -> str:
    return "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp and fsp > 0 else "")


def converter(column: ColumnInfo) -> Converter:
    """The function from a non-None decoded value of `column` to its canonical text."""
    t = column.mysql_type
    if t in ("tinyint", "smallint", "mediumint", "int", "bigint"):
        return _integer
    if t == "decimal":
        return _decimal(column.scale or 0)
    if t == "float":
        return _float
    if t == "double":
        return _double
    if t == "bit":
        return _bit
    if t == "binary" and column.length:
        return _fixed_binary(column.length)
    if column.is_binary or t == "geometry" or t in ("point", "linestring", "polygon"):
        return _bytes
    if t == "date":
        return _date
    if t == "datetime":
        return _datetime(column.scale or 0)
    if t == "timestamp":
        return _timestamp(column.scale or 0)
    if t == "time":
        return _time(column.scale or 0)
    if t == "year":
        return _year
    if t == "set":
        return _set(column.elements)
    if t == "json":
        return _json
    return _text  # char/varchar/text, enum (already the element name)


def null_value(column: ColumnInfo, none_source: Optional[str]) -> Optional[str]:
    """The canonical value for a None from mysql-replication, given why it was None."""
    if none_source is None or none_source == _NULL_SOURCE:
        return None
    t = column.mysql_type
    if t == "set":
        return ""
    if t == "date":
        return "0000-00-00"
    if t in ("datetime", "timestamp"):
        return zero_datetime(column.scale or 0)
    if t == "enum":
        return ""
    return None
