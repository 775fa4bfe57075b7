"""The snapshot's chunk reads against a real MariaDB: every column type reads back as exactly the
canonical text the binlog decoder gives the same rows, and chunk boundaries cut tables keyed by
case-insensitive strings, composite, signed/unsigned, DECIMAL, DATETIME and BINARY keys into
chunks that hold every row exactly once."""

import socket
import threading
from dataclasses import replace

import pyarrow as pa
import pytest

from sparkcdc.errors import ErrSnapshotChunkKeyInvalid, ErrSnapshotTablePrivilege
from sparkcdc.model.events import TableInfo
from sparkcdc.testing.alltypes import COLUMN_NAMES, create_alltypes, insert_alltypes
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.schema_reader import read_table_info
from sparkcdc.upstream.snapshot_reader import (
    CHUNK_MARKER, ChunkRead, check_readable, choose_chunk_key, connect_for_reads, native_modes, next_boundary,
    read_chunk_batches, table_indexes,
)
from sparkcdc.upstream.native_decode import FORCE_PURE_ENV, native_module
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration


def _read(cfg, info, key=None, low=None, high=None, batch_rows=4096):
    batches = list(read_chunk_batches(ChunkRead(cfg, 3, info.to_json(), key, low, high), batch_rows))
    table = pa.Table.from_batches(batches)
    marker = table.slice(0, 1).to_pylist()[0]
    rows = table.slice(1)
    assert marker["op"] == CHUNK_MARKER and marker["commit_ts"] == 3
    assert set(rows["op"].to_pylist()) <= {"insert"} and set(rows["commit_ts"].to_pylist()) <= {3}
    assert rows["seq"].to_pylist() == list(range(rows.num_rows))
    return marker["after"], [tuple(after) for after in rows["after"].to_pylist()]


def test_chunk_rows_equal_the_binlog_decoders(mariadb, fresh_db, tmp_path):
    conn = mariadb.connect(database=fresh_db)
    create_alltypes(conn, fresh_db, rows=False)
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = Puller(cfg, index, server_id=1101, heartbeat_seconds=0.2).start()
    try:
        puller.wait_caught_up(30)
        start_ts = index.resolved_ts()
        insert_alltypes(conn, fresh_db)
        puller.wait_caught_up(30)
    finally:
        puller.stop()
    info = index.table_info_at(fresh_db, "alltypes", index.resolved_ts())
    txns = index.txns_between(start_ts, index.resolved_ts())
    decoded = [c.after for c in read_range(BinlogRange(cfg, 1102, txns[0].start, txns[-1].end,
                                                        tuple(t.commit_ts for t in txns),
                                                        {f"{fresh_db}.alltypes": info.to_json()}))]
    marker, rows = _read(cfg, info)
    assert marker[1] == str(info.version) and marker[2] == ""
    assert index.covers(__import__("sparkcdc.model.position", fromlist=["x"]).BinlogPosition.parse(marker[0]))
    assert sorted(rows, key=lambda r: int(r[COLUMN_NAMES.index("i")])) == \
        sorted(decoded, key=lambda r: int(r[COLUMN_NAMES.index("i")]))
    # The consistent snapshot's position is the binlog end after the last insert.
    assert index.ts_at_position(__import__("sparkcdc.model.position", fromlist=["x"]).BinlogPosition.parse(
        marker[0])) == txns[-1].commit_ts


