"""TiCDC's ddl_sequence / multi_tables_ddl in one run: many tables, interleaved DDL and DML, into
two changefeeds: a MySQL downstream, and file storage (canal-json) whose output is replayed in
order by `sparkcdc consumer storage` into a second MariaDB. Both downstreams are compared with
upstream table by table, schema and data; a resume exactly at a DDL's commit-ts replays it once
in both; a keyless table is not replicated; an unparseable DDL fails the changefeed with its text
and position in `cli changefeed query`."""

from __future__ import annotations

import json
import os
import time

import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts
from sparkcdc.testing.compare import wait_tables_equal
from sparkcdc.testing.server_process import ServerProcess, run_sparkcdc
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.e2e

DB = "e2e_ddlseq"
TABLES = [f"t{i}" for i in range(12)]


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


def test_interleaved_ddl_and_dml_many_tables_with_a_resume_at_a_ddl(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    replayed = mariadb_factory()
    files = f"file://{tmp_path / 'out'}?protocol=canal-json&enable-tidb-extension=true"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{DB}.*"]\n')
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

        # Resume exactly at the last applied DDL's commit-ts: the DDL and every row after it are
        # replayed; the DDL must take effect once. (Going back past several applied DDLs replays
        # old-schema rows into a newer downstream schema, in TiCDC too; the CLI warns about it.)
        index = TxnIndex(os.path.join(data_dir, "txn-index.sqlite"))
        add_c = next(d for d in index.ddls_between(index.first_ts(), index.resolved_ts()) if "ADD COLUMN c" in d.query)
        for feed in ("seq", "seqfiles"):
            server.cli("changefeed", "pause", "-c", feed)
            server.cli("changefeed", "resume", "-c", feed, "--no-confirm",
                       "--overwrite-checkpoint-ts", str(add_c.commit_ts - 1))
        with up.cursor() as cur:
            dml(cur, 4, live)
            cur.execute("ALTER TABLE t0 ADD COLUMN d INT")
            dml(cur, 5, live)
            cur.execute("INSERT INTO finish_mark VALUES (2)")
        wait_until(lambda: rows_of(down, "finish_mark", 2), "finish mark 2",
                   on_timeout=lambda: server.cli("changefeed", "query", "-c", "seq").stdout)

        assert_same_schema_and_data(up, down, live)

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
        finally:
            rebuilt.close()

        # A DDL the schema store cannot follow fails the changefeed with its text and position.
        with up.cursor() as cur:
            cur.execute("ALTER TABLE made ADD SYSTEM VERSIONING")

        def failed() -> bool:
            return json.loads(server.cli("changefeed", "query", "-c", "seq").stdout)["state"] == "failed"

        wait_until(failed, "the changefeed to fail on the unparseable DDL", 60)
        state = json.loads(server.cli("changefeed", "query", "-c", "seq").stdout)
        message = json.dumps(state["error"])
        assert "ErrDDLUnparseable" in message and "ADD SYSTEM VERSIONING" in message, message
        assert "mysql-bin." in message or "binlog" in message, message
    finally:
        server.stop()
        up.close()
        down.close()
