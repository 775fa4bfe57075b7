"""The MySQL sink re-runs the upstream's foreign-key cascades (sink/mysql/foreign_keys.py), against
real MariaDB: TiCDC's foreign_key cases run on an upstream database define the expected tables;
their row events, as MariaDB's binlog records them (the parent's changes only, a per-event
foreign_key_checks flag), go through `write_ordered` into a downstream database that holds the
same constraints. Also: a replay (same changefeed) changes nothing, safe mode never deletes a
parent row (REPLACE would cascade), and a DDL that adds a cascading key moves its tables to the
ordered path."""

from __future__ import annotations

import itertools
import os

import pytest

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.model.events import FK_CHECKS_OFF, FK_CHECKS_ON, OrderedTransaction, RowChange
from sparkcdc.sink.mysql.sink import MySQLSink
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.upstream.schema_reader import read_table_info
from test_mysql_sink import FAST_RETRY, ddl, ts  # the MySQL sink tests' helpers

pytestmark = pytest.mark.integration

TABLES = [
    "CREATE TABLE t1 (id INT PRIMARY KEY)",
    "CREATE TABLE t2 (id INT PRIMARY KEY, CONSTRAINT fk_1 FOREIGN KEY (id) REFERENCES t1 (id) "
    "ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE t3 (id INT PRIMARY KEY)",
    "CREATE TABLE t4 (id INT PRIMARY KEY, b INT, INDEX idx (b), CONSTRAINT fk_2 FOREIGN KEY (b) REFERENCES t3 (id) "
    "ON DELETE SET NULL ON UPDATE SET NULL)",
    "CREATE TABLE t9 (id INT PRIMARY KEY, name VARCHAR(10), leader INT, INDEX (leader), "
    "CONSTRAINT fk_5 FOREIGN KEY (leader) REFERENCES t9 (id) ON DELETE CASCADE)",
    "CREATE TABLE t10 (id INT PRIMARY KEY, b INT, INDEX (b))",
    "CREATE TABLE t11 (id INT PRIMARY KEY, b INT, INDEX (b))",
]
T9_ROWS = [(1, "boss", None), (10, "l1_a", 1), (11, "l1_b", 1), (12, "l1_c", 1), (100, "l2_a1", 10),
           (101, "l2_a2", 10), (110, "l2_b1", 11), (120, "l2_c1", 12), (1000, "l3_a1", 100)]


def run_upstream(conn, database: str) -> None:
    """TiCDC's foreign_key statements that this test replays (prepare.sql, t1-t4, t9-t11)."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"USE `{database}`")
        for create in TABLES:
            cur.execute(create)
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t1 VALUES (1), (2), (3), (4), (5)")
        cur.execute("INSERT INTO t2 VALUES (1), (2), (3), (4), (5)")
        cur.execute("DELETE FROM t1 WHERE id IN (1, 2)")
        cur.execute("UPDATE t1 SET id = id + 10 WHERE id = 3")
        cur.execute("COMMIT")
        cur.execute("SET foreign_key_checks = 0")
        cur.execute("DELETE FROM t1 WHERE id = 4")
        cur.execute("SET foreign_key_checks = 1")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t3 VALUES (1), (2), (3), (4), (5)")
        cur.execute("INSERT INTO t4 VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)")
        cur.execute("DELETE FROM t3 WHERE id IN (1, 2)")
        cur.execute("UPDATE t3 SET id = id + 10 WHERE id = 3")
        cur.execute("COMMIT")
        cur.executemany("INSERT INTO t9 VALUES (%s, %s, %s)", T9_ROWS)
        cur.execute("DELETE FROM t9 WHERE id = 1")
        cur.execute("INSERT INTO t10 VALUES (1, 1), (2, 2), (3, 3)")
        cur.execute("INSERT INTO t11 VALUES (1, 1), (2, 2), (3, 3)")
        cur.execute("ALTER TABLE t11 ADD CONSTRAINT fk_6 FOREIGN KEY (b) REFERENCES t10 (id) "
                    "ON DELETE CASCADE ON UPDATE CASCADE")
        cur.execute("DELETE FROM t10 WHERE id = 1")
        cur.execute("UPDATE t10 SET id = id + 10 WHERE id = 2")


class Binlog:
    """Row events as MariaDB's binlog has them, grouped in transactions."""

    def __init__(self, infos: dict):
        self.infos = infos
        self.transactions: list[OrderedTransaction] = []
        self._number = itertools.count(10)

    def txn(self, *events, checks: str = FK_CHECKS_ON) -> None:
        number = next(self._number)
        changes = []
        for seq, (table, op, before, after) in enumerate(events):
            info = self.infos[table]
            image = (lambda values: None if values is None else tuple(None if v is None else str(v) for v in values))
            changes.append((info, RowChange(ts(number), info.schema, table, op, image(before), image(after), seq)))
        self.transactions.append(OrderedTransaction(ts(number), f"mysql-bin.000001:{number * 1000}", checks,
                                                    tuple(changes)))