KEY_TABLES = {
    # name: (CREATE TABLE body, rows generator)
    "ci": ("(k VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, v INT)",
           [(w, i) for i, w in enumerate(["a", "B", "c ", "D", "é", "F", "g", "Z", "zz", "😀", "A1", "ñ",
                                          "b2", "x", "Y", "_", "-", "0"])]),
    "composite": ("(a INT NOT NULL, b VARCHAR(5) COLLATE utf8mb4_unicode_ci NOT NULL, v INT, PRIMARY KEY (a, b))",
                  [(a, b, a) for a in range(-3, 4) for b in ("x", "Y", "z")]),
    "unsigned": ("(k BIGINT UNSIGNED NOT NULL PRIMARY KEY, v INT)",
                 [(k, 1) for k in (0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1, 5, 10**18)]),
    "signed": ("(k BIGINT NOT NULL PRIMARY KEY, v INT)", [(k, 1) for k in (-2**63, -1, 0, 1, 2**63 - 1, -5, 7)]),
    "dec": ("(k DECIMAL(20,5) NOT NULL PRIMARY KEY, v INT)",
            [(k, 1) for k in ("-99999.00001", "-0.00001", "0", "0.00001", "123456789012345.12345", "1.5", "-1.5")]),
    "dt": ("(k DATETIME(6) NOT NULL, u INT NOT NULL, v INT, PRIMARY KEY (k, u))",
           [(k, u, 1) for k in ("1000-01-01 00:00:00", "2024-02-29 23:59:59.999999", "9999-12-31 23:59:59.999999",
                                "2024-02-29 23:59:59.999998") for u in (1, 2)]),
    "bin": ("(k VARBINARY(8) NOT NULL PRIMARY KEY, v INT)",
            [(bytes([b]) * n, 1) for b in (0, 1, 127, 128, 255) for n in (1, 2)]),
    "fl": ("(k FLOAT NOT NULL PRIMARY KEY, v INT)", [(k, 1) for k in (3.3, -3.3, 0.1, 1e-10, 1e10, 2.5)]),
}


@pytest.mark.parametrize("name", sorted(KEY_TABLES))
def test_chunks_hold_every_row_once_for_every_key_kind(mariadb, fresh_db, name):
    body, rows = KEY_TABLES[name]
    conn = mariadb.connect(database=fresh_db)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t_{name} {body}")
        cur.executemany(f"INSERT INTO t_{name} VALUES ({', '.join(['%s'] * len(rows[0]))})", rows)
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    reader = connect_for_reads(cfg)
    info = read_table_info(reader, fresh_db, f"t_{name}", 1, 1)
    key = choose_chunk_key(info, table_indexes(reader, fresh_db, f"t_{name}"))
    assert key is not None and key.index == "PRIMARY"
    _, everything = _read(cfg, info)
    for size in (1, 2, 3):
        bounds, low = [], None
        while True:
            high = next_boundary(reader, info, key, low, size)
            bounds.append((low, high))
            if high is None:
                break
            low = high
        assert len(bounds) >= len(rows) // size
        seen = []
        for low, high in bounds:
            chunk = _read(cfg, info, key, low, high, batch_rows=2)[1]
            assert len(chunk) <= size, (low, high, chunk)
            seen.extend(chunk)
        assert sorted(seen) == sorted(everything), size
        assert len(seen) == len(rows)
    reader.close()


