"""A crash right after a DDL replays it once, and DDL made while the server is down replicates
with the schema valid at each row's commit-ts: one server, a MySQL and a storage changefeed, the
storage output rebuilt by `sparkcdc consumer storage`; both downstreams compared row by row."""

from __future__ import annotations

import os
import time

import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts
from sparkcdc import failpoint
from sparkcdc.pipeline.batch_sink import KILL_AFTER_DDL
from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.server_process import ServerProcess, run_sparkcdc
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

TABLES = ["clients", "orders", "items", "late", "t", "finish_mark"]


def test_crash_at_a_ddl_then_ddl_while_the_server_is_down(mariadb, mariadb_factory, tmp_path, monkeypatch):
    """The server dies (SIGKILL of its process group, by the kill-after-ddl failpoint) right after running
    `ADD COLUMN after_crash` downstream, before its checkpoint passes it; while it is down the
    upstream adds and drops columns, renames the ENUM table customers to clients and creates a
    table. After the restart the DDL is replayed once (TiCDC's "once and only once") and MySQL
    and the storage output, rebuilt by the consumer, each equal the upstream row by row."""
    downstream, rebuilt = mariadb_factory(), mariadb_factory()
    database = "e2e_ddl"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    files = f"file://{tmp_path / 'out'}?protocol=canal-json&enable-tidb-extension=true"
    monkeypatch.setenv(failpoint.ENV, f"{KILL_AFTER_DDL}=return(ADD COLUMN after_crash)")
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    up = mariadb.connect()
    try:
        server.cli("changefeed", "create", "-c", "to-mysql", "--config", str(config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/")
        server.cli("changefeed", "create", "-c", "to-files", "--config", str(config), "--sink-uri", files)
        workload = Workload(up, database, seed=3)
        workload.create_tables()
        workload.run(60)
        with up.cursor() as cur:
            cur.execute(f"USE `{database}`")
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
            cur.execute("INSERT INTO t VALUES (1, 1), (2, 2), (3, 3)")
            cur.execute("ALTER TABLE t ADD COLUMN after_crash INT DEFAULT 5")
        server.process.wait(timeout=180)  # the failpoint killed it right after the DDL
        monkeypatch.delenv(failpoint.ENV)
        with up.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (4, 4, 44)")
            cur.execute("UPDATE t SET after_crash = 55 WHERE id = 1")
            cur.execute("ALTER TABLE orders ADD COLUMN region VARCHAR(16) NULL DEFAULT 'eu'")
            cur.execute("UPDATE orders SET region = 'us' WHERE id % 2 = 0")
            cur.execute("ALTER TABLE items DROP COLUMN day")
            cur.execute("UPDATE items SET qty = qty + 1 WHERE line = 1")
            cur.execute("RENAME TABLE customers TO clients")  # customers has an ENUM column
            cur.execute("INSERT INTO clients (id, name, email, tier) VALUES (100000, 'renamed', 'r@example.com', 'gold')")
            cur.execute("CREATE TABLE late (id INT PRIMARY KEY, v JSON)")
            cur.execute("INSERT INTO late VALUES (1, '{\"a\": 1}'), (2, NULL)")
        server.start()
        workload.finish()
        down = downstream.connect()
        wait_for_row(down, database, "finish_mark")
        with open(os.path.join(server.data_dir, "server.log"), encoding="utf-8", errors="replace") as log:
            assert f"FAILPOINT {KILL_AFTER_DDL}: killing the server after the DDL" in log.read(), "the crash did not happen"
        for table in TABLES:
            assert read_upstream_table(up, database, table), f"{table} is empty upstream"
        deadline = time.monotonic() + 120
        while checkpoint_ts(files) < server.checkpoint("to-mysql") and time.monotonic() < deadline:
            time.sleep(1)
        consumer = run_sparkcdc("consumer", "storage", "--upstream-uri", files,
                                "--downstream-uri", f"mysql://root@127.0.0.1:{rebuilt.port}/", "--once")
        assert consumer.returncode == 0, consumer.stderr[-3000:]
        replayed = rebuilt.connect()
        for conn, name in ((down, "mysql"), (replayed, "storage")):
            wait_tables_equal(up, conn, database, TABLES)
            with conn.cursor() as cur:
                assert not cur.execute(
                    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME='customers'",
                    (database,)), name
                cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                            "TABLE_NAME='t' ORDER BY ORDINAL_POSITION", (database,))
                assert [r[0] for r in cur.fetchall()] == ["id", "v", "after_crash"], name
    finally:
        server.stop()
