"""TiCDC's clustered_index, sequence and foreign_key integration workloads (pingcap/tiflow
tests/integration_tests/*/data, the statements MariaDB accepts) on a MariaDB upstream, through
one server into a MySQL downstream and into file storage (canal-json) replayed by
`sparkcdc consumer storage` into a second MariaDB; tables compared with upstream row by row.

clustered_index: every key type, both downstreams equal upstream. The MySQL changefeed is paused,
updated (batch-dml-enable, as TiCDC's batch_update_to_no_batch does) and resumed mid-workload, and
the server log must stay free of tracebacks.

sequence: sequences are not replicated, and every other change is.

foreign_key: the MySQL downstream re-runs the cascades MariaDB's binlog does not record, also
after a resume that replays every foreign-key transaction (exactly once). File storage cannot
hold the cascaded changes: the tables they touch are named in a warning, the others rebuild
equal."""

from __future__ import annotations

import os
import time

import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts
from sparkcdc.testing.alltypes import change_key_rows, insert_key_rows, key_tables
from sparkcdc.testing.compare import wait_for_row, wait_tables_equal
from sparkcdc.testing.mariadb import MariaDBServer
from sparkcdc.testing.server_process import ServerProcess, run_sparkcdc
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.e2e

KEYS_DB = "e2e_clustered_index"

# (type, values, moved) for TiCDC's one-column-key tables: rows b = 1, 2, ..., then b = 2 is
# deleted and the key of b = 3 moves to `moved`.
ONE_COLUMN_KEYS = [
    ("bit", ["1", "0"], None), ("bool", ["true", "false"], None),
    ("tinyint", ["6", "8", "9"], "10"), ("smallint", ["432", "125", "7"], "8"),
    ("mediumint", ["8567", "12341", "5"], "6"), ("int", ["123563", "6784356", "1"], "2"),
    ("date", ["'2020-02-20'", "'2020-02-21'", "'2020-02-22'"], "'2020-02-23'"),
    ("time", ["'11:22:33'", "'11:33:22'", "'11:43:11'"], "'11:44:55'"),
    ("datetime", ["'2020-02-20 11:22:33'", "'2020-02-21 11:33:22'", "'2020-02-22 11:43:11'"],
     "'2020-02-23 11:44:55'"),
    ("timestamp", ["'2020-02-20 11:22:33'", "'2020-02-21 11:33:22'", "'2020-02-22 11:43:11'"],
     "'2020-02-23 11:44:55'"),
    ("year", ["'2020'", "'2021'", "'2022'"], "'2023'"),
    ("char(20)", ["'abcc'", "'sdff'", "'zz'"], "'ppooii'"), ("varchar(255)", ["'abcc'", "'sdff'", "'zz'"], "'ppooii'"),
    ("binary(20)", ["x'89504E470D0A1A0A'", "x'89504E470D0A1A0B'", "x'89504E470D0A1A0C'"], "x'89504E470D0A1A0D'"),
    ("enum('a','b','c')", ["'a'", "'b'", "'c'"], "'b'"), ("set('a','b','c')", ["'a'", "'b,c'", "'a,c'"], "'b'"),
]


