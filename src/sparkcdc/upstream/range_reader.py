"""Decodes the rows of one transaction-aligned binlog range. Runs on Spark executors.

A `BinlogRange` is plain picklable data and opens no connection until it is read.
Each range uses its own replication connection (its own `server_id`), so ranges decode in parallel.
With the native module built (`native_decode`), `read_range_batches` hands the connection's
socket to its binlog framer (`BinlogRangeReader`, native/src/binlog.rs) after the dump command:
packets, events, TABLE_MAPs and row images are handled in Rust, and Python is called only for a
table's first TABLE_MAP, a table on the pure path, and each full batch. Otherwise, and for
`read_range`, mysql-replication frames the events; its row images are decoded natively when the
module is built, else by mysql-replication and `values.converter` (the reference).

Two shapes of output: `read_range_batches` (what the Spark source yields) cuts the range into
change batches (model/change_batch.py, CHANGE_SCHEMA); with the native decoder their value
columns are filled in Rust, without a Python object per value. `read_range` yields one
`RowChange` per row.

Executors import this module in every fresh Python worker, so it keeps its imports to what
decoding needs; the pure path's value converters (numpy) and the puller load on first use.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional

import pyarrow as pa
import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from sparkcdc.errors import ErrBinlogUnsupportedEvent
from sparkcdc.model.change_batch import CHANGE_SCHEMA, OP_CODES, OP_NAMES, image_array, string_array
from sparkcdc.model.events import RowChange, TableInfo, Value
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.connection import UpstreamConfig, connected_socket, lost_connection, reported
from sparkcdc.upstream import decoder_fixes  # noqa: F401  (corrects TIME2 decoding)
from sparkcdc.upstream.native_decode import compile_layout, native_module

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
class PackedTables:
    """The replicated tables' JSON ("schema.table" -> TableInfo.to_json()) as a read task gets
    it: compressed once per set of tables by the planner, unpacked once per set by each worker
    process. Every task of a batch is handed every replicated table, and with 10,000 tables the
    plain texts were ~9.5 MB per task through Spark's JVM."""

    digest: bytes
    blob: bytes

    @classmethod
    def pack(cls, tables: dict[str, str]) -> "PackedTables":
        raw = json.dumps(tables, sort_keys=True, separators=(",", ":")).encode()
        return cls(hashlib.blake2b(raw, digest_size=16).digest(), zlib.compress(raw, 1))

    def get(self, name: str) -> Optional[str]:
        with _UNPACKED_LOCK:
            tables = _UNPACKED.get(self.digest)
            if tables is None:
                tables = json.loads(zlib.decompress(self.blob))
                if len(_UNPACKED) >= _UNPACKED_SETS:
                    _UNPACKED.pop(next(iter(_UNPACKED)))
                _UNPACKED[self.digest] = tables
        return tables.get(name)


# Sets of tables kept unpacked per process (PackedTables.get): the batches of a few changefeeds.
_UNPACKED_SETS = 4
_UNPACKED: dict[bytes, dict[str, str]] = {}
_UNPACKED_LOCK = threading.Lock()


@dataclass(frozen=True)
class BinlogRange:
    """Transactions [start, end) of the binlog, with their commit-ts and the tables to decode;
    or piece `piece` of one large transaction (TxnRecord.piece_range), which may start and end
    inside it and whose rows get seq `piece << 32 | row`."""

    upstream: UpstreamConfig
    server_id: int
    start: BinlogPosition  # start of the first transaction, or of the piece
    end: BinlogPosition  # end of the last transaction, or of the piece
    commit_ts: tuple[int, ...]  # one per transaction in the range, in order
    # "schema.table" -> TableInfo.to_json(), or the same packed (the planner's ranges)
    tables: "dict[str, str] | PackedTables" = field(default_factory=dict)
    piece: int = 0
    table_maps: tuple[BinlogPosition, ...] = ()  # the TABLE_MAP events a piece > 0 needs, read first
    # The first transaction is the rest of a GTID group after its DDL (TxnRecord.continues_group).
    continues_group: bool = False

    def first_seq(self) -> int:
        return self.piece << PIECE_SEQ_SHIFT

    def table_info(self, schema: str, table: str) -> Optional[TableInfo]:
        """The version to decode `schema.table` with; None if it is not replicated. Parsed when a
        TABLE_MAP names it: a range is handed every replicated table, 10,000 in some changefeeds."""
        text = self.tables.get(f"{schema}.{table}")
        return None if text is None else TableInfo.from_json(text)

    def first_txn(self) -> int:
        """The number of the transaction the range is in before its first GTID event: 0 when it
        starts inside its first transaction (a piece after the first, the rows of a CREATE TABLE
        ... SELECT), else -1 (the range starts at a GTID event)."""
        return 0 if self.piece or self.continues_group else -1


