"""The binlog puller and the range reader against a MariaDB that restarts, kills their
connections, purges its binlog and writes events they cannot read (upstream/puller.py)."""

from __future__ import annotations

import itertools
import re
import threading
import time

import pyarrow as pa
import pymysql
import pytest

from sparkcdc.errors import ErrBinlogPurged, ErrBinlogUnsupportedEvent, ErrUpstreamUnreachable
from sparkcdc.testing.ha import wait_until
from sparkcdc.testing.mariadb import binlog_gtids
from sparkcdc.upstream.connection import UpstreamConfig, check_binlog_retained
from sparkcdc.upstream.puller import FAILED, RECONNECTING, RUNNING, Puller
from sparkcdc.upstream import range_reader
from sparkcdc.upstream.native_decode import native_module
from sparkcdc.upstream.range_reader import BinlogRange, has_native_framer, read_range_batches
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

_server_ids = itertools.count(4100)
_databases = itertools.count()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A MariaDB of this module's own: the tests stop it, purge its binlog and compress events."""
    from sparkcdc.testing.mariadb import MariaDBServer

    server = MariaDBServer(str(tmp_path_factory.mktemp("restartable"))).start()
    yield server
    server.stop()


@pytest.fixture
def database(upstream):
    name = f"sup{next(_databases)}"
    conn = upstream.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
        cur.execute(f"CREATE TABLE {name}.t (id INT PRIMARY KEY, v VARCHAR(200))")
    conn.close()
    return name


def start_puller(upstream, tmp_path, name="index") -> tuple[Puller, TxnIndex]:
    index = TxnIndex(str(tmp_path / f"{name}.sqlite"))
    puller = Puller(UpstreamConfig.from_uri(upstream.uri), index, next(_server_ids), heartbeat_seconds=0.2).start()
    puller.wait_caught_up(30)
    return puller, index


def write(upstream, database, ids) -> None:
    conn = upstream.connect()
    with conn.cursor() as cur:
        for i in ids:
            cur.execute(f"INSERT INTO {database}.t VALUES (%s, %s)", (i, f"row {i}"))
    conn.close()


def indexed_gtids(index: TxnIndex) -> list[str]:
    return [txn.gtid for txn in index.txns_between(0, index.resolved_ts())]


def test_the_puller_reconnects_after_a_kill_and_a_restart_and_indexes_every_transaction_once(
        upstream, database, tmp_path):
    puller, index = start_puller(upstream, tmp_path)
    start = index.start_position()
    try:
        write(upstream, database, range(0, 5))
        # A real KILL of its replication connection: it reconnects by itself, still running.
        conn = upstream.connect()
        with conn.cursor() as cur:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
            dumps = [row[0] for row in cur.fetchall()]
            assert len(dumps) == 1, dumps
            cur.execute(f"KILL {dumps[0]}")
        conn.close()
        write(upstream, database, range(5, 10))
        puller.wait_caught_up(30)
        assert puller.health().state == RUNNING

        # Stopped: it reconnects with the upstream named, masked; started: it goes on at once.
        upstream.stop()
        health = wait_until(lambda: (h := puller.health()).state == RECONNECTING and h, 10, "the puller to notice")
        assert isinstance(health.problem, ErrUpstreamUnreachable)
        assert f"127.0.0.1:{upstream.port}" in health.problem.message and health.problem.retryable
        connects = health.connects
        time.sleep(3)
        assert puller.health().state == RECONNECTING
        upstream.start()
        back = time.monotonic()
        wait_until(lambda: puller.health().state == RUNNING, 10, "the puller to reconnect")
        assert time.monotonic() - back < 5 and puller.health().connects == connects + 1
        write(upstream, database, range(10, 15))
        puller.wait_caught_up(30)
    finally:
        puller.stop()
    assert indexed_gtids(index) == binlog_gtids(upstream.connect(), start), "every transaction indexed once, in order"


