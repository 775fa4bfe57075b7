"""DATE, DATETIME, TIMESTAMP and TIME values in event-filter expressions, with MySQL's rules.

A temporal column's canonical text (model/events.py) is wrapped in `Temporal`, a `str` that
remembers its kind, so string functions (LIKE, CONCAT, LENGTH) see the text as MySQL does while
comparisons follow MySQL's temporal rules:

- temporal vs string constant: the constant is read as a temporal value of the column's kind
  (`born = '2024-1-2'` and `born = '20240102'` match DATE '2024-01-02'; `ts > '2024-01-02'` is
  false for '2024-01-02 00:00:00'). A constant that is not a valid date/time compares as text,
  as MySQL does after its "Incorrect datetime value" warning;
- temporal vs number: the value as a number (DATE 20240102, DATETIME 20240102030405, TIME
  -10203 for '-01:02:03'), fractional seconds as decimals;
- DATE vs DATETIME: the date is midnight of that day.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Optional

DATE, DATETIME, TIME = "date", "datetime", "time"
KIND_OF_TYPE = {"date": DATE, "datetime": DATETIME, "timestamp": DATETIME, "time": TIME}

_DELIMITED = re.compile(
    r"^\s*(\d{1,4})[^\d\s](\d{1,2})[^\d\s](\d{1,2})"
    r"(?:(?:\s+|T)(\d{1,2})[^\d\s](\d{1,2})(?:[^\d\s](\d{1,2}))?(?:\.(\d*))?)?\s*$"
)
_COMPACT = re.compile(r"^\s*(\d{6}|\d{8}|\d{12}|\d{14})(?:\.(\d*))?\s*$")
_TIME = re.compile(r"^\s*(-)?(?:(\d+)\s+)?(\d{1,3}):(\d{1,2})(?::(\d{1,2}))?(?:\.(\d*))?\s*$")
_COMPACT_TIME = re.compile(r"^\s*(-)?(\d{1,7})(?:\.(\d*))?\s*$")


class Temporal(str):
    """Canonical temporal text that compares like MySQL's DATE/DATETIME/TIME."""

    kind: str
    key: tuple  # (y, m, d, H, M, S, us) for dates and datetimes; (signed microseconds,) for TIME

    def __new__(cls, text: str, kind: str) -> "Temporal":
        key = parse_time(text) if kind == TIME else parse_datetime(text)
        if key is None:
            raise ValueError(f"{text!r} is not a canonical {kind} value")
        value = super().__new__(cls, text)
        value.kind = kind
        value.key = key
        return value

    def as_number(self) -> int | Decimal:
        if self.kind == TIME:
            (micros,) = self.key
            sign, micros = (-1 if micros < 0 else 1), abs(micros)
            seconds, fraction = divmod(micros, 1_000_000)
            hours, rest = divmod(seconds, 3600)
            whole = hours * 10000 + (rest // 60) * 100 + rest % 60
        else:
            y, mo, d, h, mi, s, fraction = self.key
            whole = y * 10000 + mo * 100 + d
            if self.kind == DATETIME:
                whole = whole * 1000000 + h * 10000 + mi * 100 + s
            sign = 1
        if fraction:
            return sign * (Decimal(whole) + Decimal(fraction) / Decimal(1_000_000))
        return sign * whole


def _micros(fraction: Optional[str]) -> int:
    digits = (fraction or "")[:6]
    return int(digits.ljust(6, "0")) if digits else 0


def _year(text: str) -> int:
    year = int(text)
    if len(text) <= 2:  # MySQL: 00-69 are 2000-2069, 70-99 are 1970-1999
        year += 2000 if year < 70 else 1900
    return year


def _valid(y: int, mo: int, d: int, h: int, mi: int, s: int) -> bool:
    # Zero dates and zero parts are valid MySQL values (without NO_ZERO_DATE); ranges are not.
    return mo <= 12 and d <= 31 and h <= 23 and mi <= 59 and s <= 59 and y <= 9999


def parse_datetime(text: str) -> Optional[tuple]:
    """A DATE/DATETIME string in any form MySQL accepts, as a comparable tuple; None if invalid."""
    found = _DELIMITED.match(text)
    if found:
        y, mo, d, h, mi, s, frac = found.groups()
        parts = (_year(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0))
    else:
        found = _COMPACT.match(text)
        if not found:
            return None
        digits, frac = found.groups()
        year_len = 4 if len(digits) in (8, 14) else 2
        y, rest = digits[:year_len], digits[year_len:]
        fields = [int(rest[i:i + 2]) for i in range(0, len(rest), 2)] + [0, 0, 0]
        parts = (_year(y), *fields[:5])
    if not _valid(*parts):
        return None
    return (*parts, _micros(frac))


def parse_time(text: str) -> Optional[tuple]:
    """A TIME string ('[-][D ]HHH:MM[:SS][.f]' or '[-]HHMMSS[.f]') as (signed microseconds,)."""
    found = _TIME.match(text)
    if found:
        sign, days, h, mi, s, frac = found.groups()
        hours, minutes, seconds = int(days or 0) * 24 + int(h), int(mi), int(s or 0)
    else:
        found = _COMPACT_TIME.match(text)
        if not found:
            return None
        sign, digits, frac = found.groups()
        number = int(digits)
        hours, minutes, seconds = number // 10000, number // 100 % 100, number % 100
    if minutes > 59 or seconds > 59 or hours > 838:
        return None
    micros = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + _micros(frac)
    return (-micros if sign else micros,)


def compare_temporal(a, b) -> Optional[int]:
    """-1/0/1 when MySQL compares `a` and `b` as temporal values; None when it does not
    (a number on either side, or a constant that is not a valid date/time: the caller then
    compares numerically or as text)."""
    if isinstance(a, Temporal) and isinstance(b, Temporal):
        if (a.kind == TIME) != (b.kind == TIME):
            return None
        return _order(a.key, b.key)
    if isinstance(b, Temporal):
        result = compare_temporal(b, a)
        return None if result is None else -result
    if not isinstance(b, str):
        return None
    other = parse_time(b) if a.kind == TIME else parse_datetime(b)
    return None if other is None else _order(a.key, other)


def _order(x: tuple, y: tuple) -> int:
    return (x > y) - (x < y)


def cast(value, kind: str) -> Optional[Temporal]:
    """CAST(value AS DATE|DATETIME|TIME): NULL when the value is not a valid date/time."""
    if isinstance(value, Temporal):
        if value.kind == TIME:
            return value if kind == TIME else None  # MySQL would use the current date: not deterministic
        y, mo, d, h, mi, s, us = value.key
        if kind == TIME:
            key = (((h * 60 + mi) * 60 + s) * 1_000_000 + us,)
        else:
            key = (y, mo, d, 0, 0, 0, 0) if kind == DATE else value.key
    else:
        text = str(value)
        key = parse_time(text) if kind == TIME else parse_datetime(text)
        if key is None:
            return None
        if kind == DATE:
            key = (*key[:3], 0, 0, 0, 0)
    return Temporal(canonical(key, kind), kind)


def canonical(key: tuple, kind: str) -> str:
    if kind == TIME:
        (micros,) = key
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        seconds, fraction = divmod(micros, 1_000_000)
        text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    else:
        y, mo, d, h, mi, s, fraction = key
        text = f"{y:04d}-{mo:02d}-{d:02d}"
        if kind == DATE:
            return text
        text += f" {h:02d}:{mi:02d}:{s:02d}"
    return text + (f".{fraction:06d}" if fraction else "")