def binlog_changed(what: str) -> ErrBinlogUnsupportedEvent:
    """The upstream's binlog no longer holds what the capture's transaction index recorded there."""
    return ErrBinlogUnsupportedEvent(
        f"{what}: the upstream's binlog changed under this server's transaction index (was the upstream reset "
        "with RESET MASTER, restored from a backup, or replaced by another server?). Recreate the changefeed at a "
        "position after the change; if every changefeed of this server reports it, stop the server, move "
        "txn-index.sqlite out of its data dir and start it again")


# A piece's rows are numbered from piece << 32, so (commit_ts, seq) orders a transaction's rows
# across the micro-batches its pieces go to.
PIECE_SEQ_SHIFT = 32


# A pymysql packet's payload holds a 1-byte OK marker and the 19-byte event header before the body.
_EVENT_BODY_OFFSET = 20
_KNOWN_POST_HEADER = {23: 8, 24: 8, 25: 8, 30: 10, 31: 10, 32: 10}
_OPS = {WriteRowsEvent: "insert", DeleteRowsEvent: "delete", UpdateRowsEvent: "update"}

# Rows per batch: large enough that per-batch costs vanish, small enough that a batch of wide rows
# stays a few MB in the executor and the JVM.
DEFAULT_BATCH_ROWS = 4096


class TableLayout:
    """How to turn one table's row images into canonical tuples, built once per table map:
    natively from the raw event body when the native decoder handles every column, else from
    mysql-replication's decoded row dicts."""

    __slots__ = ("schema", "table", "names", "_converters", "columns", "native")

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
        self._converters: Optional[list[tuple[str, Callable, object]]] = None
        self.native = None if native is None else compile_layout(native, info, binlog_columns)

    @property
    def converters(self) -> list[tuple[str, Callable, object]]:
        if self._converters is None:  # only the pure path needs them (and values' numpy import)
            from sparkcdc.upstream.values import converter

            self._converters = [(c.name, converter(c), c) for c in self.columns]
        return self._converters

    def values(self, row_values: dict, none_sources: dict) -> tuple[Value, ...]:
        from sparkcdc.upstream.values import null_value

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
    return _reported(r, _read_range(r))


def _read_range(r: BinlogRange) -> Iterator[RowChange]:
    native = native_module()
    txn, seq = -1, 0
    for number, commit_ts, layout, event in _row_events(r, native):
        if number != txn:
            txn, seq = number, r.first_seq() if number == 0 else 0
        if layout.native is not None:
            seq = yield from native_row_changes(event, layout, commit_ts, seq)
        else:
            yield from pure_row_changes(event, layout, commit_ts, seq)
            seq += len(event.rows)


