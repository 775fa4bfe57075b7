"""Differential test: the native row decoder and the pure Python reference decode the same
binlog events of random rows of every column type to identical canonical values, and to
identical Arrow batches (what the Spark source yields).

Rows are written to a real MariaDB, the ROWS events are read back with mysql-replication and
each event is decoded both ways; then `read_range_batches` reads the same transaction with the
native decoder and with the pure path forced."""

from __future__ import annotations

import datetime
import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from sparkcdc.upstream import native_decode
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.range_reader import (
    BinlogRange,
    NativeBatchBuilder,
    PythonBatchBuilder,
    TableLayout,
    native_row_changes,
    pure_row_changes,
    read_range_batches,
)
from sparkcdc.upstream.schema_reader import read_table_info

pytestmark = pytest.mark.integration

native = native_decode.native_module()
if native is None:
    pytest.skip(f"native decoder not available: {native_decode.decoder_description()}", allow_module_level=True)

ENUM = ("a", "b,c", "it's", "", "é")
SET = ("x", "y", "z'q", "ü")


def _int(bits: int, unsigned: bool):
    return st.integers(0, 2**bits - 1) if unsigned else st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _decimal(precision: int, scale: int):
    integral = precision - scale

    @st.composite
    def build(draw):
        sign = draw(st.sampled_from(["", "-"]))
        whole = draw(st.integers(0, 10**integral - 1)) if integral else 0
        fraction = draw(st.integers(0, 10**scale - 1)) if scale else None
        return f"{sign}{whole}" + (f".{fraction:0{scale}d}" if scale else "")

    return build()


def _fraction(microsecond: int, fsp: int) -> str:
    return ("." + f"{microsecond:06d}"[:fsp]) if fsp else ""


def _datetime(fsp: int, low=datetime.datetime(1000, 1, 1), high=datetime.datetime(9999, 12, 31, 23, 59, 59)):
    return st.datetimes(low, high).map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S") + _fraction(d.microsecond, fsp))


def _zero_part_datetime(fsp: int):
    # MariaDB allows zero parts unless sql_mode has NO_ZERO_IN_DATE.
    return st.tuples(st.integers(0, 9999), st.integers(0, 12), st.integers(0, 28), st.integers(0, 23),
                     st.integers(0, 999999)).map(
        lambda p: f"{p[0]:04d}-{p[1]:02d}-{p[2]:02d} {p[3]:02d}:00:00" + _fraction(p[4], fsp))


def _time(fsp: int):
    limit = 838 * 3600 + 59 * 60 + 59

    def text(seconds_and_micros):
        seconds, micros = seconds_and_micros
        sign = "-" if seconds < 0 else ""
        seconds = abs(seconds)
        micros = micros if fsp else 0
        if sign and seconds == 0 and not int(f"{micros:06d}"[:fsp] or 0):
            sign = ""
        return f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" + _fraction(micros, fsp)

    return st.tuples(st.integers(-limit, limit), st.integers(0, 999999)).map(text).filter(
        lambda t: not (t.startswith("838:59:59.") or t.startswith("-838:59:59.")))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
).map(lambda v: json.dumps(v, ensure_ascii=False))

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_latin1 = st.text(st.characters(codec="cp1252"), max_size=40)

