"""Reads a table's rows for the initial snapshot: chunk keys, chunk boundaries, and one chunk's
rows as change batches. `read_chunk_batches` runs on Spark executors; the rest on the driver.

Order and comparison are the server's: boundaries come from `ORDER BY key LIMIT 1 OFFSET n` on
the chunk key's index, and a chunk is the rows with `key > low AND key <= high`, the predicates
written out column by column (MariaDB's range optimizer does not use an index for row
constructors such as `(a, b) > (?, ?)`) and the values bound as typed parameters
(model/sql_values.py), so utf8mb4 `_ci` strings, PAD SPACE, composite, unsigned, DECIMAL,
temporal and binary keys compare exactly as the index orders them. Adjacent chunks share one
bound value, so every row falls in exactly one chunk, whatever the collation.

A chunk is read in its own `START TRANSACTION WITH CONSISTENT SNAPSHOT` (no lock: writers go on),
whose `binlog_snapshot_file`/`binlog_snapshot_position` say the binlog position the read is
consistent with: every transaction before it is in the rows, none after it. Values come over
the text protocol and become the canonical text the binlog decoder produces (model/events.py),
so sinks cannot tell a snapshot row from a binlog insert: framed by the native reader
(native/src/text_rows.rs) when the extension is built and no column needs Python's formatting
(FLOAT, DOUBLE), else fetched with pymysql without its conversions.

The batches of a chunk start with one marker row (op CHUNK_MARKER, commit_ts the chunk's number
in its read, after = [position, table version, problem]); the rows follow with that commit_ts
and seq 0, 1, ...: the driver later gives them the commit-ts of their place in the stream. A
chunk whose table changed under the read (dropped, a column gone, rebuilt by a DDL) has a
problem and no rows, and is read again by the driver's next wave.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pymysql
import pymysql.converters
import pymysql.cursors

from sparkcdc.errors import ErrSnapshotChunkKeyInvalid, ErrSnapshotTablePrivilege
from sparkcdc.model.change_batch import CHANGE_SCHEMA, IMAGE_TYPE, image_array, int64_array, string_array
from sparkcdc.model.events import BINARY_TYPES, GEOMETRY_TYPES, ColumnInfo, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.model.snapshot import Bound, ChunkKey
from sparkcdc.model.sql_values import to_parameter
from sparkcdc.upstream.connection import UpstreamConfig, close_quietly, connected_socket, reported
from sparkcdc.upstream.native_decode import native_module

# The op of a chunk's marker row (model.change_batch's RANGE_MARKER is the binlog source's).
CHUNK_MARKER = "chunk"
# Rows fetched from the server per change batch (pymysql's path; the native reader's batches are
# _NATIVE_BATCH_FACTOR times that: its cost per batch, not per row, is what a bigger batch saves).
CHUNK_BATCH_ROWS = 4096
_NATIVE_BATCH_FACTOR = 4
# How long the native reader waits for the server's next bytes (net_write_timeout is 600 s).
READ_TIMEOUT_SECONDS = 600.0
_COM_QUERY = 0x03
_MAX_PACKET = 0xFF_FFFF
# Why a chunk was not read; the driver reads it again.
PROBLEM_TABLE_CHANGED = "table-changed"
PROBLEM_TABLE_GONE = "table-gone"

# MariaDB error numbers a chunk read meets when its table changed under it.
_NO_SUCH_TABLE, _BAD_FIELD, _TABLE_DEF_CHANGED, _KEY_DOES_NOT_EXIST = 1146, 1054, 1412, 1176
_TABLE_ACCESS_DENIED, _COLUMN_ACCESS_DENIED = 1142, 1143
# Column types whose `>` does not follow their ORDER BY (ENUM and SET sort by index but compare
# as strings) or that no index orders: never a chunk key.
_UNCHUNKABLE_TYPES = frozenset({"enum", "set", "json", *GEOMETRY_TYPES})
# Only type-keyed encoders: without decoders pymysql hands values over as the server sent them.
_TEXT_CONVERSIONS = {key: value for key, value in pymysql.converters.conversions.items() if not isinstance(key, int)}


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_name(schema: str, table: str) -> str:
    return f"{quote_name(schema)}.{quote_name(table)}"


def connect_for_reads(upstream: UpstreamConfig, sock=None):
    """A connection that returns values untouched, in UTC (canonical timestamps are UTC), on
    `sock` when given (a socket of ours, which the native reader reads)."""
    conn = upstream.connect(sock, conv=_TEXT_CONVERSIONS, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute("SET SESSION time_zone = '+00:00', SESSION net_write_timeout = 600")
    return conn


# -- canonical values ---------------------------------------------------------------------
def _float(text):
    from sparkcdc.upstream.values import _float as canonical_float

    return canonical_float(float(text))


def _double(text):
    from sparkcdc.upstream.values import _double as canonical_double

    return canonical_double(float(text))


def _bit(raw) -> str:
    return str(int.from_bytes(raw, "big")) if isinstance(raw, (bytes, bytearray)) else str(int(raw))


def _latin1(raw) -> str:
    return bytes(raw).decode("latin-1") if isinstance(raw, (bytes, bytearray)) else raw


def value_formatter(column: ColumnInfo) -> Optional[Callable]:
    """The function from the text protocol's value of `column` to its canonical text; None when
    the server's text already is (integers, DECIMAL, strings, temporal types in UTC, ENUM, SET, JSON)."""
    kind = column.mysql_type
    if kind == "float":
        return _float
    if kind == "double":
        return _double
    if kind == "bit":
        return _bit
    if column.is_binary or kind in BINARY_TYPES or kind in GEOMETRY_TYPES:
        return _latin1
    return None