def read_range_batches(r: BinlogRange, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The range's row changes as record batches of CHANGE_SCHEMA, about `batch_rows` rows each
    (cut between events), in binlog order; the same rows as `read_range`."""
    native = native_module()
    if has_native_framer(native):
        return _reported(r, framed_range_batches(r, native, batch_rows))
    return _reported(r, replication_range_batches(r, native, batch_rows))


def read_range_batches_at_once(r: BinlogRange, read_timeout: float) -> Optional[list[pa.RecordBatch]]:
    """`read_range_batches` for a caller that would rather not wait: no wait for an upstream that
    refuses or drops the connection, and `read_timeout` for one that is silent (either raises).
    None when the native framer is not built (the pure path has no such bounds)."""
    native = native_module()
    if not has_native_framer(native):
        return None
    return list(_reported(r, framed_range_batches(r, native, DEFAULT_BATCH_ROWS, 0.0, read_timeout)))


def _reported(r: BinlogRange, items: Iterator) -> Iterator:
    return reported(items, r.upstream, f"a Spark task reading the binlog range {r.start}..{r.end}", r.start)


def replication_range_batches(r: BinlogRange, native, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """`read_range_batches` with mysql-replication framing the events (the reference, and the
    path without the native module); `native` decodes the row images when given."""
    builder: NativeBatchBuilder | PythonBatchBuilder = (
        PythonBatchBuilder() if native is None else NativeBatchBuilder(native))
    txn, seq = -1, 0
    for number, commit_ts, layout, event in _row_events(r, native):
        if number != txn:
            txn, seq = number, r.first_seq() if number == 0 else 0
        seq += builder.add_event(event, layout, commit_ts, seq)
        if len(builder) >= batch_rows:
            yield builder.finish()
    if len(builder):
        yield builder.finish()


def _row_events(r: BinlogRange, native) -> Iterator[tuple[int, int, "TableLayout", object]]:
    """(transaction number in the range, its commit-ts, layout, ROWS event) for each ROWS event of
    a replicated table, in binlog order; checks the range holds exactly the indexed transactions."""
    if r.start.key() >= r.end.key() or not r.commit_ts:
        return
    layouts: dict[tuple[int, str, str], Optional[TableLayout]] = {}
    end_key = r.end.key()
    table_map = _read_table_maps(r)
    txn = r.first_txn()
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
    stream.table_map = table_map
    try:
        while True:
            event = stream.fetchone()
            if event is None:
                raise binlog_changed(f"the binlog ended at {stream.log_file}:{stream.log_pos} before {r.end}")
            if _starts_at_or_after(stream, event, end_key):
                break  # a piece ends where the next begins, maybe right after a TABLE_MAP (not returned)
            if isinstance(event, (MariadbGtidEvent, GtidEvent)):
                txn += 1
                if txn >= len(r.commit_ts):
                    raise binlog_changed(
                        f"range {r.start}..{r.end} holds more than the {len(r.commit_ts)} indexed transactions")
            elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                key = (event.table_id, event.schema, event.table)
                layout = layouts.get(key, False)
                if layout is False:
                    info = r.table_info(event.schema, event.table)
                    layout = None if info is None else TableLayout(info, event.columns, native)
                    layouts[key] = layout
                if layout is not None:
                    yield txn, r.commit_ts[txn], layout, event
            elif isinstance(event, (NotImplementedEvent, XAPrepareEvent)):
                from sparkcdc.upstream.puller import unsupported_event  # the puller's imports are heavy

                raise unsupported_event(event)
            if (int(stream.log_file.rsplit(".", 1)[1]), stream.log_pos) >= end_key:
                break
    finally:
        stream.close()
    if txn + 1 != len(r.commit_ts):
        raise binlog_changed(f"range {r.start}..{r.end} holds {txn + 1} transactions but the index lists "
                             f"{len(r.commit_ts)}")


def _starts_at_or_after(stream: BinLogStreamReader, event, key: tuple[int, int]) -> bool:
    if isinstance(event, RotateEvent):
        return False
    start = event.packet.log_pos - event.packet.event_size
    return (int(stream.log_file.rsplit(".", 1)[1]), start) >= key


def _read_table_maps(r: BinlogRange, read_timeout: Optional[float] = None) -> dict:
    """The TABLE_MAP events a piece needs, read from their positions with one short dump (the
    events in between are framed, not decoded): pymysqlreplication's table map for the stream
    that starts at the piece. Only the statement's maps, so never the transaction's rows. An
    upstream silent for `read_timeout` seconds (None: no limit) fails the read."""
    if not r.table_maps:
        return {}
    settings = r.upstream.connection_settings()
    if read_timeout is not None:
        settings["read_timeout"] = read_timeout
    wanted = {p.pos for p in r.table_maps}
    first, last = min(r.table_maps, key=BinlogPosition.key), max(r.table_maps, key=BinlogPosition.key)
    stream = BinLogStreamReader(
        connection_settings=settings,
        server_id=r.server_id,
        log_file=first.file,
        log_pos=first.pos,
        resume_stream=True,
        blocking=True,
        only_events=[TableMapEvent],
        is_mariadb=False,
        enable_logging=False,
    )
    try:
        while wanted:
            event = stream.fetchone()
            start = None if event is None else event.packet.log_pos - event.packet.event_size
            if isinstance(event, TableMapEvent):
                wanted.discard(start)
            elif event is None or stream.log_file != first.file or start > last.pos:
                raise binlog_changed(
                    f"the TABLE_MAP events at {first.file}:{sorted(wanted)} that piece {r.piece} of the transaction "
                    f"at {r.start} needs are not in the binlog")
        return dict(stream.table_map)
    finally:
        stream.close()


# --- The native framer -------------------------------------------------------------------------

# How long a native range read waits for its upstream to come back, from the last event it read: a
# restart takes seconds, and a task that waits it out spares the changefeed a failed micro-batch and
# a restart. Past it the task fails, and the runner restarts the changefeed once its puller is back.
UPSTREAM_WAIT_SECONDS = 30.0


def _dump_when_reachable(r: BinlogRange, start: BinlogPosition, give_up_at: float) -> "_ReplicationDump":
    """A binlog dump of `r`'s upstream from `start`, tried again while the upstream refuses
    connections (it is restarting) until `give_up_at` (monotonic)."""
    backoff = 0.25
    while True:
        try:
            return _ReplicationDump(r.upstream, r.server_id, start)
        except (OSError, pymysql.err.MySQLError) as exc:
            if not lost_connection(exc) or time.monotonic() + backoff > give_up_at:
                raise
            time.sleep(backoff)
            backoff = min(2 * backoff, 2.0)


# How long a native range read waits for the upstream to send anything. The range is already in
# the binlog, so a silent upstream is dead or stuck; the task fails and Spark retries it, where
# mysql-replication's reader waited forever.
READ_TIMEOUT_SECONDS = 300.0
_COM_BINLOG_DUMP = 0x12
# The server answers a dump that reaches the binlog's end with EOF instead of waiting for more:
# a range is planned from transactions already read, so its end is never past the binlog's.
_BINLOG_DUMP_NON_BLOCK = 0x01


def has_native_framer(native) -> bool:
    """Whether `native` (from `native_module`) carries the binlog framer."""
    return native is not None and hasattr(native, "BinlogRangeReader")


class _ControlConnection:
    """What mysql-replication's event parsers ask of its control connection when we parse a
    TABLE_MAP or pure-path ROWS packet ourselves: the charset and the server flavor. (They query
    it only for column names missing from TABLE_MAP, with use_column_name_cache, which is off.)"""

    charset = "utf8mb4"

    def __init__(self, dbms: str):
        self._dbms = dbms

    def _get_dbms(self) -> str:
        return self._dbms


class _ReplicationDump:
    """A replication connection whose COM_BINLOG_DUMP is sent, set up as mysql-replication's
    BinLogStreamReader does (checksum negotiation, MariaDB slave capability 4), and the
    mysql-replication parse of the few packets Python handles."""

    def __init__(self, upstream: UpstreamConfig, server_id: int, start: BinlogPosition):
        # The socket is ours (pymysql's public connect(sock)): after the dump command the framer
        # reads it through its file descriptor, and we write the command on it.
        self.connection = pymysql.connect(**upstream.connection_settings(), defer_connect=True)
        self.socket = connected_socket(upstream)
        try:
            self.connection.connect(self.socket)
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('binlog_checksum', 'binlog_row_metadata')")
                variables = {str(name).lower(): str(value).upper() for name, value in cursor.fetchall()}
                self.checksum = variables.get("binlog_checksum", "NONE") != "NONE"
                self.full_row_metadata = variables.get("binlog_row_metadata") == "FULL"
                cursor.execute("SET @mariadb_slave_capability=4"
                               + (", @master_binlog_checksum=@@global.binlog_checksum" if self.checksum else ""))
            self.control = _ControlConnection("mariadb" if "MariaDB" in self.connection.get_server_info() else "mysql")
            # The framer reads the socket itself: pymysql's buffered reader must hold nothing. The
            # server sends nothing unasked, so a non-blocking peek finds nothing (and takes nothing).
            # pymysql has no public view of that buffer: `_rfile` is the one private name left here.
            self.socket.settimeout(0)
            try:
                leftover = self.connection._rfile.peek(1)
            except (BlockingIOError, OSError):
                leftover = b""
            self.socket.settimeout(None)
            if leftover:
                raise ErrBinlogUnsupportedEvent("the replication connection holds unread bytes before the dump")
            file = start.file.encode()  # COM_BINLOG_DUMP as packet 0 of a new command
            self.socket.sendall(struct.pack("<i", len(file) + 11) + bytes([_COM_BINLOG_DUMP])
                                + struct.pack("<IHI", start.pos, _BINLOG_DUMP_NON_BLOCK, server_id) + file)
            self.fd = self.socket.fileno()
        except BaseException:
            self.close()
            raise
        self._format: tuple[bytes, tuple, object] | None = None

    def close(self) -> None:
        try:
            self.connection.close()  # COM_QUIT, then pymysql closes the socket
        except Exception:  # already closed, or the server went away: nothing to say goodbye to
            pass
        self.socket.close()

    def event(self, packet: bytes, format_description: Optional[bytes], table_map: dict, event_class):
        """mysql-replication's event of class `event_class` parsed from `packet`, or None when
        mysql-replication would skip it."""
        mysql_version, post_header_lengths = self._format_of(format_description)
        wrapper = BinLogPacketWrapper(
            MysqlPacket(packet, "utf8"), table_map, self.control, mysql_version, self.checksum, {event_class},
            None, None, None, None, False, False, False, self.full_row_metadata, False, False, post_header_lengths)
        return wrapper.event

    def _format_of(self, format_description: Optional[bytes]) -> tuple[tuple, object]:
        if format_description is None:
            return (0, 0, 0), None
        if self._format is None or self._format[0] != format_description:
            event = BinLogPacketWrapper(
                MysqlPacket(format_description, "utf8"), {}, self.control, (0, 0, 0), self.checksum,
                {FormatDescriptionEvent}, None, None, None, None, False, False, False, False, False).event
            self._format = (format_description, event.mysql_version, event.post_header_len)
        return self._format[1], self._format[2]


def framed_range_batches(r: BinlogRange, native, batch_rows: int = DEFAULT_BATCH_ROWS,
                         wait_seconds: float = UPSTREAM_WAIT_SECONDS,
                         read_timeout: float = READ_TIMEOUT_SECONDS) -> Iterator[pa.RecordBatch]:
    """`read_range_batches` with the native framer (`has_native_framer(native)`): the same
    batches, checks and errors as `replication_range_batches`, except that a range past the
    binlog's end fails at once (the dump is non-blocking), a silent upstream fails after
    `read_timeout` (OSError/TimeoutError), where mysql-replication would wait, and an upstream
    that refuses or drops the connection is waited for up to `wait_seconds`."""
    if r.start.key() >= r.end.key() or not r.commit_ts:
        return
    tables = _read_table_maps(r, read_timeout)  # table id -> mysql-replication's Table
    layouts: dict[int, TableLayout] = {}
    end_file_number, end_pos = r.end.key()
    dump = _dump_when_reachable(r, r.start, time.monotonic() + wait_seconds)
    try:
        reader = native.BinlogRangeReader(
            dump.fd, dump.checksum, read_timeout, r.start.file, r.start.pos, end_file_number, end_pos,
            list(r.commit_ts), r.first_txn(), r.first_seq())
        for table_id, table in tables.items():
            reader.seed_table(table_id, table.schema, table.table)
        events_at_connect, give_up_at = 0, time.monotonic() + wait_seconds
        while True:
            try:
                status = reader.read(batch_rows)
                if status == native.BINLOG_READ_SERVER_ERROR:
                    pymysql.err.raise_mysql_exception(reader.pending()[1])
            except (OSError, pymysql.err.MySQLError) as exc:
                # As mysql-replication does on a lost connection: dump again from the last whole
                # event, waiting for a restarting upstream up to `wait_seconds` since the
                # last progress, so a dead upstream fails the task instead of looping.
                if not lost_connection(exc):
                    raise
                if reader.events != events_at_connect:
                    give_up_at = time.monotonic() + wait_seconds
                dump.close()
                dump = _dump_when_reachable(r, BinlogPosition(reader.file, reader.pos), give_up_at)
                if dump.checksum != reader.checksum:
                    raise ErrBinlogUnsupportedEvent("binlog_checksum changed while a range was read; retry the task")
                reader.reconnect(dump.fd)
                events_at_connect = reader.events
                continue
            if status == native.BINLOG_READ_DONE:
                break
            if status == native.BINLOG_READ_BATCH:
                yield _framed_batch(reader.finish())
                continue
            if status == native.BINLOG_READ_TOO_MANY_TRANSACTIONS:
                raise binlog_changed(
                    f"range {r.start}..{r.end} holds more than the {len(r.commit_ts)} indexed transactions")
            if status == native.BINLOG_READ_ENDED:
                raise binlog_changed(f"the binlog ended at {reader.file}:{reader.pos} before {r.end}")
            table_id, packet, event_type, commit_ts, seq = reader.pending()
            if status == native.BINLOG_READ_TABLE_MAP:
                if packet is not None:
                    tables[table_id] = dump.event(packet, reader.format_description, {}, TableMapEvent).get_table()
                table = tables[table_id]
                info = r.table_info(table.schema, table.table)
                if info is None:
                    reader.resolve(table_id, False)
                else:
                    layouts[table_id] = layout = TableLayout(info, table.columns, native)
                    reader.resolve(table_id, True, layout.native)
            elif status == native.BINLOG_READ_PURE_ROWS:
                event = dump.event(packet, reader.format_description, tables, _OP_CLASSES[event_type])
                added = 0
                for change in pure_row_changes(event, layouts[table_id], commit_ts, seq):
                    reader.add_row(change.seq, change.schema, change.table, OP_CODES[change.op], change.before,
                                   change.after)
                    added += 1
                reader.pure_done(added)
            elif status == native.BINLOG_READ_UNSUPPORTED:
                from sparkcdc.upstream.puller import unsupported_event  # the puller's imports are heavy

                event_class = XAPrepareEvent if event_type == 38 else NotImplementedEvent
                raise unsupported_event(dump.event(packet, reader.format_description, tables, event_class))
            else:
                raise ErrBinlogUnsupportedEvent(f"the native binlog framer returned an unknown status {status}")
    finally:
        dump.close()
    if reader.transactions != len(r.commit_ts):
        raise binlog_changed(f"range {r.start}..{r.end} holds {reader.transactions} transactions but the index "
                             f"lists {len(r.commit_ts)}")
    if reader.rows:
        yield _framed_batch(reader.finish())


_OP_CLASSES = {23: WriteRowsEvent, 24: UpdateRowsEvent, 25: DeleteRowsEvent,
               30: WriteRowsEvent, 31: UpdateRowsEvent, 32: DeleteRowsEvent}


def _framed_batch(finished: tuple) -> pa.RecordBatch:
    buffers, table_names = finished
    return change_batch(buffers, table_names)


def _raw_body(event) -> tuple[bytes, int, int, int]:
    """(packet bytes, body start, body end, post-header bytes beyond the known length) of a ROWS event."""
    known = _KNOWN_POST_HEADER.get(event.event_type)
    if known is None:
        raise ErrBinlogUnsupportedEvent(f"rows event type {event.event_type} is not supported")
    start = _EVENT_BODY_OFFSET
    return (event.packet.packet._data, start, start + event.event_size,
            event._declared_post_header_len(known) - known)


class NativeBatchBuilder:
    """Collects row changes into Arrow buffers in the native `ChangeBatchBuilder`: events of
    tables with a native layout are decoded there from their raw bodies; others arrive as
    `RowChange`s from the pure path."""

    def __init__(self, native):
        self._builder = native.ChangeBatchBuilder()
        self._tables: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._builder)

    def _table_code(self, schema: str, table: str) -> int:
        return self._tables.setdefault((schema, table), len(self._tables))

    def add_event(self, event, layout: TableLayout, commit_ts: int, seq: int) -> int:
        """Appends the event's rows with seq `seq`, `seq + 1`, ...; returns how many."""
        if layout.native is not None:
            data, start, end, extra = _raw_body(event)
            return self.add_body(layout.schema, layout.table, layout.native, event.event_type, data, start, end, extra,
                                 commit_ts, seq)
        code = self._table_code(layout.schema, layout.table)
        added = 0
        for change in pure_row_changes(event, layout, commit_ts, seq):
            self._builder.add_row(change.commit_ts, change.seq, code, OP_CODES[change.op], change.before, change.after)
            added += 1
        return added

    def add_body(self, schema: str, table: str, native_layout, event_type: int, data: bytes, start: int, end: int,
                 post_header_extra: int, commit_ts: int, seq: int) -> int:
        """Appends the rows of the ROWS event body `data[start:end]`, decoded with `native_layout`."""
        return self._builder.add_event(native_layout, event_type, data, start, end, post_header_extra,
                                       commit_ts, seq, self._table_code(schema, table))

    def finish(self) -> pa.RecordBatch:
        """The rows added so far as one batch; the builder starts empty again."""
        batch = change_batch(self._builder.finish(), list(self._tables))
        self._tables = {}
        return batch


def change_batch(buffers: tuple, table_names: list) -> pa.RecordBatch:
    """A record batch of CHANGE_SCHEMA from a native builder's `finish()` buffers and the
    (schema, table) names its table codes index."""
    rows, commit_ts, seq, codes, ops, before, after = buffers
    schemas = string_array([schema for schema, _ in table_names])
    tables = string_array([table for _, table in table_names])
    code_array = pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(codes)])
    op_array = pa.Array.from_buffers(pa.uint8(), rows, [None, pa.py_buffer(ops)])
    return pa.RecordBatch.from_arrays([
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(commit_ts)]),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(seq)]),
        schemas.take(code_array),
        tables.take(code_array),
        OP_NAMES.take(op_array),
        image_array(rows, before),
        image_array(rows, after),
    ], schema=CHANGE_SCHEMA)


