"""Back-filling the transaction index from a position before the server first started, against a
real MariaDB (upstream/backfill.py, issue 19 item 6): the schema at that point from the binlog's
TABLE_MAP events and the index's own start, and a purged start refused with its fix."""

from __future__ import annotations

import itertools
import time

import pytest

from sparkcdc.errors import ErrBinlogPurged
from sparkcdc.model import tso
from sparkcdc.model.position import BinlogPosition
from sparkcdc.testing.alltypes import create_alltypes
from sparkcdc.testing.mariadb import MariaDBServer, binlog_gtids
from sparkcdc.upstream.backfill import Backfill
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller, binlog_stream
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.schema_reader import read_table_info
from sparkcdc.upstream.table_map import table_def_from_table_map
from sparkcdc.upstream.txn_index import StartBeforeIndex, TxnIndex

pytestmark = pytest.mark.integration

_server_ids = itertools.count(4700)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """This module's own server: a test purges its binlog."""
    server = MariaDBServer(str(tmp_path_factory.mktemp("backfill"))).start()
    yield server
    server.stop()


def run(conn, *statements):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def binlog_at(conn) -> tuple[str, BinlogPosition]:
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return gtid, BinlogPosition(row[0], int(row[1]))


def test_a_table_map_describes_every_column_type_as_information_schema_does(upstream):
    conn = upstream.connect()
    run(conn, "CREATE DATABASE tm", "CREATE TABLE tm.g (id INT PRIMARY KEY, p POINT, shape GEOMETRY)",
        "INSERT INTO tm.g VALUES (1, POINT(1, 2), POINT(3, 4))")
    _, before = binlog_at(conn)
    create_alltypes(conn, "tm")
    run(conn, "INSERT INTO tm.g VALUES (2, POINT(5, 6), POINT(7, 8))")
    maps = {}
    stream = binlog_stream(UpstreamConfig.from_uri(upstream.uri), next(_server_ids), 0.5, before)
    try:
        while len(maps) < 2:
            event = stream.fetchone()
            if type(event).__name__ == "TableMapEvent":
                maps[event.table] = table_def_from_table_map(event).info(0)
    finally:
        stream.close()
    for table in ("alltypes", "g"):
        expected = read_table_info(conn, "tm", table, 0, 0)
        got = maps[table]
        assert got.handle_key == expected.handle_key
        for mine, theirs in zip(got.columns, expected.columns):
            if theirs.mysql_type == "json":  # MariaDB's JSON is a LONGTEXT with a CHECK: the binlog says LONGTEXT
                assert (mine.mysql_type, mine.charset) == ("longtext", "utf8mb4")
                continue
            assert mine == type(mine)(**{**theirs.__dict__, "default": None}), theirs.name
    conn.close()


