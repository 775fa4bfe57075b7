"""TiCDC's ddl_sequence / multi_tables_ddl / partition_table and common_1's renames in one run:
many tables, interleaved DDL and DML, into two changefeeds: a MySQL downstream, and file storage
(canal-json) whose output is replayed in order by `sparkcdc consumer storage` into a second
MariaDB. Both downstreams are compared with upstream table by table, schema, partitions and data.
The partition workload is TiCDC's own (hash/range partitions, TRUNCATE/ADD/DROP/REORGANIZE,
REMOVE PARTITIONING, PARTITION BY, EXCHANGE within and across databases) plus MariaDB's CONVERT
PARTITION/TABLE; the renames are a chain and a swap through a temporary name the filter excludes.
CREATE TABLE ... SELECT (its rows follow the DDL in the DDL's GTID group), CREATE OR REPLACE ...
SELECT and LIKE + INSERT ... SELECT run amid another session's commits.
A resume exactly at a DDL's commit-ts runs that DDL again (TiCDC's ddl_reentrant: a column dropped
downstream by hand comes back); a keyless table is not replicated; an unparseable DDL fails the
changefeed with its text and position in `cli changefeed query`."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time

import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts
from sparkcdc.testing.compare import wait_tables_equal
from sparkcdc.testing.server_process import ServerProcess, run_sparkcdc
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.e2e

DB = "e2e_ddlseq"
TABLES = [f"t{i}" for i in range(12)]
PART, PART2 = f"{DB}_part", f"{DB}_part2"
# tiflow tests/integration_tests/partition_table/data/prepare.sql (databases renamed), then
# MariaDB's CONVERT PARTITION/TABLE, then common_1's rename chain and a swap.
PARTITION_WORKLOAD = f"""
create database `{PART}`;
use `{PART}`;
create table t (a int, primary key (a)) partition by hash(a) partitions 5;
insert into t values (1),(2),(3),(4),(5),(6);
insert into t values (7),(8),(9);
alter table t truncate partition p3;
update t set a=a+10 where a=2;
create table t1 (a int primary key) PARTITION BY RANGE ( a ) ( PARTITION p0 VALUES LESS THAN (6),PARTITION p1 VALUES LESS THAN (11),PARTITION p2 VALUES LESS THAN (21));
insert into t1 values (1),(2),(3),(4),(5),(6);
insert into t1 values (7),(8),(9);
insert into t1 values (11),(12),(20);
alter table t1 add partition (partition p3 values less than (30), partition p4 values less than (40));
insert into t1 values (25),(29),(35);
alter table t1 truncate partition p0;
alter table t1 drop partition p1;
insert into t1 values (7),(8),(9);
update t1 set a=a+10 where a=9;
alter table t remove partitioning;
insert into t values (20),(21),(22),(23),(24),(25);
alter table t partition by hash (a) partitions 5;
insert into t values (30),(31),(32),(33),(34),(35);
create table t2 (a int primary key);
ALTER TABLE t1 EXCHANGE PARTITION p3 WITH TABLE t2;
insert into t2 values (100),(101),(102),(103),(104),(105);
insert into t1 values (25),(29);
create database `{PART2}`;
create table `{PART2}`.t2 (a int primary key);
ALTER TABLE t1 EXCHANGE PARTITION p3 WITH TABLE `{PART2}`.t2;
insert into `{PART2}`.t2 values (1002),(1012),(1022),(1032),(1042),(1052);
insert into t1 values (21),(28);
ALTER TABLE t1 REORGANIZE PARTITION p0,p2 INTO (PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS THAN (10), PARTITION p2 VALUES LESS THAN (21));
insert into t1 values (-1),(6),(13);
update t1 set a=a-22 where a=20;
delete from t1 where a = 5;
ALTER TABLE t1 REORGANIZE PARTITION p2,p3,p4 INTO (PARTITION p2 VALUES LESS THAN (20), PARTITION p3 VALUES LESS THAN (26), PARTITION p4 VALUES LESS THAN (35), PARTITION pMax VALUES LESS THAN (MAXVALUE));
insert into t1 values (-3),(5),(14),(22),(30),(100);
update t1 set a=a-16 where a=12;
delete from t1 where a = 29;
alter table t1 partition by key(a) partitions 7;
insert into t1 values (-2001),(2001),(2002),(-2002),(-2003),(2003),(-2004),(2004),(-2005),(2005),(2006),(-2006),(2007),(-2007);
ALTER TABLE t1 partition by range(a) (partition p0 values less than (5), PARTITION p2 VALUES LESS THAN (20), PARTITION p3 VALUES LESS THAN (26), PARTITION p4 VALUES LESS THAN (35), PARTITION pMax VALUES LESS THAN (MAXVALUE));
ALTER TABLE t1 CONVERT PARTITION pMax TO TABLE t1_max;
insert into t1_max values (5000);
delete from t1_max where a = 2001;
ALTER TABLE t1 CONVERT TABLE t1_max TO PARTITION pMax VALUES LESS THAN (MAXVALUE);
insert into t1 values (6000);
ALTER TABLE t ADD PARTITION PARTITIONS 2;
ALTER TABLE t COALESCE PARTITION 3;
ALTER TABLE t1 ANALYZE PARTITION p0;
CREATE TABLE `rename_t3` (`id` INT PRIMARY KEY, `val` INT);
CREATE TABLE `rename_t1` (`id` INT PRIMARY KEY, `val` INT);
CREATE TABLE `rename_t2` (`id` INT PRIMARY KEY, `val` INT);
INSERT INTO `rename_t1` VALUES (1, 1);
INSERT INTO `rename_t2` VALUES (1, 2);
INSERT INTO `rename_t3` VALUES (1, 3);
RENAME TABLE `rename_t1` TO `rename_t4`, `rename_t2` TO `rename_t1`, `rename_t3` TO `rename_t2`;
INSERT INTO `rename_t4` VALUES (2, 4);
INSERT INTO `rename_t1` VALUES (2, 1);
INSERT INTO `rename_t2` VALUES (2, 2);
RENAME TABLE rename_t1 TO rename_tmp, rename_t4 TO rename_t1, rename_tmp TO rename_t4;
INSERT INTO rename_t1 VALUES (3, 3);
INSERT INTO rename_t4 VALUES (3, 4)
"""
PARTITION_TABLES = {PART: ["t", "t1", "t2", "rename_t1", "rename_t2", "rename_t4"], PART2: ["t2"]}
# CREATE TABLE ... SELECT is one GTID group: the CREATE TABLE, its rows, the commit (an empty
# SELECT: a COMMIT query). Also CREATE OR REPLACE ... SELECT over a table with rows, and LIKE +
# INSERT ... SELECT (two groups). Ids from 1000 on, clear of dml()'s.
CTAS_WORKLOAD = [
    "CREATE TABLE ctas_big (PRIMARY KEY (id)) SELECT seq + 1000 AS id, CAST(seq AS SIGNED) AS v FROM seq_1_to_300",
    "UPDATE ctas_big SET v = -v WHERE id % 7 = 0",
    "CREATE TABLE ctas_empty (PRIMARY KEY (id)) SELECT id, v FROM t0 WHERE id < 0",
    "CREATE TABLE ctas_replaced (id INT PRIMARY KEY, v INT)",
    "INSERT INTO ctas_replaced VALUES (1, 1), (2, 2)",
    "CREATE OR REPLACE TABLE ctas_replaced (PRIMARY KEY (id)) SELECT seq + 2000 AS id, seq AS v FROM seq_1_to_50",
    "CREATE TABLE ctas_like LIKE made",
    "INSERT INTO ctas_like SELECT * FROM ctas_big WHERE id < 1100",
]
CTAS_TABLES = ["ctas_big", "ctas_empty", "ctas_replaced", "ctas_like"]


def wait_until(predicate, what: str, timeout: float = 120.0, on_timeout=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # not there yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {on_timeout()}")


def rows_of(conn, table: str, mark: int) -> bool:
    with conn.cursor() as cur:
        return bool(cur.execute(f"SELECT 1 FROM `{DB}`.`{table}` WHERE id = %s", (mark,)))


def dml(cur, round_: int, tables) -> None:
    for n, table in enumerate(tables):
        base = round_ * 100 + n * 10
        cur.execute(f"INSERT INTO {table} (id, v) VALUES ({base}, 1), ({base + 1}, 2), ({base + 2}, 3)")
        cur.execute(f"UPDATE {table} SET v = v + 10 WHERE id = {base + 1}")
        cur.execute(f"DELETE FROM {table} WHERE id = {base + 2}")


@contextlib.contextmanager
def concurrent_writes(server, table: str, first_id: int):
    """Single-row commits into `DB`.`table` from another connection while the block runs."""
    done = threading.Event()

    def write() -> None:
        conn = server.connect(database=DB)
        try:
            with conn.cursor() as cur:
                for row_id in itertools.count(first_id):
                    if done.is_set():
                        return
                    cur.execute(f"INSERT INTO {table} (id, v) VALUES ({row_id}, {row_id})")
        finally:
            conn.close()

    writer = threading.Thread(target=write, name="concurrent-writes")
    writer.start()
    try:
        yield
    finally:
        done.set()
        writer.join(30)


def assert_same_schema_and_data(up, down, live) -> None:
    wait_tables_equal(up, down, DB, live + ["finish_mark"])
    with down.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s", (DB,))
        assert sorted(r[0] for r in cur.fetchall()) == sorted(live + ["finish_mark"]), \
            "dropped/renamed tables gone, keyless never created"
        for table in live:
            query = ("SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY FROM information_schema.COLUMNS "
                     "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION")
            cur.execute(query, (DB, table))
            got = cur.fetchall()
            with up.cursor() as up_cur:
                up_cur.execute(query, (DB, table))
                assert got == up_cur.fetchall(), f"{table}: columns differ from upstream"
        cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME='t0' "
                    "ORDER BY ORDINAL_POSITION", (DB,))
        assert [r[0] for r in cur.fetchall()] == ["id", "v", "w", "c", "d"], "ADD COLUMN c applied once"


def assert_same_partitioned_tables(up, down) -> None:
    """The partition workload's tables: rows, and the partitions each table ends with."""
    query = ("SELECT TABLE_SCHEMA, TABLE_NAME, PARTITION_NAME, PARTITION_METHOD, PARTITION_EXPRESSION, "
             "PARTITION_DESCRIPTION FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA IN (%s, %s) "
             "ORDER BY 1, 2, PARTITION_ORDINAL_POSITION")
    for database, tables in PARTITION_TABLES.items():
        wait_tables_equal(up, down, database, tables)
    with up.cursor() as cur:
        cur.execute(query, (PART, PART2))
        expected = cur.fetchall()
    with down.cursor() as cur:
        cur.execute(query, (PART, PART2))
        assert cur.fetchall() == expected, "partitions differ from upstream"
    assert any(row[1] == "t1" and row[2] == "pMax" for row in expected)  # the workload ran to its end