class PythonBatchBuilder:
    """The reference batch builder: `RowChange`s from the pure path, converted by pyarrow."""

    def __init__(self):
        self._columns: tuple[list, ...] = tuple([] for _ in CHANGE_SCHEMA)

    def __len__(self) -> int:
        return len(self._columns[0])

    def add_changes(self, changes: Iterable[RowChange]) -> int:
        commit_ts, seq, schema, table, op, before, after = self._columns
        added = 0
        for change in changes:
            commit_ts.append(change.commit_ts)
            seq.append(change.seq)
            schema.append(change.schema)
            table.append(change.table)
            op.append(change.op)
            before.append(change.before)
            after.append(change.after)
            added += 1
        return added

    def add_event(self, event, layout: TableLayout, commit_ts: int, seq: int) -> int:
        if layout.native is not None:
            return self.add_changes(native_row_changes(event, layout, commit_ts, seq))
        return self.add_changes(pure_row_changes(event, layout, commit_ts, seq))

    def finish(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(column, field.type) for column, field in zip(self._columns, CHANGE_SCHEMA)],
            schema=CHANGE_SCHEMA)
        self._columns = tuple([] for _ in CHANGE_SCHEMA)
        return batch


def _row_change(commit_ts, schema, table, op, before, after, seq) -> RowChange:
    # RowChange's frozen-dataclass __init__ and its before/after check cost ~1.5 us per row, as
    # much as decoding it; the native path only builds the valid op/image combinations above.
    change = _new_object(RowChange)
    change.__dict__.update(commit_ts=commit_ts, schema=schema, table=table, op=op, before=before, after=after, seq=seq)
    return change


_new_object = object.__new__


def native_row_changes(event, layout: TableLayout, commit_ts: int, seq: int):
    """Yields the event's rows decoded natively from its raw body; returns the next seq."""
    data, start, end, extra = _raw_body(event)
    images = layout.native.decode(event.event_type, data, start, end, extra)
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
