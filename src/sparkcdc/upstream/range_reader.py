"""Decodes the rows of one transaction-aligned binlog range. Runs on Spark executors.

A `BinlogRange` is plain picklable data and opens no connection until `read_range` is called.
Each range uses its own replication connection (its own `server_id`), so ranges decode in parallel.
mysql-replication frames the events; row images are decoded by the native decoder when it is
built (`native_decode`), else by mysql-replication and `values.converter` (the reference).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from sparkcdc.errors import ErrBinlogUnsupportedEvent
from sparkcdc.model.events import RowChange, TableInfo, Value
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import unsupported_event
from sparkcdc.upstream import decoder_fixes  # noqa: F401  (corrects TIME2 decoding)
from sparkcdc.upstream.native_decode import compile_layout, native_module
from sparkcdc.upstream.values import converter, null_value

RANGE_EVENTS = [
    MariadbGtidEvent,
    GtidEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    # Not used for rows, but they end transactions: without them the end check overshoots.
    QueryEvent,
    XidEvent,
    RotateEvent,
    XAPrepareEvent,
    NotImplementedEvent,
]


@dataclass(frozen=True)
class BinlogRange:
    """Transactions [start, end) of the binlog, with their commit-ts and the tables to decode."""

    upstream: UpstreamConfig
    server_id: int
    start: BinlogPosition  # start of the first transaction
    end: BinlogPosition  # end of the last transaction
    commit_ts: tuple[int, ...]  # one per transaction in the range, in order
    tables: dict[str, str] = field(default_factory=dict)  # "schema.table" -> TableInfo.to_json()


# A pymysql packet's payload holds a 1-byte OK marker and the 19-byte event header before the body.
_EVENT_BODY_OFFSET = 20
_KNOWN_POST_HEADER = {23: 8, 24: 8, 25: 8, 30: 10, 31: 10, 32: 10}
_OPS = {WriteRowsEvent: "insert", DeleteRowsEvent: "delete", UpdateRowsEvent: "update"}


class TableLayout:
    """How to turn one table's row images into canonical tuples, built once per table map:
    natively from the raw event body when the native decoder handles every column, else from
    mysql-replication's decoded row dicts."""

    __slots__ = ("schema", "table", "names", "converters", "columns", "native")

    def __init__(self, info: TableInfo, binlog_columns: list, native=None):
        binlog_names = [c.name for c in binlog_columns]
        if list(binlog_names) != list(info.column_names):
            raise ErrBinlogUnsupportedEvent(
                f"table {info.schema}.{info.table}: binlog columns {binlog_names} do not match the schema "
                f"version {info.version} columns {list(info.column_names)}; the table changed outside a "
                "recorded DDL (or binlog_row_metadata is not FULL)"
            )
        self.schema = info.schema
        self.table = info.table
        self.columns = info.columns
        self.names = info.column_names
        self.converters: list[tuple[str, Callable, object]] = [
            (c.name, converter(c), c) for c in info.columns
        ]
        self.native = None if native is None else compile_layout(native, info, binlog_columns)

    def values(self, row_values: dict, none_sources: dict) -> tuple[Value, ...]:
        out = []
        for name, convert, column in self.converters:
            value = row_values[name]
            if value is None:
                out.append(null_value(column, none_sources.get(name)))
            else:
                out.append(convert(value))
        return tuple(out)