def test_a_wave_read_in_the_driver_gives_each_chunk_whole_and_in_the_waves_order(mariadb, fresh_db):
    """With a local master the driver reads a snapshot wave, a thread per chunk: the snapshot stage
    takes each chunk as its marker and then its rows, in the wave's order (`_pending_chunks`)."""
    from sparkcdc.model.change_batch import runs_of_equal
    from sparkcdc.pipeline.stream_reader import read_chunks_in_driver

    conn = mariadb.connect(database=fresh_db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE waves (id INT PRIMARY KEY, pad CHAR(100) NOT NULL)")
        cur.execute("INSERT INTO waves SELECT seq, REPEAT('p', 100) FROM seq_1_to_30000")
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    reader = connect_for_reads(cfg)
    info = read_table_info(reader, fresh_db, "waves", 1, 1)
    key = choose_chunk_key(info, table_indexes(reader, fresh_db, "waves"))
    bounds, low = [], None
    while low is not None or not bounds:
        high = next_boundary(reader, info, key, low, 7000)
        bounds.append((low, high))
        low = high
    reader.close()
    assert len(bounds) == 5
    reads = [ChunkRead(cfg, number, info.to_json(), key, low, high) for number, (low, high) in enumerate(bounds)]
    wave = read_chunks_in_driver(reads)
    numbers = wave["commit_ts"].to_numpy()
    runs = runs_of_equal(numbers)
    assert [int(numbers[first]) for first, _ in runs] == [0, 1, 2, 3, 4]
    ids = []
    for (first, last), read in zip(runs, reads):
        chunk = wave.slice(first, last - first)
        assert chunk["op"][0].as_py() == CHUNK_MARKER
        alone = pa.Table.from_batches(list(read_chunk_batches(read)))
        assert chunk.slice(1)["after"].to_pylist() == alone.slice(1)["after"].to_pylist()
        ids.extend(int(after[0]) for after in chunk.slice(1)["after"].to_pylist())
    assert ids == list(range(1, 30001))


def test_chunk_key_rules_and_privileges(mariadb, fresh_db):
    conn = mariadb.connect(database=fresh_db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT NOT NULL PRIMARY KEY, a INT NOT NULL, b INT, e ENUM('x','y') NOT NULL, "
                    "KEY ab (a, b), KEY e (e))")
        cur.execute("CREATE TABLE nokey (a INT, b INT)")
        cur.execute("CREATE USER IF NOT EXISTS snapreader@'127.0.0.1' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT SELECT ON `{fresh_db}`.`t` TO snapreader@'127.0.0.1'")
    reader = connect_for_reads(UpstreamConfig.from_uri(mariadb.uri))
    info = read_table_info(reader, fresh_db, "t", 1, 1)
    indexes = table_indexes(reader, fresh_db, "t")
    assert choose_chunk_key(info, indexes, ["a"]).index == "ab"
    with pytest.raises(ErrSnapshotChunkKeyInvalid, match=r"\(b\).*not the leading columns of any index"):
        choose_chunk_key(info, indexes, ["b"])
    with pytest.raises(ErrSnapshotChunkKeyInvalid, match="nullable"):
        choose_chunk_key(info, indexes, ["a", "b"])
    with pytest.raises(ErrSnapshotChunkKeyInvalid, match="ENUM"):
        choose_chunk_key(info, indexes, ["e"])
    nokey = read_table_info(reader, fresh_db, "nokey", 1, 1)
    assert choose_chunk_key(nokey, table_indexes(reader, fresh_db, "nokey")) is None
    limited = connect_for_reads(UpstreamConfig("127.0.0.1", mariadb.port, "snapreader", "pw"))
    check_readable(limited, info)
    with pytest.raises(ErrSnapshotTablePrivilege, match=r"GRANT SELECT ON `.*`\.`nokey`"):
        check_readable(limited, nokey)
    assert isinstance(nokey, TableInfo)


def test_native_reader_reads_what_pymysql_reads(mariadb, fresh_db, monkeypatch):
    """The native reader (native/src/text_rows.rs) gives exactly the rows pymysql's path gives:
    every column type it takes (all but FLOAT and DOUBLE, whose tables stay on pymysql's path),
    NULLs, binary bytes over 0x7F, values over 16 MB (a payload spread over packets) and batch cuts."""
    native = native_module()
    assert native is not None and hasattr(native, "TextRowReader"), "scripts/setup.sh builds native/"
    conn = mariadb.connect(database=fresh_db)
    create_alltypes(conn, fresh_db, rows=False)
    insert_alltypes(conn, fresh_db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT NOT NULL PRIMARY KEY, b LONGBLOB, t LONGTEXT)")
        # Row 1 is ~18 MB: its payload spans two packets (no single value may pass max_allowed_packet).
        cur.execute("INSERT INTO big VALUES (1, REPEAT(x'FE', 9 * 1024 * 1024), REPEAT('ü', 4608 * 1024)), "
                    "(2, NULL, REPEAT('é', 1000)), (3, x'00ff80', '')")
        cur.execute("INSERT INTO big SELECT seq, CONCAT('b', seq), NULL FROM seq_4_to_300")
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    reader = connect_for_reads(cfg)
    alltypes = read_table_info(reader, fresh_db, "alltypes", 1, 1)
    taken = replace(alltypes, columns=tuple(c for c in alltypes.columns if c.mysql_type not in ("float", "double")))
    assert native_modes(native, alltypes.columns) is None and native_modes(native, taken.columns) is not None
    for info in (taken, read_table_info(reader, fresh_db, "big", 1, 1)):
        marker, rows = _read(cfg, info, batch_rows=7)
        monkeypatch.setenv(FORCE_PURE_ENV, "1")
        assert native_modes(native_module(), info.columns) is None
        pure_marker, pure_rows = _read(cfg, info, batch_rows=7)
        monkeypatch.delenv(FORCE_PURE_ENV)
        assert len(rows) >= 3 and rows == pure_rows and marker[1:] == pure_marker[1:]
    assert rows[0][1] == "\u00fe" * (9 * 1024 * 1024) and rows[0][2] == "ü" * (4608 * 1024)
    assert rows[1][1] is None and rows[2][1] == "\x00\xff\x80"
    reader.close()


class _CuttingProxy:
    """A TCP proxy to the upstream that closes both sides once `cut_after` bytes of the server's
    answers have gone through: the upstream going away in the middle of a chunk's rows."""

    def __init__(self, port: int, cut_after: int):
        self._target, self._cut_after = ("127.0.0.1", port), cut_after
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            threading.Thread(target=self._pipe, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, self._cut_after), daemon=True).start()

    @staticmethod
    def _pipe(source, sink, cut_after) -> None:
        sent = 0
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                sent += len(data)
                if cut_after is not None and sent >= cut_after:
                    break
        except OSError:
            pass
        for side in (source, sink):
            try:
                side.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            side.close()

    def close(self) -> None:
        self._listener.close()