def ins(table, *values):
    return (table, "insert", None, values)


def dele(table, *values):
    return (table, "delete", values, None)


def upd(table, before, after):
    return (table, "update", before, after)


def binlog_before_t11_key(infos) -> Binlog:
    log = Binlog(infos)
    log.txn(*[ins("t1", i) for i in range(1, 6)], *[ins("t2", i) for i in range(1, 6)],
            dele("t1", 1), dele("t1", 2), upd("t1", (3,), (13,)))
    log.txn(dele("t1", 4), checks=FK_CHECKS_OFF)
    log.txn(*[ins("t3", i) for i in range(1, 6)], *[ins("t4", i, i) for i in range(1, 6)],
            dele("t3", 1), dele("t3", 2), upd("t3", (3,), (13,)))
    log.txn(*[ins("t9", *row) for row in T9_ROWS])
    log.txn(dele("t9", *T9_ROWS[0]))
    return log


@pytest.fixture(scope="module")
def expected(mariadb):
    database = f"fk_up_{os.getpid()}"
    conn = mariadb.connect()
    run_upstream(conn, database)
    tables = {name: read_upstream_table(conn, database, name) for name in ("t1", "t2", "t3", "t4", "t9", "t10", "t11")}
    conn.close()
    assert tables["t2"] and tables["t4"] and not tables["t9"]
    return tables


def open_sink(server, changefeed: str, query: str = "") -> MySQLSink:
    uri = server.uri.replace("root@", "root:@") + "?worker-count=4" + ("&" + query if query else "")
    return MySQLSink(uri, ReplicaConfig(), retry=FAST_RETRY, ddl_retry=FAST_RETRY, changefeed=changefeed)


def create_downstream(sink: MySQLSink, server, database: str) -> dict:
    sink.write_ddl(ddl(1, database, "", f"CREATE DATABASE `{database}`", "create database"))
    for number, create in enumerate(TABLES):
        table = create.split()[2]
        sink.write_ddl(ddl(2 + number, database, table, create))
    conn = server.connect()
    infos = {create.split()[2]: read_table_info(conn, database, create.split()[2], ts(9), number)
             for number, create in enumerate(TABLES)}
    conn.close()
    return infos


def downstream_problems(server, database: str, expected: dict) -> list[str]:
    conn = server.connect()
    problems = [f"{table}: {p}" for table, rows in expected.items()
                for p in diff_tables(rows, read_upstream_table(conn, database, table))]
    conn.close()
    return problems


