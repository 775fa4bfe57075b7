"""`sparkcdc server --spark-remote sc://...` against a Spark Connect server started from pyspark's
own jars: the capture plans each batch and writes the MySQL sink, the Connect server's executor
decodes the binlog ranges, and the downstream equals the upstream row by row, across a DDL."""

from __future__ import annotations

import os
import re

import pytest

from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.process_usage import process_tree
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.spark_connect import ConnectServer
from sparkcdc.testing.workload import Workload

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
