"""`sparkcdc server --spark-remote sc://...` against a Spark Connect server started from pyspark's
own jars: the capture plans each batch and writes the MySQL sink, the Connect server's executor
decodes the binlog ranges, and the downstream equals the upstream row by row, across a DDL."""

from __future__ import annotations

import os
import re

import pytest

from sparkcdc.consumer.storage_reader import rebuild_tables
from sparkcdc.testing.compare import diff_tables, read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.process_usage import process_tree
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.spark_connect import ConnectServer
from sparkcdc.testing.workload import Workload
from test_spark_cluster import wait_for_mark

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark"]


def command_lines(root_pid: int) -> list[str]:
    lines = []
    for pid in process_tree(root_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines


def test_changefeed_runs_over_spark_connect(mariadb, mariadb_factory, tmp_path):
    connect = ConnectServer(str(tmp_path / "connect")).launch()  # its start overlaps the downstream's
    try:
        downstream = mariadb_factory()
        connect.wait_ready()
        database = "e2e_connect"
        config = tmp_path / "cf.toml"
        config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
        server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri,
                               extra_args=("--spark-remote", connect.remote_url)).start()
        try:
            server.cli("changefeed", "create", "-c", "over-connect", "--config", str(config), "--no-confirm",
                       "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
            up = mariadb.connect()
            workload = Workload(up, database, seed=17)
            workload.create_tables()
            workload.run(80)
            # A DDL in the middle: the batch before it decodes with the old schema, the one after with the new.
            with up.cursor() as cur:
                cur.execute(f"ALTER TABLE `{database}`.orders ADD COLUMN region VARCHAR(16) NULL DEFAULT 'eu'")
                cur.execute(f"UPDATE `{database}`.orders SET region = 'us' WHERE id % 2 = 0")
            workload.run(80)
            workload.finish()

            down = downstream.connect()
            wait_for_row(down, database, "finish_mark", timeout=60)
            for table in TABLES:
                assert read_upstream_table(up, database, table), f"the workload left {table} empty"
            wait_tables_equal(up, down, database, TABLES)
            with down.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM `{database}`.orders WHERE region = 'us'")
                assert cur.fetchone()[0] > 0, "the rows written after the DDL did not arrive with its column"

            # The capture ran no Spark of its own: no JVM below it ...
            java = [line for line in command_lines(server.process.pid) if "java" in line.split(" ", 1)[0]]
            assert not java, f"the capture started a JVM: {java}"
            # ... and the binlog ranges were decoded as Python tasks in the Connect server's executor.
            connect_log = connect.log_text()
            assert re.search(r"Starting Python task execution", connect_log), "no Python (decode) task ran there"
            assert re.search(r"Finished task [\d.]+ in stage", connect_log)
            workers = [line for line in command_lines(connect.pid) if "pyspark.daemon" in line]
            assert workers, "the Connect server has no Python workers"
            with open(os.path.join(str(tmp_path / "cdc"), "server.log"), encoding="utf-8") as f:
                assert re.search(r"changefeed over-connect batch \d+: .* rows=\d+", f.read())
        finally:
            server.stop()
    finally:
        connect.stop()


@pytest.mark.skipif(not os.environ.get("SPARKCDC_RUN_CONNECT_RESTART_E2E"),
                    reason="restarts the Connect server (two cold starts, ~3-5 min); SPARKCDC_RUN_CONNECT_RESTART_E2E=1")
def test_changefeed_survives_a_connect_server_restart(mariadb, tmp_path):
    connect = ConnectServer(str(tmp_path / "connect")).start()
    try:
        database = "e2e_connect_restart"
        output = str(tmp_path / "out")
        config = tmp_path / "cf.toml"
        config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
        server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri,
                               extra_args=("--spark-remote", connect.remote_url)).start()
        try:
            server.cli("changefeed", "create", "-c", "restart", "--config", str(config), "--no-confirm",
                       "--sink-uri", f"file://{output}?protocol=canal-json&enable-tidb-extension=true")
            up = mariadb.connect()
            workload = Workload(up, database, seed=23)
            workload.create_tables()
            workload.run(40)
            wait_for_rows(output, database, "customers")
            connect.stop()  # the capture's session dies with it
            workload.run(40)
            connect.start()
            workload.finish()
            rebuilt = wait_for_mark(output, database, timeout=240)
            for table in TABLES:
                expected = read_upstream_table(up, database, table)
                actual = {tuple(str(k) for k in key): row for key, row in rebuilt.get((database, table), {}).items()}
                assert not diff_tables(expected, actual), f"{database}.{table} differs"
            assert server.api("GET", "/api/v2/changefeeds/restart")["state"] == "normal"
            with open(os.path.join(str(tmp_path / "cdc"), "server.log"), encoding="utf-8") as f:
                log_text = f.read()
            assert "opened a new Spark Connect session" in log_text
        finally:
            server.stop()
    finally:
        connect.stop()


def wait_for_rows(root: str, database: str, table: str, timeout: float = 180.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(root, "metadata")) and rebuild_tables(root, "canal-json").get((database, table)):
            return
        time.sleep(1)
    raise AssertionError(f"no row of {database}.{table} reached {root} within {timeout}s")