# (name, SQL type, strategy for a non-NULL value, placeholder)
COLUMNS = [
    ("ti", "TINYINT", _int(8, False)), ("tiu", "TINYINT UNSIGNED", _int(8, True)),
    ("si", "SMALLINT", _int(16, False)), ("siu", "SMALLINT UNSIGNED", _int(16, True)),
    ("mi", "MEDIUMINT", _int(24, False)), ("miu", "MEDIUMINT UNSIGNED", _int(24, True)),
    ("i", "INT", _int(32, False)), ("iu", "INT UNSIGNED", _int(32, True)),
    ("bi", "BIGINT", _int(64, False)), ("biu", "BIGINT UNSIGNED", _int(64, True)),
    ("d", "DECIMAL(65,30)", _decimal(65, 30)), ("d2", "DECIMAL(10,2)", _decimal(10, 2)),
    ("d0", "DECIMAL(18,0)", _decimal(18, 0)), ("df", "DECIMAL(9,9)", _decimal(9, 9)),
    ("f", "FLOAT", st.floats(width=32, allow_nan=False, allow_infinity=False)),
    ("db", "DOUBLE", st.floats(allow_nan=False, allow_infinity=False)),
    ("c", "CHAR(10)", _text.map(lambda s: s[:10].rstrip(" "))), ("c100", "CHAR(100)", _text),
    ("vc", "VARCHAR(300)", _text), ("tx", "TEXT", _text), ("mt", "MEDIUMTEXT", _text),
    ("lvc", "VARCHAR(50) CHARACTER SET latin1", _latin1), ("ltx", "TEXT CHARACTER SET latin1", _latin1),
    ("bn", "BINARY(4)", st.binary(max_size=4)), ("vb", "VARBINARY(300)", st.binary(max_size=300)),
    ("bl", "BLOB", st.binary(max_size=300)), ("lb", "LONGBLOB", st.binary(max_size=50)),
    ("dt", "DATE", st.dates(datetime.date(1000, 1, 1)).map(str) | _zero_part_datetime(0).map(lambda s: s[:10])),
    ("tm", "TIME", _time(0)), ("tm3", "TIME(3)", _time(3)), ("tm6", "TIME(6)", _time(6)),
    ("dtm", "DATETIME", _datetime(0) | _zero_part_datetime(0)), ("dtm1", "DATETIME(1)", _datetime(1)),
    ("dtm6", "DATETIME(6)", _datetime(6) | _zero_part_datetime(6)),
    ("ts", "TIMESTAMP NULL", _datetime(0, datetime.datetime(1970, 1, 1, 0, 0, 1), datetime.datetime(2038, 1, 19, 3, 14, 7))
     | st.just("0000-00-00 00:00:00")),
    ("ts3", "TIMESTAMP(3) NULL", _datetime(3, datetime.datetime(1970, 1, 1, 0, 0, 1), datetime.datetime(2038, 1, 19, 3, 14, 7))),
    ("yr", "YEAR", st.integers(1901, 2155) | st.just(0)),
    ("en", "ENUM(" + ",".join("'" + e.replace("'", "''") + "'" for e in ENUM) + ")", st.sampled_from(ENUM)),
    ("st", "SET(" + ",".join("'" + e.replace("'", "''") + "'" for e in SET) + ")",
     st.sets(st.sampled_from(SET)).map(lambda s: ",".join(e for e in SET if e in s))),
    ("b1", "BIT(1)", _int(1, True)), ("b10", "BIT(10)", _int(10, True)), ("b64", "BIT(64)", _int(64, True)),
    ("js", "JSON", _json),
]
NAMES = [name for name, _, _ in COLUMNS]

rows = st.lists(st.fixed_dictionaries({name: st.none() | strategy for name, _, strategy in COLUMNS}),
                min_size=1, max_size=6)


@pytest.fixture(scope="module")
def table(mariadb):
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS native_diff")
        cur.execute("DROP TABLE IF EXISTS native_diff.t")
        columns = ", ".join(f"`{name}` {sql_type}" for name, sql_type, _ in COLUMNS)
        cur.execute(f"CREATE TABLE native_diff.t (id INT AUTO_INCREMENT PRIMARY KEY, {columns}) "
                    "DEFAULT CHARSET=utf8mb4")
        cur.execute("SET time_zone='+00:00'")
        cur.execute("SET sql_mode='STRICT_TRANS_TABLES'")
    conn.autocommit(True)
    info = read_table_info(conn, "native_diff", "t", 1, 0)
    yield mariadb, conn, info
    conn.close()


def _binlog_end(conn):
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        return cur.fetchone()[:2]


def _decode_both(mariadb, info, start, end):
    """(native, pure) row changes of every ROWS event in [start, end), and the same events as
    Arrow batches: (native builder, native builder fed by the pure path, reference builder)."""
    stream = BinLogStreamReader(
        connection_settings=UpstreamConfig.from_uri(mariadb.uri).connection_settings(),
        server_id=4242, log_file=start[0], log_pos=start[1], resume_stream=True, blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], enable_logging=False,
    )
    native_changes, pure_changes = [], []
    builders = (NativeBatchBuilder(native), NativeBatchBuilder(native), PythonBatchBuilder())
    end_key = (end[0], end[1])
    try:
        for event in stream:
            if event.table == "t" and event.schema == "native_diff":
                layout = TableLayout(info, event.columns, native)
                pure_layout = TableLayout(info, event.columns, None)
                assert layout.native is not None, "every column type here must compile to a native layout"
                seq = len(native_changes)
                # The native decoder reads the raw body, so it must run before event.rows consumes it.
                native_changes.extend(native_row_changes(event, layout, 1, seq))
                builders[0].add_event(event, layout, 1, seq)
                pure_changes.extend(pure_row_changes(event, layout, 1, seq))
                builders[1].add_event(event, pure_layout, 1, seq)
                builders[2].add_event(event, pure_layout, 1, seq)
            if (stream.log_file, stream.log_pos) >= end_key:
                break
    finally:
        stream.close()
    return native_changes, pure_changes, [builder.finish() for builder in builders]


