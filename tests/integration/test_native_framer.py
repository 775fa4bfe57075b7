"""Differential test of the native binlog framer (`BinlogRangeReader`) against mysql-replication's
framing, on a real MariaDB with binlog_checksum CRC32 and NONE: the same ranges give identical
record batches (every column type, multi-table transactions, UPDATE/DELETE, a range across a
binlog rotation, pieces of a large transaction, an event over 16 MB that spans packets, a table
on the pure decoding path) and the same errors."""

from __future__ import annotations

import itertools
import pickle
import socket
import time

import pyarrow as pa
import pymysql
import pytest

from sparkcdc.errors import ErrBinlogUnsupportedEvent
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.model.position import BinlogPosition
from sparkcdc.pipeline.planning import MarkerPartition, RangePartition
from sparkcdc.pipeline.stream_reader import read_in_driver, read_partition, read_small_batch
from sparkcdc.pipeline.transport import unpack_changes
from sparkcdc.testing.alltypes import COLUMN_NAMES, ROWS, create_alltypes
from sparkcdc.testing.mariadb import MariaDBServer
from sparkcdc.upstream import native_decode
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream import range_reader
from sparkcdc.upstream.range_reader import (
    BinlogRange,
    framed_range_batches,
    has_native_framer,
    read_range_batches,
    replication_range_batches,
)
from sparkcdc.upstream.schema_reader import read_table_info
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

native = native_decode.native_module()
if not has_native_framer(native):
    pytest.skip(f"native framer not available: {native_decode.decoder_description()}", allow_module_level=True)

_server_ids = itertools.count(8100)
BIG = 17 << 20  # one row over 16 MB: its WRITE_ROWS event spans two MySQL packets


@pytest.fixture(scope="module", params=["CRC32", "NONE"])
def server(request, tmp_path_factory):
    mariadb = MariaDBServer(str(tmp_path_factory.mktemp(f"framer-{request.param}")),
                            extra_config={"binlog_checksum": request.param, "max_allowed_packet": "64M"})
    mariadb.start()
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@global.binlog_checksum")
        assert cur.fetchone()[0] == request.param
    yield mariadb
    mariadb.stop()


def binlog_end(conn) -> BinlogPosition:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        return BinlogPosition(*cur.fetchone()[:2])


def run(conn, *statements, args=None):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement, args)


def read_three_ways(rng: BinlogRange, batch_rows: int) -> list[pa.RecordBatch]:
    """The range read by the native framer, checked batch for batch against mysql-replication's
    framing with the native row decoder and with the pure path."""
    framed = list(framed_range_batches(rng, native, batch_rows))
    replicated = list(replication_range_batches(rng, native, batch_rows))
    pure = list(replication_range_batches(rng, None, batch_rows))
    assert [b.num_rows for b in framed] == [b.num_rows for b in replicated], "batches are cut at the same events"
    for got, want in zip(framed, replicated):
        if not got.equals(want):
            diffs = [(i, g, w) for i, (g, w) in enumerate(zip(got.to_pylist(), want.to_pylist())) if g != w]
            pytest.fail(f"framed vs mysql-replication: first differing rows {diffs[:2]}")
    if framed:
        assert pa.Table.from_batches(framed).equals(pa.Table.from_batches(pure)), "framed vs the pure path"
    return framed