def canonical_rows(columns: Sequence[ColumnInfo], rows: Sequence[tuple]) -> list[list]:
    """The rows' values per column, in canonical text (None stays NULL)."""
    by_column = list(zip(*rows)) if rows else [() for _ in columns]
    result = []
    for column, values in zip(columns, by_column):
        formatter = value_formatter(column)
        result.append(list(values) if formatter is None else [None if v is None else formatter(v) for v in values])
    return result


# -- chunk keys and predicates ------------------------------------------------------------
def key_predicate(columns: Sequence[ColumnInfo], bound: Bound, above: bool) -> tuple[str, list]:
    """`key > bound` (above) or `key <= bound` written column by column, and its parameters."""
    if bound is None:
        return "1", []
    terms, params = [], []
    for i, column in enumerate(columns):
        equal = [f"{quote_name(c.name)} = %s" for c in columns[:i]]
        last = i == len(columns) - 1
        operator = ">" if above else ("<=" if last else "<")
        terms.append("(" + " AND ".join([*equal, f"{quote_name(column.name)} {operator} %s"]) + ")")
        params.extend(to_parameter(c, v) for c, v in zip(columns[:i + 1], bound[:i + 1]))
    return "(" + " OR ".join(terms) + ")", params


def chunk_predicate(columns: Sequence[ColumnInfo], low: Bound, high: Bound) -> tuple[str, list]:
    low_sql, low_params = key_predicate(columns, low, True)
    high_sql, high_params = key_predicate(columns, high, False)
    return f"{low_sql} AND {high_sql}", [*low_params, *high_params]