@pytest.mark.parametrize("reader", ["native", "pymysql"])
def test_an_upstream_lost_in_the_middle_of_a_chunk_is_a_retryable_upstream_error(mariadb, fresh_db, monkeypatch,
                                                                                 reader):
    """The snapshot of a changefeed whose primary dies during a chunk read waits for the upstream
    and goes on: the read's error is ErrUpstreamUnreachable, never a bare OSError (the native
    reader's), which the failure policy would take for one no retry fixes."""
    from sparkcdc.pipeline.failure import error_code, is_retryable_failure, is_upstream_failure

    if reader == "pymysql":
        monkeypatch.setenv(FORCE_PURE_ENV, "1")
    conn = mariadb.connect(database=fresh_db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE wide (id INT PRIMARY KEY, pad CHAR(200) NOT NULL)")
        cur.execute("INSERT INTO wide SELECT seq, REPEAT('w', 200) FROM seq_1_to_20000")
    info = read_table_info(conn, fresh_db, "wide", 1, 1)
    assert (native_modes(native_module(), info.columns) is None) == (reader == "pymysql")
    proxy = _CuttingProxy(mariadb.port, cut_after=1_000_000)  # of ~4 MB of rows
    try:
        cfg = UpstreamConfig.from_uri(f"mysql://root@127.0.0.1:{proxy.port}/")
        with pytest.raises(Exception) as raised:
            list(read_chunk_batches(ChunkRead(cfg, 0, info.to_json(), None, None, None)))
    finally:
        proxy.close()
    message = str(raised.value)
    assert error_code(message) == "SPARKCDC:ErrUpstreamUnreachable", message
    assert f"a chunk of `{fresh_db}`.`wide`" in message, message
    assert is_retryable_failure(message) and is_upstream_failure(message)