def clustered_index_statements() -> list[str]:
    """TiCDC's clustered_index cases: composite and one-column keys of many types, with updates
    that move keys and deletes (not t8: MariaDB refuses a key on a generated column as PRIMARY
    KEY, and NOT NULL on it, so it would have no valid index)."""
    statements = [
        "CREATE TABLE t0 (id VARCHAR(255), data INT, PRIMARY KEY (id))",
        "INSERT INTO t0 VALUES ('1', 1), ('2', 2), ('3', 3), ('4', 4), ('5', 5)",
        "DELETE FROM t0 WHERE id = '3'", "DELETE FROM t0 WHERE data = 5",
        "UPDATE t0 SET id = '10' WHERE data = 1", "UPDATE t0 SET data = 555 WHERE id = '10'",
        "CREATE TABLE t1 (id VARCHAR(255), a INT, b CHAR(10), PRIMARY KEY (id, b), UNIQUE KEY (b), KEY (a))",
        "INSERT INTO t1 VALUES ('111', 111, '111'), ('222', 222, '222'), ('333', 333, '333'), "
        "('444', 444, '444'), ('555', 555, '555')",
        "UPDATE t1 SET id = '10' WHERE id = '111'", "DELETE FROM t1 WHERE a = 222",
        "CREATE TABLE t2 (id VARCHAR(255), a INT, b DECIMAL(5,2), PRIMARY KEY (id, a), KEY (id, a), UNIQUE KEY (id, a))",
        "INSERT INTO t2 VALUES ('aaaa', 1111, 11.0), ('bbbb', 1111, 12.0), ('cccc', 1111, 13.0), "
        "('dddd', 1111, 14.0), ('eeee', 1111, 15.0)",
        "CREATE TABLE t_text (a TEXT, b INT, PRIMARY KEY (a(5)))",
        "INSERT INTO t_text VALUES ('abcc', 1), ('sdff', 2)",
        "UPDATE t_text SET a = 'ppooii' WHERE b = 2", "DELETE FROM t_text WHERE b = 1",
        "CREATE TABLE t_blob (a BLOB, b INT, PRIMARY KEY (a(20)))",
        "INSERT INTO t_blob VALUES (x'89504E470D0A1A0A', 1), (x'89504E470D0A1A0B', 2), (x'89504E470D0A1A0C', 3)",
        "UPDATE t_blob SET a = x'89504E470D0A1A0D' WHERE b = 3",
        "CREATE TABLE t9 (a INT, b VARCHAR(255), c INT, PRIMARY KEY (a, b))",
        "INSERT INTO t9 VALUES (1, 'aaa', 1), (2, 'bbb', 2), (3, 'ccc', 3)",
        "UPDATE t9 SET b = 'ddd' WHERE c = 3", "DELETE FROM t9 WHERE c = 2",
        "CREATE TABLE t10 (a INT, b INT, c INT, PRIMARY KEY (a, b))",
        "INSERT INTO t10 VALUES (1, 1, 1), (2, 2, 2), (3, 3, 3)",
        "UPDATE t10 SET b = 4 WHERE a = 3", "DELETE FROM t10 WHERE a = 2",
        # The issue 21 case: the old row (3, 3.3, 3) stayed downstream next to (3, 4.4, 3).
        "CREATE TABLE t11 (a INT, b FLOAT, c INT, PRIMARY KEY (a, b))",
        "INSERT INTO t11 VALUES (1, 1.1, 1), (2, 2.2, 2), (3, 3.3, 3)",
        "UPDATE t11 SET b = 4.4 WHERE c = 3", "DELETE FROM t11 WHERE b = 2",
        "CREATE TABLE t12 (name CHAR(255) PRIMARY KEY, b INT, c INT, INDEX idx (name), UNIQUE INDEX uidx (name))",
        "INSERT INTO t12 VALUES ('aaaa', 1, 1), ('bbb', 2, 2), ('ccc', 3, 3)",
        "UPDATE t12 SET name = 'ddd' WHERE c = 3", "DELETE FROM t12 WHERE c = 2",
    ]
    for number, (sql_type, values, moved) in enumerate(ONE_COLUMN_KEYS):
        table = f"t_one_{number}"
        statements += [f"CREATE TABLE {table} (a {sql_type} PRIMARY KEY, b INT)",
                       f"INSERT INTO {table} VALUES " + ", ".join(f"({v}, {b})" for b, v in enumerate(values, 1))]
        statements.append(f"DELETE FROM {table} WHERE b = 2")
        if moved is not None:
            statements.append(f"UPDATE {table} SET a = {moved} WHERE b = 3")
    return statements


def tables_of(conn, database: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (database,))
        return sorted(row[0] for row in cur.fetchall())


