"""Large transactions span several micro-batches, against a real MariaDB: the puller cuts them into
pieces, the planner ends batches inside them, each piece is decoded on its own (with the TABLE_MAP
events it needs), and the batch writer delivers every row to a real MySQL downstream and to the
file storage sink while the checkpoint never passes a transaction before its last piece."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from sparkcdc.cli.main import main
from sparkcdc.config.replica import ReplicaConfig, SinkConfig
from sparkcdc.consumer.storage_consumer import StorageConsumer
from sparkcdc.consumer.storage_reader import rebuild_tables
from sparkcdc.model.change_batch import RANGE_MARKER, batch_bounds
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.pipeline.planning import BatchOffset, RangePartition, SourceOptions, plan_next_batch, plan_partitions
from sparkcdc.pipeline.stream_reader import BinlogStreamReader
from sparkcdc.pipeline.transport import unpack_changes
from sparkcdc.sink.mysql.sink import MySQLSink
from sparkcdc.sink.storage import StorageSink
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

PIECE_BYTES = 128 << 10
_server_ids = itertools.count(7300)
TABLES = {
    "t": "CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL)",
    "u": "CREATE TABLE u (id INT PRIMARY KEY, v INT NOT NULL)",
}


def run(conn, *statements):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def insert_t(conn, first: int, count: int) -> None:
    filler = "0123456789-" * 20
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s)",
                        [(i, i % 977, filler[i % 11:i % 11 + 120], filler[:60]) for i in range(first, first + count)])


def rows_of(conn, table: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


@pytest.fixture
def upstream(mariadb, fresh_db, tmp_path):
    """(cfg, index, conn, txns) after the workload: small transactions around a 20k-row insert
    transaction (with a second table's rows between its statements), a 5k-row multi-table UPDATE
    (two TABLE_MAPs in force at every cut) and a 4k-row UPDATE of one statement."""
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    conn = mariadb.connect(database=fresh_db)
    run(conn, *TABLES.values())
    puller = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2, piece_bytes=PIECE_BYTES).start()
    try:
        puller.wait_caught_up(20)
        run(conn, "INSERT INTO u VALUES (1, 1)")
        run(conn, "BEGIN")
        for chunk in range(10):
            insert_t(conn, chunk * 2000 + 1, 2000)
            run(conn, f"INSERT INTO u VALUES ({chunk + 100}, {chunk})")
        run(conn, "COMMIT")
        run(conn, "INSERT INTO u VALUES (2, 2)")
        run(conn, "UPDATE t JOIN u ON u.id = 1 SET t.k = t.k + 1, u.v = u.v + 10 WHERE t.id <= 5000")
        run(conn, "UPDATE t SET c = REVERSE(c), k = k + 7 WHERE id > 16000")
        run(conn, "DELETE FROM u WHERE id = 2")
        puller.wait_caught_up(60)
    finally:
        puller.stop()
    assert puller.error is None
    txns = index.txns_between(index.first_ts(), index.resolved_ts())
    yield cfg, index, conn, txns
    conn.close()


def source_options(mariadb, index) -> SourceOptions:
    return SourceOptions(index_path=index.path, upstream_uri=mariadb.uri, start_ts=index.first_ts(),
                         server_id_base=next(_server_ids) * 10, max_batch_bytes=PIECE_BYTES, parallelism=2)


def read_batch(index, options, start: BatchOffset, end: BatchOffset) -> pa.Table:
    """The batch's rows as foreachBatch gets them: every partition's output, unpacked."""
    reader = BinlogStreamReader(options)
    batches = [b for p in plan_partitions(index, options, start, end, set()) for b in reader.read(p)]
    return unpack_changes(pa.Table.from_batches(batches))


def test_pieces_are_planned_decoded_and_ordered_like_the_whole_transaction(mariadb, upstream):
    cfg, index, conn, txns = upstream
    split = [t for t in txns if t.piece_count > 1]
    assert [round(t.size / PIECE_BYTES) >= 8 for t in split] == [True, True, True]
    options = source_options(mariadb, index)
    tables = {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(index.first_ts())}
    multi_table = split[1]
    assert all(len(p.table_maps) == 2 for p in multi_table.pieces)  # t and u, both read before the piece

    start, batches = BatchOffset(index.first_ts()), []
    while (end := plan_next_batch(index, start, 0, PIECE_BYTES)[0]).key() > start.key():
        batches.append((start, end, read_batch(index, options, start, end)))
        start = end
    assert start == BatchOffset(index.resolved_ts())

    for txn in split:
        inside = [(s, e, table) for s, e, table in batches
                  if s.key() < BatchOffset(txn.commit_ts).key() and e.key() > BatchOffset(txn.commit_ts - 1).key()]
        assert len(inside) >= txn.piece_count // 2, "a split transaction is spread over several batches"
        for s, e, table in inside:
            # The bounds the sink checkpoints: never T until the batch holding T's last piece.
            assert batch_bounds(table) == (s.checkpoint_ts, e.checkpoint_ts)
            assert e.checkpoint_ts < txn.commit_ts or e == BatchOffset(txn.commit_ts) or e.ts > txn.commit_ts
        pieces = pa.concat_tables([table for _, _, table in inside])
        mine = pieces.filter(pa.compute.and_(pa.compute.equal(pieces["commit_ts"], txn.commit_ts),
                                             pa.compute.not_equal(pieces["op"], RANGE_MARKER)))
        seq = mine["seq"].to_pylist()
        assert seq == sorted(seq) and len(set(seq)) == len(seq), "seq grows across the batches"
        whole = BinlogRange(cfg, next(_server_ids), txn.start, txn.end, (txn.commit_ts,), tables)
        expected = [(c.schema, c.table, c.op, c.before, c.after) for c in read_range(whole)]
        got = [(r["schema_name"], r["table_name"], r["op"], None if r["before"] is None else tuple(r["before"]),
                None if r["after"] is None else tuple(r["after"])) for r in mine.to_pylist()]
        assert got == expected
        assert len(expected) in (20010, 5001, 4000)


def test_split_transactions_reach_mysql_and_storage_with_a_restart_mid_transaction(
        mariadb, mariadb_factory, upstream, fresh_db, tmp_path):
    cfg, index, conn, txns = upstream
    downstream, consumed = mariadb_factory(), mariadb_factory()
    for server in (downstream, consumed):
        with server.connect() as setup, setup.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{fresh_db}`")
            for ddl in TABLES.values():
                cur.execute(ddl.replace("CREATE TABLE ", f"CREATE TABLE `{fresh_db}`."))
    root = tmp_path / "storage"
    storage_uri = f"file://{root}?protocol=canal-json&enable-tidb-extension=true"
    # A long-running consumer (as `sparkcdc consumer storage` builds it): a round at the crash,
    # one at the end; it must write the transaction its files repeat idempotently.
    consumer_sink = MySQLSink(consumed.uri, ReplicaConfig())
    consumer = StorageConsumer(storage_uri, consumer_sink, "canal-json")
    options = source_options(mariadb, index)
    split = {t.commit_ts: t for t in txns if t.piece_count > 1}
    checkpoints: list[int] = []

    def open_sinks():
        mysql = MySQLSink(downstream.uri, ReplicaConfig(), replicating_ts=index.resolved_ts())
        return mysql, StorageSink(storage_uri, SinkConfig(protocol="canal-json", enable_tidb_extension=True))

    def run_batches(start: BatchOffset, sinks, stop_inside: int | None = None) -> BatchOffset:
        while (end := plan_next_batch(index, start, 0, PIECE_BYTES)[0]).key() > start.key():
            table = read_batch(index, options, start, end)
            for sink in sinks:
                write_batch(table, index, sink, lambda schema, name: True, checkpoints.append)
            start = end
            if stop_inside is not None and end.ts == stop_inside and end.piece >= 3:
                return start  # "crash" after a batch that ended inside the transaction
        return start

    big = min(split)
    sinks = open_sinks()
    crashed_at = run_batches(BatchOffset(index.first_ts()), sinks, stop_inside=big)
    assert crashed_at.piece >= 3 and checkpoints[-1] == big - 1
    # Storage readers at the checkpoint see none of the unfinished transaction.
    assert len(rebuild_tables(str(root), "canal-json").get((fresh_db, "t"), {})) == 0
    consumer.sync_once()
    with consumed.connect(database=fresh_db) as down:
        assert rows_of(down, "t") == [] and rows_of(down, "u") == [(1, 1)]
    for sink in sinks:
        sink.close()

    # The restart begins at the checkpoint: the transaction again from its first piece.
    restart = BatchOffset(checkpoints[-1])
    first = plan_partitions(index, options, restart, plan_next_batch(index, restart, 0, PIECE_BYTES)[0], set())
    assert [p.binlog_range.piece for p in first if isinstance(p, RangePartition)] == [0]
    sinks = open_sinks()
    assert run_batches(restart, sinks) == BatchOffset(index.resolved_ts())
    for sink in sinks:
        sink.close()

    assert checkpoints == sorted(checkpoints) and checkpoints[-1] == index.resolved_ts()
    for ts in split:  # between a split transaction's batches the checkpoint stays below it
        assert ts - 1 in checkpoints
    assert consumer.sync_once() == index.resolved_ts()
    consumer_sink.close()
    # And the command, from the start: everything again, idempotently.
    assert main(["consumer", "storage", "--upstream-uri", storage_uri, "--downstream-uri", consumed.uri, "--once",
                 "--checkpoint-file", str(tmp_path / "consumer-checkpoint")]) == 0
    for server in (downstream, consumed):
        with server.connect(database=fresh_db) as down:
            for name in TABLES:
                assert rows_of(down, name) == rows_of(conn, name), (server, name)
    stored = rebuild_tables(str(root), "canal-json")
    for name in TABLES:
        upstream_rows = {str(r[0]): [str(v) for v in r] for r in rows_of(conn, name)}
        got = {key[0]: [row[c] for c in row] for key, row in stored[(fresh_db, name)].items()}
        assert got == upstream_rows, name