def _assert_same_batches(got: pa.RecordBatch | pa.Table, want: pa.RecordBatch | pa.Table, what: str):
    assert got.schema.equals(want.schema), what
    if not got.equals(want):
        diffs = [(i, g, w) for i, (g, w) in enumerate(zip(got.to_pylist(), want.to_pylist())) if g != w]
        pytest.fail(f"{what}: {got.num_rows} vs {want.num_rows} rows; first differing rows {diffs[:2]}")


@settings(max_examples=int(os.environ.get("SPARKCDC_NATIVE_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(inserted=rows, replacements=rows)
def test_native_and_pure_decoders_agree(table, inserted, replacements):
    mariadb, conn, info = table
    start = _binlog_end(conn)
    placeholders = ", ".join(["%s"] * len(NAMES))
    columns = ", ".join(f"`{n}`" for n in NAMES)
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.executemany(f"INSERT INTO native_diff.t ({columns}) VALUES ({placeholders})",
                        [[row[n] for n in NAMES] for row in inserted])
        cur.execute("SELECT id FROM native_diff.t ORDER BY id")
        ids = [i for (i,) in cur.fetchall()]
        assignments = ", ".join(f"`{n}`=%s" for n in NAMES)
        for row_id, row in zip(ids, replacements):
            cur.execute(f"UPDATE native_diff.t SET {assignments} WHERE id=%s", [row[n] for n in NAMES] + [row_id])
        cur.execute("DELETE FROM native_diff.t")
        cur.execute("COMMIT")
    end = _binlog_end(conn)

    native_changes, pure_changes, (native_batch, fed_batch, reference_batch) = _decode_both(mariadb, info, start, end)
    ops = [c.op for c in pure_changes]
    assert ops.count("insert") == ops.count("delete") == len(inserted)  # an UPDATE that changes nothing is not logged
    assert [c.op for c in native_changes] == [c.op for c in pure_changes]
    for got, want in zip(native_changes, pure_changes):
        for image in ("before", "after"):
            got_values, want_values = getattr(got, image), getattr(want, image)
            if got_values != want_values:
                diffs = [(name, g, w) for name, g, w in zip(("id", *NAMES), got_values, want_values) if g != w]
                pytest.fail(f"{got.op} {image}: native != pure for {diffs}")
    assert native_changes == pure_changes
    _assert_same_batches(native_batch, reference_batch, "native ChangeBatchBuilder vs pyarrow from pure RowChanges")
    _assert_same_batches(fed_batch, reference_batch, "native builder fed by the pure path vs pyarrow")

    # The source's own function, both ways, over the transaction (cut into batches of 3 rows).
    rng = BinlogRange(UpstreamConfig.from_uri(mariadb.uri), 4243, BinlogPosition(*start), BinlogPosition(*end), (1,),
                      {"native_diff.t": info.to_json()})
    with_native = pa.Table.from_batches(read_range_batches(rng, batch_rows=3))
    os.environ[native_decode.FORCE_PURE_ENV] = "1"
    try:
        with_pure = pa.Table.from_batches(read_range_batches(rng, batch_rows=3))
    finally:
        del os.environ[native_decode.FORCE_PURE_ENV]
    assert with_native.num_rows == len(pure_changes)
    _assert_same_batches(with_native, with_pure, "read_range_batches native vs pure")
    _assert_same_batches(with_native.combine_chunks(), pa.Table.from_batches([reference_batch]).combine_chunks(),
                         "read_range_batches vs the events decoded one by one")


def test_floats_whose_shortest_digits_tie_read_as_the_reference(table):
    # 70368744177664.625 is exactly between 70368744177664.62 and .63, which both read back as it:
    # Python's repr (DOUBLE) and numpy (FLOAT) take the even digit, Rust's Display the upper one.
    mariadb, conn, info = table
    doubles = [70368744177664.625, -70368744177664.625, 70368744177664.875, 0.1 + 0.2, 1e300, 5e-324, 123.5]
    floats = [414136.625, -23629.5625, 2463049.25, 0.1, 3.4e38, 1e-45, 123.5]
    start = _binlog_end(conn)
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO native_diff.t (db, f) VALUES (%s, %s)", list(zip(doubles, floats)))
        cur.execute("DELETE FROM native_diff.t")
    native_changes, pure_changes, _ = _decode_both(mariadb, info, start, _binlog_end(conn))
    for name, ties in (("db", ["70368744177664.62", "-70368744177664.62", "70368744177664.88"]),
                       ("f", ["414136.62", "-23629.562", "2463049.2"])):
        column = 1 + NAMES.index(name)
        inserted = [c.after[column] for c in native_changes if c.op == "insert"]
        assert inserted == [c.after[column] for c in pure_changes if c.op == "insert"], name
        assert inserted[:3] == ties, name