def table_indexes(conn, schema: str, table: str) -> dict[str, list[str]]:
    """Index name -> its columns in order (expression parts left out), PRIMARY first."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX", (schema, table))
        indexes: dict[str, list[str]] = {}
        for name, column in cursor.fetchall():
            indexes.setdefault(_text(name), []).append(_text(column) if column is not None else "")
    return indexes


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value


def _chunkable(info: TableInfo, columns: Sequence[str]) -> bool:
    by_name = {c.name: c for c in info.columns}
    return all(name in by_name and not by_name[name].nullable and by_name[name].mysql_type not in _UNCHUNKABLE_TYPES
               for name in columns)


def choose_chunk_key(info: TableInfo, indexes: dict[str, list[str]], columns: Sequence[str] = ()) -> Optional[ChunkKey]:
    """The chunk key of a table: the user's `columns` (the leading columns of one of its indexes,
    NOT NULL), else its handle key (primary key, or first unique key of NOT NULL columns) when an
    index leads with it; None: the table is one chunk."""
    where = f"{info.schema}.{info.table}"
    if columns:
        wanted = list(columns)
        for name, index_columns in indexes.items():
            if index_columns[:len(wanted)] == wanted:
                if not _chunkable(info, wanted):
                    raise ErrSnapshotChunkKeyInvalid(
                        f"snapshot chunk key ({', '.join(wanted)}) of {where} has a nullable column or one of type "
                        "ENUM, SET, JSON or GEOMETRY, which cannot cut chunks; name NOT NULL columns of another index")
                return ChunkKey(name, tuple(wanted))
        raise ErrSnapshotChunkKeyInvalid(
            f"snapshot chunk key ({', '.join(wanted)}) of {where} is not the leading columns of any index of the "
            f"table (indexes: {_describe(indexes)}); name the columns of its primary key or of an index, or "
            "remove the [[snapshot.chunk-keys]] rule")
    if not info.handle_key:
        return None
    for name, index_columns in indexes.items():
        if tuple(index_columns) == tuple(info.handle_key) and _chunkable(info, index_columns):
            return ChunkKey(name, tuple(index_columns))
    return None


def _describe(indexes: dict[str, list[str]]) -> str:
    return "; ".join(f"{name} ({', '.join(columns)})" for name, columns in indexes.items()) or "none"


def key_columns(info: TableInfo, key: ChunkKey) -> list[ColumnInfo]:
    by_name = {c.name: c for c in info.columns}
    return [by_name[name] for name in key.columns]


def last_key(conn, info: TableInfo, key: ChunkKey) -> Bound:
    """The table's greatest key now (None when it is empty): the copy cuts chunks up to it and
    the last chunk runs to the end, so rows inserted meanwhile at the end are not chased."""
    columns = key_columns(info, key)
    names = ", ".join(quote_name(c.name) for c in columns)
    descending = ", ".join(f"{quote_name(c.name)} DESC" for c in columns)
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT {names} FROM {table_name(info.schema, info.table)} FORCE INDEX "
                       f"({quote_name(key.index)}) ORDER BY {descending} LIMIT 1")
        row = cursor.fetchone()
    return None if row is None else tuple(values[0] for values in canonical_rows(columns, [row]))


def next_boundary(conn, info: TableInfo, key: ChunkKey, low: Bound, rows: int, up_to: Bound = None) -> Bound:
    """The key of the `rows`-th row above `low` (and at most `up_to`) in the index's order: the
    inclusive upper bound of a chunk of `rows` rows; None when fewer rows are left (the chunk
    runs to the end)."""
    columns = key_columns(info, key)
    predicate, params = key_predicate(columns, low, True)
    if up_to is not None:
        below, below_params = key_predicate(columns, up_to, False)
        predicate, params = f"{predicate} AND {below}", [*params, *below_params]
    names = ", ".join(quote_name(c.name) for c in columns)
    sql = (f"SELECT {names} FROM {table_name(info.schema, info.table)} FORCE INDEX ({quote_name(key.index)}) "
           f"WHERE {predicate} ORDER BY {names} LIMIT 1 OFFSET {max(0, rows - 1)}")
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    return tuple(values[0] for values in canonical_rows(columns, [row]))


def estimated_rows(conn, schema: str, table: str) -> int:
    with conn.cursor() as cursor:
        cursor.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                       (schema, table))
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def check_readable(conn, info: TableInfo) -> None:
    """ErrSnapshotTablePrivilege when the upstream user may not SELECT the table's columns."""
    columns = ", ".join(quote_name(c.name) for c in info.columns)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT {columns} FROM {table_name(info.schema, info.table)} LIMIT 0")
            cursor.fetchall()
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in (_TABLE_ACCESS_DENIED, _COLUMN_ACCESS_DENIED):
            raise privilege_error(info.schema, info.table, exc) from None
        raise


