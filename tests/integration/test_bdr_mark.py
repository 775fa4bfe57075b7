"""Bidirectional replication's two ends against a real MariaDB: a bdr-mode MySQL sink marks what it
writes, the puller indexes it marked, and a bdr-mode changefeed's planned ranges decode only the
upstream's own rows; the creation check refuses a downstream user who cannot write the tables, and
checks without writing a binlog event."""

from __future__ import annotations

import time

import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.errors import ErrBDRDownstreamPrivilege
from sparkcdc.model import tso
from sparkcdc.model.events import DDLEvent, RowChange
from sparkcdc.pipeline.planning import RangePartition, SourceOptions, plan_partitions
from sparkcdc.sink.mysql.bdr import check_bdr_downstream
from sparkcdc.sink.mysql.sink import MySQLSink
from sparkcdc.sink.registry import parse_sink_spec
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream.range_reader import read_range
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

BDR = parse_replica_config("bdr-mode = true")


def run(conn, *statements):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def binlog_end(conn) -> tuple:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        return cur.fetchone()[:2]


def test_a_bdr_sinks_writes_are_indexed_marked_and_a_bdr_changefeed_reads_around_them(mariadb, fresh_db, tmp_path):
    conn = mariadb.connect(database=fresh_db)
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = Puller(UpstreamConfig.from_uri(mariadb.uri), index, 3101, heartbeat_seconds=0.2).start()
    try:
        puller.wait_caught_up(30)
        first = index.resolved_ts()
        run(conn, "INSERT INTO t VALUES (1, 1)")  # the upstream's own write
        # What the other direction's sink writes into this primary: rows, then a DDL.
        sink = MySQLSink(parse_sink_spec(mariadb.uri, BDR).settings, BDR)
        try:
            info = index.table_info_at(fresh_db, "t", index.resolved_ts())
            now = tso.compose(int(time.time() * 1000))
            sink.write_rows(info, [RowChange(now, fresh_db, "t", "insert", after=("2", "2")),
                                   RowChange(now, fresh_db, "t", "insert", after=("3", "3"), seq=1)])
            sink.flush()
            sink.write_ddl(DDLEvent(now + 1, fresh_db, "t", "ALTER TABLE t ADD COLUMN w INT NULL", "add column",
                                    extra={"default_schema": fresh_db}))
        finally:
            sink.close()
        run(conn, "INSERT INTO t VALUES (4, 4, 4)", "BEGIN", "UPDATE t SET v = 5 WHERE id = 2", "COMMIT")
        puller.wait_caught_up(30)
    finally:
        puller.stop()
    assert puller.error is None
    resolved = index.resolved_ts()
    txns = index.txns_between(first, resolved)
    assert [(t.is_ddl, t.skip_replication) for t in txns] == [
        (False, False), (False, True), (True, True), (False, False), (False, False)]
    ddl_ts = txns[2].commit_ts
    assert index.marked_between(first, resolved) == {txns[1].commit_ts, ddl_ts}

    def decoded(bdr_mode: bool, start: int, end: int) -> list[tuple]:
        options = SourceOptions(index_path=index.path, upstream_uri=mariadb.uri, start_ts=first,
                                server_id_base=3200, filter_rules=(f"{fresh_db}.*",), bdr_mode=bdr_mode)
        partitions = plan_partitions(index, options, start, end, set())
        return [(row.op, row.after) for partition in partitions if isinstance(partition, RangePartition)
                for row in read_range(partition.binlog_range)]

    # The batches a DDL cuts: before it, and after it.
    assert decoded(True, first, ddl_ts) == [("insert", ("1", "1"))]
    assert decoded(True, ddl_ts, resolved) == [("insert", ("4", "4", "4")), ("update", ("2", "5", None))]
    assert decoded(False, first, ddl_ts) == [("insert", ("1", "1")), ("insert", ("2", "2")), ("insert", ("3", "3"))]


def test_the_bdr_check_refuses_a_user_who_cannot_write_and_writes_no_binlog(mariadb, fresh_db, tmp_path):
    conn = mariadb.connect(database=fresh_db)
    user = f"bdr_{fresh_db}"
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE u (id INT PRIMARY KEY)",
        f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'", f"GRANT SELECT, INSERT ON `{fresh_db}`.* TO '{user}'@'%'")
    try:
        index = TxnIndex(str(tmp_path / "index.sqlite"))
        puller = Puller(UpstreamConfig.from_uri(mariadb.uri), index, 3102, heartbeat_seconds=0.2).start()
        try:
            puller.wait_caught_up(30)
            tables = [index.table_info_at(fresh_db, name, index.resolved_ts()) for name in ("t", "u")]
        finally:
            puller.stop()
        run(conn, "DROP TABLE u")  # replicated, but not downstream (yet)
        uri = f"mysql://{user}:pw@127.0.0.1:{mariadb.port}/"
        settings = parse_sink_spec(uri, BDR).settings
        before = binlog_end(conn)
        with pytest.raises(ErrBDRDownstreamPrivilege) as info:
            check_bdr_downstream(settings, tables)
        assert binlog_end(conn) == before  # the check wrote nothing, marked or not
        message = info.value.message
        # The grants are per database: the missing table needs them too, once it is created.
        assert f"{fresh_db}.t (DELETE command denied" in message and f"{fresh_db}.u (DELETE command denied" in message
        assert f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{fresh_db}`.* TO <user>" in message and "pw" not in message
        run(conn, f"GRANT UPDATE, DELETE ON `{fresh_db}`.* TO '{user}'@'%'")
        before = binlog_end(conn)
        check_bdr_downstream(settings, tables)  # u, which the user could now write, is not there to try
        assert binlog_end(conn) == before
    finally:
        run(conn, f"DROP USER '{user}'@'%'")
