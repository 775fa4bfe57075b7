"""DDL made while the server is down replicates with the schema valid at each row's commit-ts."""

from __future__ import annotations

import pytest

from sparkcdc.testing.compare import diff_tables, read_upstream_table, wait_for_row
from sparkcdc.testing.server_process import ServerProcess
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
            expected = read_upstream_table(up, database, table)
            assert expected, f"{table} is empty upstream"
            problems = diff_tables(expected, read_upstream_table(down, database, table))
            assert not problems, f"{table}: " + "\n".join(problems)
        with down.cursor() as cur:
            assert not cur.execute(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME='customers'",
                (database,))
    finally:
        server.stop()