def read_range(r: BinlogRange) -> Iterator[RowChange]:
    """Every row change in the range, in binlog order, with its transaction's commit-ts."""
    if r.start.key() >= r.end.key() or not r.commit_ts:
        return
    infos = {key: TableInfo.from_json(text) for key, text in r.tables.items()}
    native = native_module()
    layouts: dict[tuple[int, str, str], Optional[TableLayout]] = {}
    end_key = r.end.key()
    txn = -1
    seq = 0
    stream = BinLogStreamReader(
        connection_settings=r.upstream.connection_settings(),
        server_id=r.server_id,
        log_file=r.start.file,
        log_pos=r.start.pos,
        resume_stream=True,
        blocking=True,
        only_events=RANGE_EVENTS,
        filter_non_implemented_events=False,
        is_mariadb=False,
        enable_logging=False,
    )
    try:
        while True:
            event = stream.fetchone()
            if event is None:
                raise ErrBinlogUnsupportedEvent(f"binlog ended at {stream.log_file}:{stream.log_pos} before {r.end}")
            if isinstance(event, (MariadbGtidEvent, GtidEvent)):
                txn += 1
                seq = 0
                if txn >= len(r.commit_ts):
                    raise ErrBinlogUnsupportedEvent(
                        f"range {r.start}..{r.end} holds more than the {len(r.commit_ts)} indexed transactions"
                    )
            elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                key = (event.table_id, event.schema, event.table)
                layout = layouts.get(key, False)
                if layout is False:
                    info = infos.get(f"{event.schema}.{event.table}")
                    layout = None if info is None else TableLayout(info, event.columns, native)
                    layouts[key] = layout
                if layout is not None:
                    commit_ts = r.commit_ts[txn]
                    if layout.native is not None:
                        seq = yield from native_row_changes(event, layout, commit_ts, seq)
                    else:
                        yield from pure_row_changes(event, layout, commit_ts, seq)
                        seq += len(event.rows)
            elif isinstance(event, (NotImplementedEvent, XAPrepareEvent)):
                raise unsupported_event(event)
            if (int(stream.log_file.rsplit(".", 1)[1]), stream.log_pos) >= end_key:
                break
    finally:
        stream.close()
    if txn + 1 != len(r.commit_ts):
        raise ErrBinlogUnsupportedEvent(
            f"range {r.start}..{r.end} holds {txn + 1} transactions but the index lists {len(r.commit_ts)}"
        )


def _row_change(commit_ts, schema, table, op, before, after, seq) -> RowChange:
    # RowChange's frozen-dataclass __init__ and its before/after check cost ~1.5 us per row, as
    # much as decoding it; the native path only builds the valid op/image combinations above.
    change = _new_object(RowChange)
    change.__dict__.update(commit_ts=commit_ts, schema=schema, table=table, op=op, before=before, after=after, seq=seq)
    return change


_new_object = object.__new__


def native_row_changes(event, layout: TableLayout, commit_ts: int, seq: int):
    """Yields the event's rows decoded natively from its raw body; returns the next seq."""
    known = _KNOWN_POST_HEADER.get(event.event_type)
    if known is None:
        raise ErrBinlogUnsupportedEvent(f"rows event type {event.event_type} is not supported")
    start = _EVENT_BODY_OFFSET
    images = layout.native.decode(
        event.event_type,
        event.packet.packet._data,
        start,
        start + event.event_size,
        event._declared_post_header_len(known) - known,
    )
    schema, table = layout.schema, layout.table
    op = _OPS[type(event)]
    if op == "update":
        for i in range(0, len(images), 2):
            yield _row_change(commit_ts, schema, table, op, images[i], images[i + 1], seq)
            seq += 1
    elif op == "insert":
        for after in images:
            yield _row_change(commit_ts, schema, table, op, None, after, seq)
            seq += 1
    else:
        for before in images:
            yield _row_change(commit_ts, schema, table, op, before, None, seq)
            seq += 1
    return seq


def pure_row_changes(event, layout: TableLayout, commit_ts: int, seq: int) -> Iterator[RowChange]:
    schema, table = layout.schema, layout.table
    if isinstance(event, WriteRowsEvent):
        for i, row in enumerate(event.rows):
            yield RowChange(commit_ts, schema, table, "insert", None, layout.values(row["values"], row["none_sources"]), seq + i)
    elif isinstance(event, DeleteRowsEvent):
        for i, row in enumerate(event.rows):
            yield RowChange(commit_ts, schema, table, "delete", layout.values(row["values"], row["none_sources"]), None, seq + i)
    else:
        for i, row in enumerate(event.rows):
            yield RowChange(
                commit_ts,
                schema,
                table,
                "update",
                layout.values(row["before_values"], row["before_none_sources"]),
                layout.values(row["after_values"], row["after_none_sources"]),
                seq + i,
            )
