"""A changefeed from a real MariaDB through Spark into a second MariaDB, compared row by row."""

from __future__ import annotations

import pytest

from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark"]


def test_mysql_sink_replicates_ddl_and_dml_and_survives_sigkill(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    with downstream.connect().cursor() as cur:
        cur.execute("CREATE USER 'cdc'@'%' IDENTIFIED BY 'secret-pw'")
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'cdc'@'%'")
    database = "e2e_mysql"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    try:
        server.cli("changefeed", "create", "-c", "to-mysql", "--config", str(config),
                   "--sink-uri", f"mysql://cdc:secret-pw@127.0.0.1:{downstream.port}/?worker-count=4")
        info = server.api("GET", "/api/v2/changefeeds/to-mysql")
        assert "secret-pw" not in info["sink_uri"]
        up = mariadb.connect()
        workload = Workload(up, database, seed=5)
        workload.create_tables()
        workload.run(120)
        # Crash mid-stream, then write more while the server is down.
        server.kill()
        workload.run(60)
        server.start()
        # A DDL while replicating: rows before it use the old schema, rows after the new one
        # (DDL while the server is down: test_ddl_replication.py).
        with up.cursor() as cur:
            cur.execute(f"ALTER TABLE `{database}`.orders ADD COLUMN region VARCHAR(16) NULL DEFAULT 'eu'")
            cur.execute(f"UPDATE `{database}`.orders SET region = 'us' WHERE id % 2 = 0")
        workload.run(30)
        workload.finish()
        down = downstream.connect()
        wait_for_row(down, database, "finish_mark")
        for table in TABLES:
            assert read_upstream_table(up, database, table), f"workload left {table} empty"
        wait_tables_equal(up, down, database, TABLES)
    finally:
        server.stop()
