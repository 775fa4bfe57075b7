"""Corrections to mysql-replication 1.0.17's value decoding, applied once on import.

TIME(fsp) with a negative value and a fraction: the library decodes the integer and fractional
parts separately and gets the fraction wrong (`-01:02:03.040506` reads back as `.959494`).
MySQL/MariaDB store TIME2 as one big-endian integer offset by 0x800000 << (8 * fraction bytes).
"""

from __future__ import annotations

import datetime

from pymysqlreplication.row_event import RowsEvent

_FRACTION_UNIT = {0: 0, 1: 10_000, 2: 100, 3: 1}  # microseconds per stored fraction unit


def _read_time2(self, column) -> datetime.timedelta:
    fraction_bytes = (column.fsp + 1) // 2
    raw = int.from_bytes(self.packet.read(3 + fraction_bytes), "big")
    value = raw - (0x800000 << (8 * fraction_bytes))
    negative = value < 0
    value = -value if negative else value
    fraction = value & ((1 << (8 * fraction_bytes)) - 1)
    hms = value >> (8 * fraction_bytes)
    delta = datetime.timedelta(
        hours=(hms >> 12) & 0x3FF,
        minutes=(hms >> 6) & 0x3F,
        seconds=hms & 0x3F,
        microseconds=fraction * _FRACTION_UNIT[fraction_bytes],
    )
    return -delta if negative else delta


def apply() -> None:
    RowsEvent._RowsEvent__read_time2 = _read_time2


apply()