@pytest.fixture(scope="module")
def workload(server):
    """(upstream, ranges) over a workload of every column type, multi-table transactions,
    UPDATE/DELETE, a table left out of the range's tables, a rotation and a >16 MB row: each
    range is (start, end, transactions, tables)."""
    conn = server.connect()
    conn.autocommit(True)
    run(conn, "CREATE DATABASE fr", "USE fr", "SET time_zone='+00:00'")
    create_alltypes(conn, "fr", "seed")  # it inserts ROWS too; the workload inserts them itself
    run(conn, "CREATE TABLE alltypes LIKE seed")
    run(conn, "CREATE TABLE kv (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE other (id INT PRIMARY KEY)",
        "CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)",
        "CREATE TABLE latin (id INT PRIMARY KEY, t VARCHAR(20) CHARACTER SET latin1)")
    placeholders = ", ".join(["%s"] * len(COLUMN_NAMES))
    marks = [binlog_end(conn)]

    def txn(*statements, args=None):
        run(conn, "BEGIN")
        run(conn, statements[0], args=args)
        run(conn, *statements[1:], "COMMIT")
        marks.append(binlog_end(conn))

    for row in ROWS:
        txn(f"INSERT INTO alltypes ({', '.join(COLUMN_NAMES)}) VALUES ({placeholders})",
            args=[row[n] for n in COLUMN_NAMES])
    txn("INSERT INTO kv VALUES (1, 'a'), (2, 'b'), (3, NULL)", "INSERT INTO other VALUES (1)",
        "UPDATE alltypes SET vc = 'changed', d2 = 1.5 WHERE i = 7")
    txn("UPDATE kv SET v = CONCAT(IFNULL(v, ''), '!')", "DELETE FROM other", "INSERT INTO latin VALUES (1, 'é')")
    run(conn, "FLUSH BINARY LOGS")
    txn("DELETE FROM kv WHERE id = 2", "UPDATE alltypes SET tx = NULL")
    txn("DELETE FROM alltypes WHERE i = 7", "INSERT INTO kv VALUES (9, 'nine')")
    txn("INSERT INTO big VALUES (1, REPEAT('x', %s))" % BIG, "INSERT INTO kv VALUES (10, 'ten')")
    txn("UPDATE big SET b = CONCAT('y', b)", "INSERT INTO kv VALUES (11, 'eleven')")
    tables = {f"fr.{name}": read_table_info(conn, "fr", name, 1, 0).to_json()
              for name in ("alltypes", "kv", "big", "latin")}
    conn.close()
    assert marks[5].file != marks[6].file, "the rotation is inside the workload"
    commit_ts = [1000 + i for i in range(len(marks) - 1)]
    return UpstreamConfig.from_uri(server.uri), marks, commit_ts, tables


def test_ranges_read_the_same_with_either_framer(workload, monkeypatch):
    upstream, marks, commit_ts, tables = workload
    # Table `latin` goes the pure decoding path (as a column shape compile_layout rejects would).
    compile_layout = range_reader.compile_layout
    monkeypatch.setattr(range_reader, "compile_layout", lambda module, info, columns: (
        None if info.table == "latin" else compile_layout(module, info, columns)))
    n = len(commit_ts)
    spans = [(0, n), (0, 3), (3, 6), (4, 7), (5, 6), (5, n), (n - 2, n - 1), (n - 1, n)]  # (4, 7) crosses the rotation
    rows = 0
    for first, last in spans:
        rng = BinlogRange(upstream, next(_server_ids), marks[first], marks[last], tuple(commit_ts[first:last]), tables)
        for batch_rows in (1, 3, 4096):
            framed = read_three_ways(rng, batch_rows)
            rows += sum(b.num_rows for b in framed)
    whole = pa.Table.from_batches(read_three_ways(
        BinlogRange(upstream, next(_server_ids), marks[0], marks[n], tuple(commit_ts), tables), 4096))
    assert rows > 0
    assert set(whole["table_name"].to_pylist()) == {"alltypes", "kv", "big", "latin"}  # not "other"
    assert max(len(v or "") for image in whole["after"].to_pylist() if image for v in image) >= BIG


def test_range_read_uses_the_native_framer(workload, monkeypatch):
    upstream, marks, commit_ts, tables = workload
    calls = []
    monkeypatch.setattr("sparkcdc.upstream.range_reader.framed_range_batches",
                        lambda *args: calls.append(args) or iter(()))
    rng = BinlogRange(upstream, next(_server_ids), marks[0], marks[1], tuple(commit_ts[:1]), tables)
    assert list(read_range_batches(rng)) == [] and len(calls) == 1
    assert "binlog framer: native" in native_decode.decoder_description()


def errors(rng: BinlogRange) -> tuple[str, str]:
    got = []
    for read in (lambda: list(framed_range_batches(rng, native)), lambda: list(replication_range_batches(rng, native))):
        with pytest.raises(ErrBinlogUnsupportedEvent) as caught:
            read()
        got.append(str(caught.value))
    return got[0], got[1]