def privilege_error(schema: str, table: str, exc: BaseException) -> ErrSnapshotTablePrivilege:
    message = exc.args[-1] if getattr(exc, "args", None) else exc
    return ErrSnapshotTablePrivilege(
        f"the upstream user may not read {schema}.{table} for the snapshot ({message}); GRANT SELECT ON "
        f"`{schema}`.`{table}` to it, or leave the table out of the snapshot with `[snapshot] tables`")


# -- reading a chunk (executors) -----------------------------------------------------------
@dataclass(frozen=True)
class ChunkRead:
    """One chunk to read: plain data, pickled to an executor."""

    upstream: UpstreamConfig
    number: int  # the chunk's place in its read: the commit_ts its rows carry until placed
    table_info: str  # TableInfo.to_json() of the version the read formats with
    key: Optional[ChunkKey]
    low: Bound
    high: Bound


def _marker(number: int, info: TableInfo, position: str, problem: str) -> pa.RecordBatch:
    image = pa.array([[position, str(info.version), problem]], IMAGE_TYPE)
    return pa.RecordBatch.from_arrays(
        [int64_array([number]), int64_array([-1]), string_array([info.schema]), string_array([info.table]),
         string_array([CHUNK_MARKER]), pa.nulls(1, IMAGE_TYPE), image], schema=CHANGE_SCHEMA)


def rows_batch(number: int, info: TableInfo, first_seq: int, columns: list[list]) -> pa.RecordBatch:
    """Canonical values per column as CHANGE_SCHEMA insert rows: commit_ts `number`, seq from `first_seq`."""
    width, count = len(columns), len(columns[0]) if columns else 0
    arrays = [pa.array(values, pa.string()) for values in columns]
    values = pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())
    if width > 1:  # column-major to row-major
        values = values.take(pa.array(np.arange(width * count, dtype=np.int64).reshape(width, count).T.ravel()))
    offsets = pa.array(np.arange(0, width * count + 1, max(1, width), dtype=np.int32)[:count + 1])
    return _inserts(number, info, first_seq, pa.ListArray.from_arrays(offsets, values, type=IMAGE_TYPE))


def _inserts(number: int, info: TableInfo, first_seq: int, after: pa.Array) -> pa.RecordBatch:
    """Insert rows of `info` with the images `after`: commit_ts `number`, seq from `first_seq`."""
    count = len(after)
    # pa.repeat, not pa.array of Python lists: 12 ns a row against the lists' 148 (docs/benchmarks.md).
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(number, pa.int64()), count),
         pa.array(np.arange(first_seq, first_seq + count, dtype=np.int64)),
         pa.repeat(pa.scalar(info.schema, pa.string()), count), pa.repeat(pa.scalar(info.table, pa.string()), count),
         pa.repeat(pa.scalar("insert", pa.string()), count), pa.nulls(count, IMAGE_TYPE), after],
        schema=CHANGE_SCHEMA)


def native_modes(native, columns: Sequence[ColumnInfo]) -> Optional[list[int]]:
    """How the native reader (`native`: native_decode.native_module()) makes each column's
    canonical text, or None when it cannot read the table (no reader in this build, or a
    column only Python formats: FLOAT, DOUBLE)."""
    if native is None or not hasattr(native, "TextRowReader"):
        return None
    modes = {None: native.TEXT_MODE_TEXT, _latin1: native.TEXT_MODE_LATIN1, _bit: native.TEXT_MODE_BIT}
    result = []
    for column in columns:
        mode = modes.get(value_formatter(column))
        if mode is None:
            return None
        result.append(mode)
    return result


def _pymysql_batches(cursor, sql: str, params: list, read: ChunkRead, info: TableInfo,
                     batch_rows: int) -> Iterator[pa.RecordBatch]:
    cursor.execute(sql, params)
    seq = 0
    while True:
        rows = cursor.fetchmany(batch_rows)
        if not rows:
            return
        yield rows_batch(read.number, info, seq, canonical_rows(info.columns, rows))
        seq += len(rows)