def wait_until(predicate, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def replay_storage(server: ServerProcess, files: str, replayed: MariaDBServer) -> None:
    """Once the storage changefeed has passed everything upstream has now, `sparkcdc consumer
    storage --once` replays its output into `replayed`."""
    reached = TxnIndex(os.path.join(server.data_dir, "txn-index.sqlite")).resolved_ts()
    wait_until(lambda: checkpoint_ts(files) >= reached, "the storage checkpoint to pass upstream's position")
    consumer = run_sparkcdc("consumer", "storage", "--upstream-uri", files,
                            "--downstream-uri", f"mysql://root@127.0.0.1:{replayed.port}/", "--once")
    assert consumer.returncode == 0, consumer.stderr[-3000:]


@pytest.fixture(scope="module")
def servers(mariadb, mariadb_factory_module, tmp_path_factory):
    """The sparkcdc server on the session upstream, a MySQL downstream and a storage replay target."""
    server = ServerProcess(str(tmp_path_factory.mktemp("cdc")), mariadb.uri).start()
    yield server, mariadb_factory_module(), mariadb_factory_module()
    server.stop()


@pytest.fixture(scope="module")
def mariadb_factory_module(tmp_path_factory):
    started = []

    def start() -> MariaDBServer:
        server = MariaDBServer(str(tmp_path_factory.mktemp("mariadb-down")))
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


def log_since(path: str, offset: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as log:
        log.seek(offset)
        return log.read()


def test_every_key_type_replicates_exactly_through_pauses_and_resumes(mariadb, servers, tmp_path):
    server, downstream, replayed = servers
    files = f"file://{tmp_path / 'out'}?protocol=canal-json&enable-tidb-extension=true"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{KEYS_DB}.*"]\n')
    sink_uri = f"mysql://root@127.0.0.1:{downstream.port}/?batch-dml-enable=true"
    server.cli("changefeed", "create", "-c", "keys", "--config", str(config), "--sink-uri", sink_uri)
    server.cli("changefeed", "create", "-c", "keysfiles", "--config", str(config), "--sink-uri", files)
    up = mariadb.connect()
    with up.cursor() as cur:
        cur.execute(f"CREATE DATABASE {KEYS_DB}")
        cur.execute(f"USE {KEYS_DB}")
        cur.execute("SET time_zone = '+00:00'")
        for statement in clustered_index_statements():
            cur.execute(statement)
        for table, column, body in key_tables("k"):
            cur.execute(f"CREATE TABLE {table} {body}")
            insert_key_rows(cur, KEYS_DB, table, column)

    # Pause, update and resume the MySQL changefeed while it works, twice right after a resume
    # (while its query starts): the log must show no traceback (issue 21: two CANNOT_OPEN_SOCKET
    # tracebacks per pause/resume).
    log_path = os.path.join(server.data_dir, "server.log")
    log_offset = os.path.getsize(log_path)
    for round_, (batch_dml, wait) in enumerate([("false", 2.0), ("true", 0.2), ("false", 0.5), ("true", 3.0)]):
        server.cli("changefeed", "pause", "-c", "keys")
        server.cli("changefeed", "update", "-c", "keys", "--no-confirm",
                   "--sink-uri", sink_uri.replace("batch-dml-enable=true", f"batch-dml-enable={batch_dml}"))
        server.cli("changefeed", "resume", "-c", "keys")
        with up.cursor() as cur:
            for table, column, _ in key_tables("k")[round_::4]:
                change_key_rows(cur, KEYS_DB, table, column)
        time.sleep(wait)
    last_resume = time.monotonic()
    with up.cursor() as cur:
        cur.execute(f"CREATE TABLE {KEYS_DB}.finish_mark (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {KEYS_DB}.finish_mark VALUES (1)")

    tables = tables_of(up, KEYS_DB)
    assert len(tables) == 36 + 9 + len(ONE_COLUMN_KEYS) + 1
    down = downstream.connect()
    wait_for_row(down, KEYS_DB, "finish_mark")
    wait_tables_equal(up, down, KEYS_DB, tables)

    replay_storage(server, files, replayed)
    wait_tables_equal(up, replayed.connect(), KEYS_DB, tables, timeout=10)

    # A query stopped while it starts strands Spark's source process, which fails 15 s later.
    time.sleep(max(0.0, last_resume + 20 - time.monotonic()))
    logged = log_since(log_path, log_offset)
    assert "CANNOT_OPEN_SOCKET" not in logged and "Traceback" not in logged, logged[-5000:]
    assert logged.count("/pause 200") == 4


SEQUENCE_DB = "e2e_sequence"


def sequence_statements() -> list[str]:
    """TiCDC's `sequence` workload as MariaDB takes it (its `DEFAULT NEXT VALUE FOR` column is
    TiDB's; the values go in through the INSERTs here), with more sequence use around writes to
    a transactional and a MyISAM table: every NEXT VALUE/SETVAL is a row event on the sequence
    table, in a group MariaDB ends with a COMMIT query, as a MyISAM table's changes."""
    return [
        "CREATE SEQUENCE seq0 START WITH 1 MINVALUE 1 MAXVALUE 999999999999999 INCREMENT BY 1 NOCACHE CYCLE",
        "SELECT NEXT VALUE FOR seq0", "SELECT NEXT VALUE FOR seq0",
        "CREATE TABLE t1 (id VARCHAR(255), a INT, PRIMARY KEY (id))",
        "INSERT INTO t1 (id, a) VALUES ('111', NEXT VALUE FOR seq0)",
        "INSERT INTO t1 (id, a) VALUES ('222', NEXT VALUE FOR seq0)",
        "INSERT INTO t1 (id, a) VALUES ('333', NEXT VALUE FOR seq0)",
        "UPDATE t1 SET id = '10' WHERE id = '111'",
        "DELETE FROM t1 WHERE a = 4",
        "CREATE TABLE m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
        "INSERT INTO m VALUES (1, NEXT VALUE FOR seq0), (2, 2)", "UPDATE m SET v = v + 1 WHERE id = 2",
        "BEGIN", "INSERT INTO t1 VALUES ('444', NEXT VALUE FOR seq0)", "INSERT INTO m VALUES (3, 3)", "COMMIT",
        "ALTER SEQUENCE seq0 RESTART WITH 100", "SELECT SETVAL(seq0, 500)",
        "INSERT INTO t1 VALUES ('555', NEXT VALUE FOR seq0)",
        "DELETE FROM m WHERE id = 1",
        "DROP SEQUENCE seq0",
        "INSERT INTO t1 VALUES ('666', 6)",
        "CREATE TABLE finish_mark (id INT PRIMARY KEY)", "INSERT INTO finish_mark VALUES (1)",
    ]


def test_sequences_are_not_replicated_and_every_other_change_is(mariadb, servers, tmp_path):
    """Issue 21 item 1: after a sequence's first NEXT VALUE the puller recorded nothing more and
    every changefeed's checkpoint froze, `normal` and silent."""
    server, downstream, replayed = servers
    files = f"file://{tmp_path / 'out'}?protocol=canal-json&enable-tidb-extension=true"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{SEQUENCE_DB}.*"]\n')
    server.cli("changefeed", "create", "-c", "seq", "--config", str(config),
               "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/")
    server.cli("changefeed", "create", "-c", "seqfiles", "--config", str(config), "--sink-uri", files)
    up = mariadb.connect()
    with up.cursor() as cur:
        cur.execute(f"CREATE DATABASE {SEQUENCE_DB}")
        cur.execute(f"USE {SEQUENCE_DB}")
        for statement in sequence_statements():
            cur.execute(statement)

    tables = ["t1", "m", "finish_mark"]
    down = downstream.connect()
    wait_for_row(down, SEQUENCE_DB, "finish_mark")
    wait_tables_equal(up, down, SEQUENCE_DB, tables)
    assert tables_of(down, SEQUENCE_DB) == sorted(tables), "the sequence itself is not replicated"

    replay_storage(server, files, replayed)
    replayed_conn = replayed.connect()
    wait_tables_equal(up, replayed_conn, SEQUENCE_DB, tables, timeout=10)
    assert tables_of(replayed_conn, SEQUENCE_DB) == sorted(tables)
    for changefeed in ("seq", "seqfiles"):
        info = server.api("GET", f"/api/v2/changefeeds/{changefeed}")
        assert info["state"] == "normal" and info["error"] is None and info["puller"]["state"] == "running", info


FK_DB = "e2e_foreign_key"
# Tables whose rows upstream changes through cascades: only a MySQL sink can reproduce them.
CASCADED = ["t2", "t4", "t9", "t11"]


def foreign_key_statements() -> list[str]:
    """TiCDC's foreign_key cases (t13's constraint renamed: MariaDB wants unique names)."""
    return [
        "SET foreign_key_checks = 1",
        "CREATE TABLE t1 (id INT PRIMARY KEY)",
        "CREATE TABLE t2 (id INT PRIMARY KEY, CONSTRAINT fk_1 FOREIGN KEY (id) REFERENCES t1 (id) "
        "ON DELETE CASCADE ON UPDATE CASCADE)",
        "BEGIN", "INSERT INTO t1 VALUES (1), (2), (3), (4), (5)", "INSERT INTO t2 VALUES (1), (2), (3), (4), (5)",
        "DELETE FROM t1 WHERE id IN (1, 2)", "UPDATE t1 SET id = id + 10 WHERE id = 3", "COMMIT",
        "SET foreign_key_checks = 0", "DELETE FROM t1 WHERE id = 4", "SET foreign_key_checks = 1",
        "CREATE TABLE t3 (id INT PRIMARY KEY)",
        "CREATE TABLE t4 (id INT PRIMARY KEY, b INT, INDEX idx (b), CONSTRAINT fk_2 FOREIGN KEY (b) "
        "REFERENCES t3 (id) ON DELETE SET NULL ON UPDATE SET NULL)",
        "BEGIN", "INSERT INTO t3 VALUES (1), (2), (3), (4), (5)",
        "INSERT INTO t4 VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)",
        "DELETE FROM t3 WHERE id IN (1, 2)", "UPDATE t3 SET id = id + 10 WHERE id = 3", "COMMIT",
        "CREATE TABLE t5 (id INT PRIMARY KEY)",
        "CREATE TABLE t6 (id INT PRIMARY KEY, CONSTRAINT fk_3 FOREIGN KEY (id) REFERENCES t5 (id) "
        "ON DELETE RESTRICT ON UPDATE RESTRICT)",
        "INSERT INTO t5 VALUES (1), (2), (3), (4), (5)", "INSERT INTO t6 VALUES (1), (2), (3), (4), (5)",
        "SET foreign_key_checks = 0", "DELETE FROM t5 WHERE id IN (1, 2)", "UPDATE t5 SET id = id + 10 WHERE id = 3",
        "DELETE FROM t5 WHERE id = 4", "SET foreign_key_checks = 1",
        "CREATE TABLE t7 (id INT PRIMARY KEY)",
        "CREATE TABLE t8 (id INT PRIMARY KEY, CONSTRAINT fk_4 FOREIGN KEY (id) REFERENCES t5 (id) "
        "ON DELETE RESTRICT ON UPDATE RESTRICT)",
        "DROP TABLE t7, t8",
        "CREATE TABLE t9 (id INT PRIMARY KEY, name VARCHAR(10), leader INT, INDEX (leader), "
        "CONSTRAINT fk_5 FOREIGN KEY (leader) REFERENCES t9 (id) ON DELETE CASCADE)",
        "INSERT INTO t9 VALUES (1, 'boss', NULL), (10, 'l1_a', 1), (11, 'l1_b', 1), (12, 'l1_c', 1)",
        "INSERT INTO t9 VALUES (100, 'l2_a1', 10), (101, 'l2_a2', 10), (102, 'l2_a3', 10)",
        "INSERT INTO t9 VALUES (110, 'l2_b1', 11), (111, 'l2_b2', 11), (112, 'l2_b3', 11)",
        "INSERT INTO t9 VALUES (120, 'l2_c1', 12), (121, 'l2_c2', 12), (122, 'l2_c3', 12)",
        "INSERT INTO t9 VALUES (1000, 'l3_a1', 100)",
        "DELETE FROM t9 WHERE id = 1",
        "CREATE TABLE t10 (id INT PRIMARY KEY, b INT, INDEX (b))",
        "CREATE TABLE t11 (id INT PRIMARY KEY, b INT, INDEX (b))",
        "INSERT INTO t10 VALUES (1, 1), (2, 2), (3, 3)", "INSERT INTO t11 VALUES (1, 1), (2, 2), (3, 3)",
        "ALTER TABLE t11 ADD CONSTRAINT fk_6 FOREIGN KEY (b) REFERENCES t10 (id) ON DELETE CASCADE ON UPDATE CASCADE",
        "DELETE FROM t10 WHERE id = 1", "UPDATE t10 SET id = id + 10 WHERE id = 2",
        # t12 is filtered out; its child t13 is replicated without it.
        "CREATE TABLE t12 (id INT PRIMARY KEY)",
        "CREATE TABLE t13 (id INT PRIMARY KEY, CONSTRAINT fk_13 FOREIGN KEY (id) REFERENCES t12 (id))",
        "INSERT INTO t12 VALUES (1), (2), (3), (4), (5)", "INSERT INTO t13 VALUES (1), (2), (3), (4), (5)",
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "CREATE TABLE tt (id INT PRIMARY KEY, ai VARCHAR(16) NOT NULL, app_id INT NOT NULL, "
        "UNIQUE KEY uk_appid (app_id), CONSTRAINT tt_app_id FOREIGN KEY (app_id) REFERENCES t (id))",
        "ALTER TABLE tt DROP FOREIGN KEY tt_app_id",
        "ALTER TABLE tt DROP INDEX uk_appid",
    ]


def test_foreign_key_cascades_reach_a_mysql_downstream_exactly_once(mariadb, servers, tmp_path):
    server, downstream, replayed = servers
    files = f"file://{tmp_path / 'fk'}?protocol=canal-json&enable-tidb-extension=true"
    config = tmp_path / "fk.toml"
    config.write_text(f'[filter]\nrules = ["{FK_DB}.*", "!{FK_DB}.t12"]\n')
    server.cli("changefeed", "create", "-c", "fk", "--config", str(config),
               "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=4")
    server.cli("changefeed", "create", "-c", "fkfiles", "--config", str(config), "--sink-uri", files)
    up = mariadb.connect()
    with up.cursor() as cur:
        cur.execute(f"CREATE DATABASE {FK_DB}")
        cur.execute(f"USE {FK_DB}")
        for statement in foreign_key_statements():
            cur.execute(statement)
        cur.execute("CREATE TABLE finish_mark (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO finish_mark VALUES (1)")
    down = downstream.connect()
    wait_for_row(down, FK_DB, "finish_mark")
    tables = [t for t in tables_of(up, FK_DB) if t != "t12"]
    wait_tables_equal(up, down, FK_DB, tables)
    with down.cursor() as cur:
        assert cur.execute(f"SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{FK_DB}' "
                           "AND TABLE_NAME = 't12'") == 0
        cur.execute(f"SELECT COUNT(*) FROM {FK_DB}.t13")
        assert cur.fetchone()[0] == 5

    # Resume from before the first foreign-key transaction: every one of them is replayed, and
    # the sink's progress row makes each a no-op (replayed as REPLACE, t1's rows would cascade).
    index = TxnIndex(os.path.join(server.data_dir, "txn-index.sqlite"))
    create_t2 = next(d for d in index.ddls_between(index.first_ts(), index.resolved_ts()) if d.table == "t2"
                     and d.schema == FK_DB)
    server.cli("changefeed", "pause", "-c", "fk")
    server.cli("changefeed", "resume", "-c", "fk", "--no-confirm", "--overwrite-checkpoint-ts", str(create_t2.commit_ts))
    with up.cursor() as cur:
        cur.execute(f"USE {FK_DB}")
        cur.execute("DELETE FROM t1 WHERE id = 5")
        cur.execute("UPDATE t3 SET id = 14 WHERE id = 4")
        cur.execute("INSERT INTO t9 VALUES (2, 'boss2', NULL), (20, 'l1', 2)")
        cur.execute("UPDATE t10 SET id = 13 WHERE id = 3")
        cur.execute("INSERT INTO finish_mark VALUES (2)")
    wait_until(lambda: _has_row(down, FK_DB, "finish_mark", 2), "finish mark 2")
    wait_tables_equal(up, down, FK_DB, tables)

    # File storage: the cascading tables are named in a warning; the others rebuild equal.
    replay_storage(server, files, replayed)
    wait_tables_equal(up, replayed.connect(), FK_DB, [t for t in tables if t not in CASCADED], timeout=10)
    logged = log_since(os.path.join(server.data_dir, "server.log"), 0)
    for table in CASCADED:
        assert f"[SPARKCDC:WarnForeignKeyCascade] changefeed fkfiles: {FK_DB}.{table} " in logged, table
    assert f"changefeed fk: {FK_DB}" not in logged, "a MySQL sink re-runs the cascades: no warning"
    # A changefeed created over the existing tables warns at its start, from information_schema.
    server.cli("changefeed", "create", "-c", "fklate", "--config", str(config), "--sink-uri",
               f"file://{tmp_path / 'fklate'}?protocol=canal-json")
    warned = f"[SPARKCDC:WarnForeignKeyCascade] changefeed fklate: {FK_DB}.t2 changes through FOREIGN KEY fk_1 (id) " \
             f"REFERENCES {FK_DB}.t1 (id) ON DELETE CASCADE ON UPDATE CASCADE"
    wait_until(lambda: warned in log_since(os.path.join(server.data_dir, "server.log"), 0), "fklate's warning", 30)
    server.cli("changefeed", "remove", "-c", "fklate")


def _has_row(conn, database: str, table: str, key: int) -> bool:
    with conn.cursor() as cur:
        return bool(cur.execute(f"SELECT 1 FROM `{database}`.`{table}` WHERE id = %s", (key,)))