def test_wrong_transaction_counts_fail_the_same_way(workload):
    upstream, marks, commit_ts, tables = workload
    fewer = BinlogRange(upstream, next(_server_ids), marks[0], marks[3], tuple(commit_ts[:2]), tables)
    framed, replicated = errors(fewer)
    assert framed == replicated and "holds more than the 2 indexed transactions" in framed
    more = BinlogRange(upstream, next(_server_ids), marks[0], marks[2], tuple(commit_ts[:3]), tables)
    framed, replicated = errors(more)
    assert framed == replicated and "holds 2 transactions but the index lists 3" in framed


def test_a_range_past_the_binlog_end_fails_instead_of_waiting(workload):
    # mysql-replication's blocking dump would wait for the missing events; the framer's dump is
    # non-blocking, so the server's EOF fails the read.
    upstream, marks, commit_ts, tables = workload
    past = BinlogRange(upstream, next(_server_ids), marks[-2], BinlogPosition(marks[-1].file, marks[-1].pos + 10_000),
                       (commit_ts[-1], commit_ts[-1] + 1), tables)
    with pytest.raises(ErrBinlogUnsupportedEvent, match=r"binlog ended at .* before"):
        list(framed_range_batches(past, native))


def test_a_missing_binlog_file_raises_the_server_error(workload):
    upstream, marks, commit_ts, tables = workload
    missing = BinlogRange(upstream, next(_server_ids), BinlogPosition("mysql-bin.999999", 4),
                          BinlogPosition("mysql-bin.999999", 400), (1,), tables)
    with pytest.raises(pymysql.err.MySQLError, match="binary log"):
        list(framed_range_batches(missing, native))


def test_pieces_of_a_large_transaction_read_the_same(server, tmp_path):
    conn = server.connect()
    conn.autocommit(True)
    run(conn, "CREATE DATABASE IF NOT EXISTS pieces", "USE pieces",
        "CREATE TABLE t (id INT PRIMARY KEY, c CHAR(120) NOT NULL)", "CREATE TABLE u (id INT PRIMARY KEY, v INT)")
    upstream = UpstreamConfig.from_uri(server.uri)
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = Puller(upstream, index, next(_server_ids), heartbeat_seconds=0.2, piece_bytes=64 << 10).start()
    try:
        puller.wait_caught_up(20)
        run(conn, "BEGIN")
        with conn.cursor() as cur:
            for chunk in range(4):
                cur.executemany("INSERT INTO t VALUES (%s, %s)", [(chunk * 1000 + i, "c" * 120) for i in range(1000)])
                cur.execute("INSERT INTO u VALUES (%s, %s)", (chunk, chunk))
        run(conn, "COMMIT", "UPDATE t JOIN u ON u.id = 1 SET t.c = 'd', u.v = 7 WHERE t.id < 2000")
        puller.wait_caught_up(60)
    finally:
        puller.stop()
    assert puller.error is None
    conn.close()
    tables = {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(index.first_ts())}
    split = [t for t in index.txns_between(index.first_ts(), index.resolved_ts()) if t.piece_count > 1]
    assert len(split) == 2
    for txn in split:
        seqs, ranges = [], []
        for piece in range(txn.piece_count):
            start, end, maps = txn.piece_range(piece)
            rng = BinlogRange(upstream, next(_server_ids), start, end, (txn.commit_ts,), tables, piece, maps)
            framed = read_three_ways(rng, 500)
            seqs += [s for b in framed for s in b["seq"].to_pylist()]
            ranges.append(RangePartition(rng, MarkerPartition(0, txn.commit_ts) if piece == 0 else None))
        assert seqs == sorted(seqs) and len(seqs) in (4004, 2001)
        # With a local master the driver reads a batch of pieces too, a thread each, as the tasks would.
        tasks = unpack_changes(pa.Table.from_batches([b for p in ranges for b in read_partition(p)]))
        assert read_in_driver(ranges, None).equals(tasks) and tasks.num_rows == len(seqs) + 1
        assert read_in_driver(ranges, 1 << 40) is None  # a small batch is whole transactions only


def test_a_compressed_event_fails_the_same_way(tmp_path_factory):
    mariadb = MariaDBServer(str(tmp_path_factory.mktemp("framer-compressed")),
                            extra_config={"log_bin_compress": "ON", "log_bin_compress_min_len": "10"})
    mariadb.start()
    try:
        conn = mariadb.connect()
        conn.autocommit(True)
        run(conn, "CREATE DATABASE c", "CREATE TABLE c.t (id INT PRIMARY KEY, v VARCHAR(100))")
        start = binlog_end(conn)
        run(conn, "INSERT INTO c.t VALUES (1, REPEAT('z', 100))")
        end = binlog_end(conn)
        tables = {"c.t": read_table_info(conn, "c", "t", 1, 0).to_json()}
        conn.close()
        rng = BinlogRange(UpstreamConfig.from_uri(mariadb.uri), next(_server_ids), start, end, (1,), tables)
        framed, replicated = errors(rng)
        assert framed == replicated and "cannot be decoded" in framed
    finally:
        mariadb.stop()