def test_interleaved_ddl_and_dml_many_tables_with_a_resume_at_a_ddl(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    replayed = mariadb_factory()
    files = f"file://{tmp_path / 'out'}?protocol=canal-json&enable-tidb-extension=true"
    config = tmp_path / "cf.toml"
    # The swap's temporary name is outside the filter: the rename is judged by what it moves.
    config.write_text(f'[filter]\nrules = ["{DB}.*", "{PART}.*", "{PART2}.*", "!{PART}.rename_tmp"]\n')
    data_dir = str(tmp_path / "cdc")
    server = ServerProcess(data_dir, mariadb.uri).start()
    up = mariadb.connect()
    down = downstream.connect()
    try:
        # Created before the tables: like TiCDC, a changefeed does not copy tables that exist at its start.
        server.cli("changefeed", "create", "-c", "seq", "--config", str(config), "--no-confirm",
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/")
        server.cli("changefeed", "create", "-c", "seqfiles", "--config", str(config), "--no-confirm",
                   "--sink-uri", files)
        with up.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DB}")
            cur.execute(f"USE {DB}")
            for table in TABLES:
                cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, w VARCHAR(8) DEFAULT 'x', KEY iw (w))")
            cur.execute("CREATE TABLE keyless (id INT, v INT)")
            cur.execute("CREATE TABLE finish_mark (id INT PRIMARY KEY)")
        with up.cursor() as cur:
            dml(cur, 0, TABLES + ["keyless"])
            dml(cur, 1, TABLES)
            cur.execute("ALTER TABLE t1 DROP COLUMN w")
            cur.execute("CREATE INDEX iv ON t2 (v)")
            cur.execute("DROP INDEX iw ON t3")
            dml(cur, 2, TABLES + ["keyless"])
            cur.execute("RENAME TABLE t4 TO t4r")
            cur.execute("TRUNCATE TABLE t5")
            cur.execute("ALTER TABLE t6 MODIFY v BIGINT")
            cur.execute("DROP TABLE t7")
            cur.execute("CREATE TABLE made (id INT PRIMARY KEY, v INT)")
            cur.execute("DROP TABLE t8, t9")
            cur.execute("RENAME TABLE t10 TO t10r, t11 TO t11r")
            live = ["t0", "t1", "t2", "t3", "t4r", "t5", "t6", "made", "t10r", "t11r"]
            cur.execute("ALTER TABLE t0 ADD COLUMN c INT DEFAULT 7")  # the DDL the resume lands on
            dml(cur, 3, live)
            cur.execute("INSERT INTO finish_mark VALUES (1)")
        wait_until(lambda: rows_of(down, "finish_mark", 1), "finish mark 1",
                   on_timeout=lambda: server.cli("changefeed", "query", "-c", "seq").stdout)

        # Resume exactly at an applied DDL's commit-ts: TiCDC runs that DDL again (ddl_reentrant).
        # The column it adds was dropped downstream by hand meanwhile: it must come back, and
        # every row after it is replayed. (Going back past several applied DDLs replays old-schema
        # rows into a newer downstream schema, in TiCDC too; the CLI warns about it.)
        index = TxnIndex(os.path.join(data_dir, "txn-index.sqlite"))
        add_c = next(d for d in index.ddls_between(index.first_ts(), index.resolved_ts()) if "ADD COLUMN c" in d.query)
        for feed in ("seq", "seqfiles"):
            server.cli("changefeed", "pause", "-c", feed)
        with down.cursor() as cur:
            cur.execute(f"ALTER TABLE `{DB}`.t0 DROP COLUMN c")
        for feed in ("seq", "seqfiles"):
            server.cli("changefeed", "resume", "-c", feed, "--no-confirm",
                       "--overwrite-checkpoint-ts", str(add_c.commit_ts))
        with up.cursor() as cur:
            dml(cur, 4, live)
            cur.execute("ALTER TABLE t0 ADD COLUMN d INT")
            dml(cur, 5, live)
            # The CTAS groups amid other sessions' commits, then writes into their tables.
            with concurrent_writes(mariadb, "made", first_id=5000):
                for statement in CTAS_WORKLOAD:
                    cur.execute(statement)
            live += CTAS_TABLES
            dml(cur, 6, live)
            # After the resume point: going back past them would replay partition DDLs onto
            # their own effect, which only some of them survive (in TiCDC too).
            for statement in PARTITION_WORKLOAD.split(";\n"):
                cur.execute(statement)
            cur.execute(f"USE {DB}")
            cur.execute("INSERT INTO finish_mark VALUES (2)")
        wait_until(lambda: rows_of(down, "finish_mark", 2), "finish mark 2",
                   on_timeout=lambda: server.cli("changefeed", "query", "-c", "seq").stdout)

        assert_same_schema_and_data(up, down, live)
        assert_same_partitioned_tables(up, down)

        # The storage output, replayed in order by the consumer, rebuilds the same schema and data.
        reached = index.resolved_ts()  # past finish mark 2, which the MySQL downstream already has
        wait_until(lambda: checkpoint_ts(files) >= reached, "the storage checkpoint to pass finish mark 2",
                   on_timeout=lambda: server.cli("changefeed", "query", "-c", "seqfiles").stdout)
        consumer = run_sparkcdc("consumer", "storage", "--upstream-uri", files,
                                "--downstream-uri", f"mysql://root@127.0.0.1:{replayed.port}/", "--once")
        assert consumer.returncode == 0, consumer.stderr[-3000:]
        rebuilt = replayed.connect()
        try:
            assert_same_schema_and_data(up, rebuilt, live)
            assert_same_partitioned_tables(up, rebuilt)
        finally:
            rebuilt.close()

        # A DDL the schema store cannot follow fails the changefeed with its text and position.
        with up.cursor() as cur:
            cur.execute("ALTER TABLE made ADD SYSTEM VERSIONING")

        def failed() -> bool:
            return server.query("seq")["state"] == "failed"

        wait_until(failed, "the changefeed to fail on the unparseable DDL", 60)
        state = server.query("seq")
        message = json.dumps(state["error"])
        assert "ErrDDLUnparseable" in message and "ADD SYSTEM VERSIONING" in message, message
        assert "mysql-bin." in message or "binlog" in message, message
    finally:
        server.stop()
        up.close()
        down.close()