def test_an_unsupported_event_stops_the_puller_with_its_error(upstream, database, tmp_path):
    puller, _ = start_puller(upstream, tmp_path)
    conn = upstream.connect()
    try:
        with conn.cursor() as cur:
            # A compressed event (MariaDB's log_bin_compress): a real event type the puller cannot read.
            cur.execute("SET GLOBAL log_bin_compress = ON")
            cur.execute("SET GLOBAL log_bin_compress_min_len = 10")
            other = upstream.connect()
            with other.cursor() as writer:
                writer.execute(f"INSERT INTO {database}.t VALUES (1, %s)", ("x" * 150,))
            other.close()
            cur.execute("SET GLOBAL log_bin_compress = OFF")
        health = wait_until(lambda: (h := puller.health()).state == FAILED and h, 15, "the puller to stop")
        assert isinstance(health.problem, ErrBinlogUnsupportedEvent)
        assert "log_bin_compress=OFF" in health.problem.message
        assert puller.error is health.problem
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL log_bin_compress = OFF")
            cur.execute("FLUSH BINARY LOGS")  # later tests index from here on
        conn.close()
        puller.stop()


def indexed_range(upstream, database, tmp_path, rows: int) -> tuple[TxnIndex, BinlogRange]:
    """`rows` inserted and indexed (the puller stopped again), and the binlog range of them."""
    puller, index = start_puller(upstream, tmp_path)
    write(upstream, database, range(rows))
    puller.wait_caught_up(30)
    puller.stop()
    txns = index.txns_between(0, index.resolved_ts())
    return index, BinlogRange(
        UpstreamConfig.from_uri(upstream.uri), next(_server_ids), txns[0].start, txns[-1].end,
        tuple(t.commit_ts for t in txns), {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(txns[-1].commit_ts)})


def test_a_purged_binlog_is_a_coded_error_naming_the_oldest_position(upstream, database, tmp_path):
    index, rng = indexed_range(upstream, database, tmp_path, 3)
    cfg = rng.upstream
    current = upstream.purge_binlogs()

    # A changefeed's start at a purged checkpoint (the runner checks before a query starts).
    with pytest.raises(ErrBinlogPurged) as raised:
        check_binlog_retained(cfg, rng.start, "changefeed default/cf at checkpoint 1")
    assert f"the binlog from {rng.start} is no longer on upstream mysql://root@127.0.0.1:{upstream.port}/" \
        in raised.value.message
    assert f"the oldest binlog it still has begins at {current}:4" in raised.value.message
    assert re.search(r"--overwrite-checkpoint-ts \d+-\d+-\d+`", raised.value.message), raised.value.message

    # A Spark task reading a purged range: the server's error 1236, said the same way.
    with pytest.raises(ErrBinlogPurged, match=rf"oldest binlog it still has begins at {current}:4"):
        list(read_range_batches(rng))

    # The puller's own position is gone: it stops for good with the same code.
    write(upstream, database, range(3, 6))
    restarted = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2).start()
    try:
        health = wait_until(lambda: (h := restarted.health()).state == FAILED and h, 15, "the puller to stop")
        assert isinstance(health.problem, ErrBinlogPurged) and "txn-index.sqlite" in health.problem.message
    finally:
        restarted.stop()


def test_a_range_read_waits_for_a_restarting_upstream_and_names_it_when_it_stays_down(
        upstream, database, tmp_path, monkeypatch):
    _, rng = indexed_range(upstream, database, tmp_path, 3)
    expected = pa.Table.from_batches(read_range_batches(rng))
    assert expected.num_rows == 3
    upstream.stop()
    try:
        if has_native_framer(native_module()):  # the native framer waits for a restarting upstream
            restart = threading.Timer(2.0, upstream.start)
            restart.start()
            assert pa.Table.from_batches(read_range_batches(rng)).equals(expected)
            restart.join()
            upstream.stop()
            monkeypatch.setattr(range_reader, "UPSTREAM_WAIT_SECONDS", 1.0)
        with pytest.raises(ErrUpstreamUnreachable, match=rf"upstream mysql://root@127.0.0.1:{upstream.port}/") as raised:
            list(read_range_batches(rng))
        assert isinstance(raised.value.__cause__, (pymysql.err.OperationalError, OSError))
    finally:
        upstream.start()