def connections(server) -> int:
    """Connections the server has accepted, this one included."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
        return int(cur.fetchone()[1])


def test_a_lost_connection_resumes_from_the_last_whole_event(server, workload):
    upstream, marks, commit_ts, tables = workload
    # The two transactions of the >16 MB rows: the server is still sending when the first row is out.
    rng = BinlogRange(upstream, next(_server_ids), marks[-3], marks[-1], tuple(commit_ts[-2:]), tables)
    expected = pa.Table.from_batches(replication_range_batches(rng, native, 1))
    before = connections(server)
    batches = framed_range_batches(rng, native, 1)
    got = [next(batches)]
    with server.connect() as conn, conn.cursor() as cur:
        # The newest dump is this read's (earlier reads' may linger until the server writes to them).
        cur.execute("SELECT MAX(id) FROM information_schema.processlist WHERE command = 'Binlog Dump'")
        cur.execute(f"KILL {cur.fetchone()[0]}")
    got += list(batches)
    # The read's connection, the one that killed it, the read's second connection, and this one.
    assert connections(server) == before + 4, "the read connected again after the kill"
    assert pa.Table.from_batches(got).equals(expected)


def test_a_small_batch_read_in_the_driver_is_what_its_read_tasks_give(workload):
    """The runner reads a small micro-batch itself (stream_reader.read_small_batch; with a local
    master any batch, read_in_driver): the same table its read tasks give Spark (read_partition,
    unpacked as foreachBatch unpacks it), or None where the batch is for Spark: too large,
    across a rotation (a small batch), an upstream that is not there."""
    upstream, marks, commit_ts, tables = workload

    def ranged(first: int, last: int, to=upstream) -> RangePartition:
        return RangePartition(BinlogRange(to, next(_server_ids), marks[first], marks[last],
                                          tuple(commit_ts[first:last]), tables))

    n = len(commit_ts)
    marker = MarkerPartition(7, commit_ts[4])
    # As plan_partitions gives them: the first range carries the marker. In one binlog file.
    partitions = [RangePartition(ranged(0, 3).binlog_range, marker), ranged(3, 5)]
    picked = [pickle.dumps(p) for p in partitions]
    span = (marks[5].pos - marks[0].pos)
    small = read_small_batch(picked, limit_bytes=span)
    tasks = unpack_changes(pa.Table.from_batches([b for p in partitions for b in read_partition(p)]))
    assert small is not None and small.num_rows == tasks.num_rows > len(ROWS)
    assert small.schema == tasks.schema and small.equals(tasks)
    assert tasks.column("op")[0].as_py() == RANGE_MARKER  # the first task read the marker first
    assert read_small_batch(picked, limit_bytes=span - 1) is None  # larger than the limit: Spark reads it
    # With a local master any size is read here (a catch-up's batch), a range per thread.
    assert read_in_driver(partitions, None).equals(tasks)
    rotated = RangePartition(ranged(4, 7).binlog_range, marker)
    assert read_small_batch([pickle.dumps(rotated)], limit_bytes=1 << 40) is None  # across a rotation
    rotated_tasks = unpack_changes(pa.Table.from_batches(list(read_partition(rotated))))
    assert read_in_driver([rotated], None).equals(rotated_tasks)  # but with a local master, here
    with socket.socket() as unused:  # a port nothing listens on: not waited for
        unused.bind(("127.0.0.1", 0))
        gone = UpstreamConfig("127.0.0.1", unused.getsockname()[1], upstream.user, upstream.password)
        began = time.monotonic()
        away = RangePartition(ranged(n - 2, n - 1, gone).binlog_range, marker)
        assert read_small_batch([pickle.dumps(away)], limit_bytes=1 << 40) is None
        assert time.monotonic() - began < range_reader.UPSTREAM_WAIT_SECONDS / 3
