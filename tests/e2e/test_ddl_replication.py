"""DDL made while the server is down replicates with the schema valid at each row's commit-ts; a
crash right after a DDL replays it once."""

from __future__ import annotations

import os
import time

import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts
from sparkcdc.pipeline.batch_sink import TEST_ONLY_KILL_AFTER_DDL_ENV
from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.server_process import ServerProcess, run_sparkcdc
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e


def test_ddl_while_server_is_down_after_sigkill(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    database = "e2e_ddl"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    up = mariadb.connect()
    try:
        server.cli("changefeed", "create", "-c", "ddl", "--config", str(config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/")
        workload = Workload(up, database, seed=3)
        workload.create_tables()
        workload.run(60)
        server.kill()
        with up.cursor() as cur:
            cur.execute(f"USE `{database}`")
            cur.execute("ALTER TABLE orders ADD COLUMN region VARCHAR(16) NULL DEFAULT 'eu'")
            cur.execute("UPDATE orders SET region = 'us' WHERE id % 2 = 0")
            cur.execute("ALTER TABLE items DROP COLUMN day")
            cur.execute("UPDATE items SET qty = qty + 1 WHERE line = 1")
            cur.execute("RENAME TABLE customers TO clients")
            cur.execute("INSERT INTO clients (id, name, email) VALUES (100000, 'renamed', 'r@example.com')")
            cur.execute("CREATE TABLE late (id INT PRIMARY KEY, v JSON)")
            cur.execute("INSERT INTO late VALUES (1, '{\"a\": 1}'), (2, NULL)")
        server.start()
        workload.finish()
        down = downstream.connect()
        wait_for_row(down, database, "finish_mark")
        for table in ["clients", "orders", "items", "late", "finish_mark"]:
            assert read_upstream_table(up, database, table), f"{table} is empty upstream"
        wait_tables_equal(up, down, database, ["clients", "orders", "items", "late", "finish_mark"])
        with down.cursor() as cur:
            assert not cur.execute(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME='customers'",
                (database,))
    finally:
        server.stop()


def test_crash_right_after_a_ddl_replays_it_once_in_every_sink(mariadb, mariadb_factory, tmp_path, monkeypatch):
    """The server dies after executing a DDL downstream but before its checkpoint passes it; the
    restart replays the DDL (TiCDC's "once and only once"): MySQL and the storage output, rebuilt by
    the consumer, each end with the column added once and every row."""
    downstream, rebuilt = mariadb_factory(), mariadb_factory()
    database = "e2e_ddl_crash"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    files = f"file://{tmp_path / 'out'}?protocol=canal-json&enable-tidb-extension=true"
    monkeypatch.setenv(TEST_ONLY_KILL_AFTER_DDL_ENV, "ADD COLUMN after_crash")
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    up = mariadb.connect()
    try:
        server.cli("changefeed", "create", "-c", "to-mysql", "--config", str(config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/")
        server.cli("changefeed", "create", "-c", "to-files", "--config", str(config), "--sink-uri", files)
        with up.cursor() as cur:
            cur.execute(f"CREATE DATABASE {database}")
            cur.execute(f"USE {database}")
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
            cur.execute("CREATE TABLE finish_mark (id INT PRIMARY KEY)")
            cur.execute("INSERT INTO t VALUES (1, 1), (2, 2), (3, 3)")
            cur.execute("ALTER TABLE t ADD COLUMN after_crash INT DEFAULT 5")
        server.process.wait(timeout=180)  # the TEST-ONLY hook killed it right after the DDL
        monkeypatch.delenv(TEST_ONLY_KILL_AFTER_DDL_ENV)
        with up.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (4, 4, 44)")
            cur.execute("UPDATE t SET after_crash = 55 WHERE id = 1")
            cur.execute("INSERT INTO finish_mark VALUES (1)")
        server.start()
        down = downstream.connect()
        wait_for_row(down, database, "finish_mark")
        with open(os.path.join(server.data_dir, "server.log"), encoding="utf-8", errors="replace") as log:
            assert "TEST-ONLY: killing the server after the DDL" in log.read(), "the crash did not happen"
        deadline = time.monotonic() + 120
        while checkpoint_ts(files) < server.checkpoint("to-mysql") and time.monotonic() < deadline:
            time.sleep(1)
        consumer = run_sparkcdc("consumer", "storage", "--upstream-uri", files,
                                "--downstream-uri", f"mysql://root@127.0.0.1:{rebuilt.port}/", "--once")
        assert consumer.returncode == 0, consumer.stderr[-3000:]
        replayed = rebuilt.connect()
        for conn, name in ((down, "mysql"), (replayed, "storage")):
            wait_tables_equal(up, conn, database, ["t", "finish_mark"])
            with conn.cursor() as cur:
                cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                            "TABLE_NAME='t' ORDER BY ORDINAL_POSITION", (database,))
                assert [r[0] for r in cur.fetchall()] == ["id", "v", "after_crash"], name
    finally:
        server.stop()
