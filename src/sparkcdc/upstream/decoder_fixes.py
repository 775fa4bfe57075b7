"""Corrections and speed-ups to mysql-replication 1.0.17's decoding, applied once on import.

Connections: PyMySQL 1.2 builds a fresh "preferred TLS" context (loading the system CA store,
~50 ms) for every connection without TLS options, and each binlog range opens two; under the
profiler that was 10% of a changefeed's CPU. That context's settings never vary (no CA, no
hostname check), so one per process is shared. Connections with TLS options are unchanged.

TABLE_MAP events: decoding one with full row metadata costs ~0.2 ms, which dominates small
transactions. Identical event bytes always decode to the same table map, so decoded maps are
cached by their raw bytes (which include the table id) and reused; results are unchanged.

TIME(fsp) with a negative value and a fraction: the library decodes the integer and fractional
parts separately and gets the fraction wrong (`-01:02:03.040506` reads back as `.959494`).
MySQL/MariaDB store TIME2 as one big-endian integer offset by 0x800000 << (8 * fraction bytes).

DATE and DATETIME with a zero part (`2024-00-15`, `0000-01-01 10:00:00`; allowed unless sql_mode
has NO_ZERO_IN_DATE): the library cannot build a Python date for them and reports None, which
values.null_value turns into the zero date, losing the value. Such values are returned as a
`CivilDateTime` with the same attributes, which values.converter formats like a datetime.
"""

from __future__ import annotations

import datetime
from typing import NamedTuple

from pymysql.connections import Connection
from pymysqlreplication.row_event import RowsEvent, TableMapEvent

_TABLE_MAP_CACHE_LIMIT = 4096
_PER_EVENT_ATTRIBUTES = ("packet", "table_map", "_ctl_connection", "timestamp", "event_size")

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


class CivilDateTime(NamedTuple):
    """A DATE/DATETIME value Python's datetime cannot hold (a zero year, month or day)."""

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0


def _read_date(self):
    raw = self.packet.read_uint24()
    if raw == 0:
        return None  # the zero date, reported as before
    year, month, day = raw >> 9, (raw >> 5) & 0x0F, raw & 0x1F
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return CivilDateTime(year, month, day)


def _read_datetime2(self, column):
    raw = int.from_bytes(self.packet.read(5), "big")
    microsecond = self._RowsEvent__read_fsp(column)
    year_month = (raw >> 22) & 0x1FFFF
    parts = (year_month // 13, year_month % 13, (raw >> 17) & 0x1F, (raw >> 12) & 0x1F, (raw >> 6) & 0x3F, raw & 0x3F)
    try:
        return datetime.datetime(*parts, microsecond)
    except ValueError:
        return CivilDateTime(*parts, microsecond)


def _make_cached_table_map_init(original):
    cache: dict[tuple, dict] = {}

    def init(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
        if kwargs.get("only_tables") or kwargs.get("ignored_tables") or kwargs.get("only_schemas") or kwargs.get(
            "ignored_schemas"
        ) or kwargs.get("freeze_schema"):
            return original(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        raw = from_packet.packet  # peek without consuming: the decoder checks the raw packet's position
        body = raw._data[raw._position : raw._position + event_size]
        key = (body, bool(kwargs.get("optional_meta_data")))
        state = cache.get(key)
        if state is None:
            original(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
            if len(cache) >= _TABLE_MAP_CACHE_LIMIT:
                cache.clear()
            cache[key] = {k: v for k, v in self.__dict__.items() if k not in _PER_EVENT_ATTRIBUTES}
            return
        from_packet.read(event_size)
        self.__dict__.update(state)
        self.packet = from_packet
        self.table_map = table_map
        self._ctl_connection = ctl_connection
        self.timestamp = from_packet.timestamp
        self.event_size = event_size
        table_map[self.table_id] = self.table_obj

    init._sparkcdc_cached = True
    return init


def _make_shared_preferred_tls(original):
    shared = []

    def create_ssl_context(self, ssl_options):
        if isinstance(ssl_options, dict) and not ssl_options:
            if not shared:
                shared.append(original(self, ssl_options))
            return shared[0]
        return original(self, ssl_options)

    create_ssl_context._sparkcdc_shared = True
    return create_ssl_context


def apply() -> None:
    RowsEvent._RowsEvent__read_time2 = _read_time2
    RowsEvent._RowsEvent__read_date = _read_date
    RowsEvent._RowsEvent__read_datetime2 = _read_datetime2
    if not getattr(Connection._create_ssl_ctx, "_sparkcdc_shared", False):
        Connection._create_ssl_ctx = _make_shared_preferred_tls(Connection._create_ssl_ctx)
    if not getattr(TableMapEvent.__init__, "_sparkcdc_cached", False):
        TableMapEvent.__init__ = _make_cached_table_map_init(TableMapEvent.__init__)


apply()