def apply_t10_t11(sink: MySQLSink, database: str, infos: dict) -> None:
    """t10/t11 get their cascading key by a DDL, after their first rows: the sink moves them to
    the ordered path."""
    rows = [RowChange(ts(50), database, "t10", "insert", after=(str(i), str(i)), seq=i) for i in range(1, 4)]
    assert not sink.keeps_binlog_order(infos["t10"])
    sink.write_rows(infos["t10"], rows)
    sink.write_rows(infos["t11"], [RowChange(ts(51), database, "t11", "insert", after=(str(i), str(i)), seq=i)
                                   for i in range(1, 4)])
    sink.write_ddl(ddl(52, database, "t11", "ALTER TABLE t11 ADD CONSTRAINT fk_6 FOREIGN KEY (b) REFERENCES t10 (id) "
                                            "ON DELETE CASCADE ON UPDATE CASCADE", "add foreign key"))
    assert sink.keeps_binlog_order(infos["t10"]) and sink.keeps_binlog_order(infos["t11"])
    log = Binlog(infos)
    log._number = itertools.count(53)
    log.txn(dele("t10", 1, 1))
    log.txn(upd("t10", (2, 2), (12, 2)))
    sink.write_ordered(log.transactions)


@pytest.mark.parametrize("query", ["", "safe-mode=true", "multi-stmt-enable=false&batch-dml-enable=false"],
                         ids=["normal", "safe_mode", "unbatched"])
def test_cascades_run_downstream_as_upstream(mariadb, expected, query, request):
    database = f"fk_down_{os.getpid()}_{request.node.callspec.id}"
    changefeed = f"cf-{database}"
    with open_sink(mariadb, changefeed, query) as sink:
        infos = create_downstream(sink, mariadb, database)
        assert sink.keeps_binlog_order(infos["t1"]) and sink.keeps_binlog_order(infos["t9"])
        log = binlog_before_t11_key(infos)
        sink.write_ordered(log.transactions)
        sink.flush()
        apply_t10_t11(sink, database, infos)
        sink.flush()
    assert not downstream_problems(mariadb, database, expected), downstream_problems(mariadb, database, expected)

    # A restarted changefeed replays from its checkpoint: what its progress row says is
    # downstream is skipped, so nothing cascades twice (t2's rows inserted again would stay).
    with open_sink(mariadb, changefeed, query) as sink:
        sink.write_ordered(log.transactions)
        sink.flush()
    assert not downstream_problems(mariadb, database, expected)


def test_a_replay_from_the_middle_of_a_transaction_applies_only_the_rest(mariadb, expected):
    """Pieces of a large transaction reach the sink in several batches: the progress counts rows."""
    database = f"fk_pieces_{os.getpid()}"
    with open_sink(mariadb, f"cf-{database}") as sink:
        infos = create_downstream(sink, mariadb, database)
        log = binlog_before_t11_key(infos)
        first = log.transactions[0]
        half = OrderedTransaction(first.commit_ts, first.end_position, first.foreign_key_checks, first.changes[:7])
        sink.write_ordered([half])
        sink.flush()
    with open_sink(mariadb, f"cf-{database}") as sink:
        sink.write_ordered(log.transactions)
        apply_t10_t11(sink, database, infos)
        sink.flush()
    assert not downstream_problems(mariadb, database, expected)


def test_safe_mode_upserts_a_parent_in_place_where_replace_would_cascade(mariadb):
    database = f"fk_safe_{os.getpid()}"
    with open_sink(mariadb, f"cf-{database}", "safe-mode=true") as sink:
        infos = create_downstream(sink, mariadb, database)
        log = Binlog(infos)
        log.txn(ins("t1", 7), ins("t2", 7))
        sink.write_ordered(log.transactions)
        sink.flush()
    # Another changefeed (no progress of its own) writes the parent's insert again, in safe mode.
    with open_sink(mariadb, f"cf-{database}-again", "safe-mode=true") as sink:
        sink.write_ordered(log.transactions[:1])
        sink.flush()
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM t2")
        assert cur.fetchall() == ((7,),), "the child survives: its parent was not deleted and re-inserted"
    conn.close()


def test_without_a_changefeed_foreign_keys_change_nothing(mariadb):
    """The consumers' and redo apply's sinks write every table as before, with checks off."""
    database = f"fk_plain_{os.getpid()}"
    with open_sink(mariadb, "") as sink:
        infos = create_downstream(sink, mariadb, database)
        assert not sink.keeps_binlog_order(infos["t1"])