def _native_batches(cursor, sock, native, modes: list[int], sql: str, params: list, read: ChunkRead,
                    info: TableInfo, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The SELECT sent as a COM_QUERY on the connection's own socket and its answer framed by
    the native reader (native/src/text_rows.rs): the same batches as `_pymysql_batches`."""
    query = cursor.mogrify(sql, params).encode("utf-8")
    if len(query) + 1 >= _MAX_PACKET:
        raise ValueError("a chunk's SELECT over 16 MB")
    sock.sendall(struct.pack("<I", len(query) + 1)[:3] + b"\x00" + bytes([_COM_QUERY]) + query)
    reader = native.TextRowReader(sock.fileno(), modes, READ_TIMEOUT_SECONDS)
    seq = 0
    while True:
        result = reader.read(batch_rows * _NATIVE_BATCH_FACTOR)
        if result is None:
            return
        if isinstance(result, bytes):
            pymysql.err.raise_mysql_exception(result)
        rows, after = result
        yield _inserts(read.number, info, seq, image_array(rows, after))
        seq += rows


def read_chunk_batches(read: ChunkRead, batch_rows: int = CHUNK_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The chunk's marker, then its rows as of one consistent snapshot, `batch_rows` at a time
    (with the native reader, `_NATIVE_BATCH_FACTOR` times that). An upstream that goes away
    during the read is ErrUpstreamUnreachable, which the changefeed retries once it is back."""
    info = TableInfo.from_json(read.table_info)
    doing = f"a Spark task reading a chunk of {table_name(info.schema, info.table)}"
    return reported(_chunk_batches(read, info, batch_rows), read.upstream, doing)


def _chunk_batches(read: ChunkRead, info: TableInfo, batch_rows: int) -> Iterator[pa.RecordBatch]:
    native = native_module()
    modes = native_modes(native, info.columns)
    sock = None if modes is None else connected_socket(read.upstream)
    try:
        conn = connect_for_reads(read.upstream, sock)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    cursor = conn.cursor(pymysql.cursors.SSCursor)
    try:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        position = snapshot_position(cursor)
        names = ", ".join(quote_name(c.name) for c in info.columns)
        sql = f"SELECT {names} FROM {table_name(info.schema, info.table)}"
        params: list = []
        if read.key is not None:
            predicate, params = chunk_predicate(key_columns(info, read.key), read.low, read.high)
            sql += f" FORCE INDEX ({quote_name(read.key.index)}) WHERE {predicate}"
        if modes is None:
            batches = _pymysql_batches(cursor, sql, params, read, info, batch_rows)
        else:
            batches = _native_batches(cursor, sock, native, modes, sql, params, read, info, batch_rows)
        try:
            first = next(batches, None)  # the SELECT's answer starts: refusals come here
        except pymysql.err.MySQLError as exc:
            number = exc.args[0] if exc.args else 0
            if number in (_TABLE_ACCESS_DENIED, _COLUMN_ACCESS_DENIED):
                raise privilege_error(info.schema, info.table, exc) from None
            if number in (_NO_SUCH_TABLE, _BAD_FIELD, _TABLE_DEF_CHANGED, _KEY_DOES_NOT_EXIST):
                problem = PROBLEM_TABLE_GONE if number == _NO_SUCH_TABLE else PROBLEM_TABLE_CHANGED
                yield _marker(read.number, info, str(position), f"{problem}: {exc.args[-1]}")
                return
            raise
        yield _marker(read.number, info, str(position), "")
        if first is not None:
            yield first
            yield from batches
        cursor.execute("COMMIT")
    finally:
        # After a lost connection the cursor's close() raises (an AttributeError from its unread
        # rows), which would hide the read's error.
        close_quietly(cursor)
        close_quietly(conn)


def snapshot_position(cursor) -> BinlogPosition:
    """The binlog position the open consistent-snapshot transaction's reads are consistent with."""
    cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    status = {_text(name).lower(): _text(value) for name, value in cursor.fetchall()}
    return BinlogPosition(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))