def test_the_index_is_back_filled_from_a_gtid_and_a_position_before_it_with_the_schema_of_then(upstream, tmp_path):
    cfg = UpstreamConfig.from_uri(upstream.uri)
    conn = upstream.connect()
    run(conn, "CREATE DATABASE bf",
        "CREATE TABLE bf.kept (id INT PRIMARY KEY, code VARCHAR(10) NOT NULL, UNIQUE KEY (code))",
        "CREATE TABLE bf.keyless (code VARCHAR(10) NOT NULL, n INT, UNIQUE KEY (code))",
        "CREATE TABLE bf.altered (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO bf.kept VALUES (1, 'a')", "INSERT INTO bf.altered VALUES (1, 'x')")
    time.sleep(1.1)  # the dump's commit-ts is in a later second than the transactions above
    dump_gtid, dump_position = binlog_at(conn)
    run(conn, "INSERT INTO bf.kept VALUES (2, 'b')", "INSERT INTO bf.keyless VALUES ('k', 1)",
        "INSERT INTO bf.altered VALUES (2, 'y')", "ALTER TABLE bf.altered ADD COLUMN extra INT DEFAULT 7",
        "INSERT INTO bf.altered VALUES (3, 'z', 8)", "CREATE TABLE bf.made (id INT PRIMARY KEY)",
        "INSERT INTO bf.made VALUES (1)")
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2).start()
    try:
        puller.wait_caught_up(30)
        run(conn, "INSERT INTO bf.kept VALUES (3, 'c')")
        puller.wait_caught_up(30)
        index_start, first_ts = index.start_position(), index.first_ts()
        with pytest.raises(StartBeforeIndex) as before:
            index.resolve_start(dump_gtid)
        added = Backfill(cfg, index, next(_server_ids)).run(before.value)
        start_ts = index.resolve_start(dump_gtid)
        assert start_ts == index.first_ts() < first_ts and index.resolve_start(str(dump_position)) == start_ts
        # Every transaction of the binlog from the dump's position, once, in order, and their ranges.
        txns = index.txns_between(start_ts, index.resolved_ts())
        assert [t.gtid for t in txns] == binlog_gtids(conn, dump_position) and added == 7
        assert txns[added - 1].end.key() <= index_start.key() and txns[added].commit_ts > first_ts
        assert all(a.commit_ts < b.commit_ts for a, b in zip(txns, txns[1:]))
        assert str(index.gtid_state_at(start_ts)) == dump_gtid

        # The schema then: kept and keyless as the index's start read them (exact, with their
        # unique keys), altered from its TABLE_MAP (its primary key, no unique key), made absent.
        at_start = {t.table: t for t in index.tables_at(start_ts) if t.schema == "bf"}
        assert set(at_start) == {"kept", "keyless", "altered"}
        assert at_start["keyless"].handle_key == ("code",) and at_start["kept"].column("code").is_unique_key
        assert at_start["altered"].column_names == ("id", "v") and at_start["altered"].handle_key == ("id",)
        alter_ts = next(d.commit_ts for d in index.ddls_between(start_ts, first_ts) if d.table == "altered")
        assert index.table_info_at("bf", "altered", alter_ts).column_names == ("id", "v", "extra")
        assert index.table_info_at("bf", "made", first_ts - 1).column_names == ("id",)

        # The back-filled ranges decode with those versions.
        dml = [t for t in txns[:added] if not t.is_ddl]
        rows = []
        for txn in dml:
            tables = {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(txn.commit_ts - 1)}
            rows += list(read_range(BinlogRange(cfg, next(_server_ids), txn.start, txn.end, (txn.commit_ts,), tables)))
        assert [(r.table, r.after) for r in rows] == [
            ("kept", ("2", "b")), ("keyless", ("k", "1")), ("altered", ("2", "y")), ("altered", ("3", "z", "8")),
            ("made", ("1",))]

        # A TSO before the back-filled start (a second before it): from the start of the binlog
        # file it falls in, with the tables as the DDLs since then created them.
        earlier = tso.compose(tso.physical_ms(start_ts) - 1000)
        with pytest.raises(StartBeforeIndex) as by_ts:
            index.resolve_start(str(earlier))
        Backfill(cfg, index, next(_server_ids)).run(by_ts.value)
        assert index.resolve_start(str(earlier)) == earlier and index.start_position().pos == 4
        again = index.resolve_start(dump_gtid)  # its last transaction now, and nothing between
        assert again <= start_ts and not index.txns_between(again, start_ts)
        assert index.table_info_at("bf", "kept", start_ts - 1)
        everything = index.txns_between(0, index.resolved_ts())
        assert [t.gtid for t in everything] == binlog_gtids(conn, index.start_position())

        # A start the upstream no longer has: its oldest binlog and the fix, for the index of a
        # server started after the purge.
        oldest = upstream.purge_binlogs()
        fresh = TxnIndex(str(tmp_path / "fresh.sqlite"))
        later = Puller(cfg, fresh, next(_server_ids), heartbeat_seconds=0.2).start()
        try:
            later.wait_caught_up(30)
            with pytest.raises(StartBeforeIndex) as purged_start:
                fresh.resolve_start(dump_gtid)
        finally:
            later.stop()
        with pytest.raises(ErrBinlogPurged) as purged:
            Backfill(cfg, fresh, next(_server_ids)).run(purged_start.value)
        message = str(purged.value)
        assert f"its oldest binlog {oldest} begins after GTIDs" in message and '[snapshot] mode = "initial"' in message
    finally:
        puller.stop()
        conn.close()
