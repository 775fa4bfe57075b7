"""`sparkcdc server --spark-master spark://...` on a Spark standalone cluster (master and one
worker started from pyspark's own jars): the changefeed's binlog decode tasks run in the worker's
executor process, and the rebuilt file-storage output equals the upstream."""

from __future__ import annotations

import os
import re
import time

import pytest

from sparkcdc.consumer.storage_reader import rebuild_tables
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.spark_cluster import StandaloneCluster, cluster_env
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark"]


def wait_for_mark(root: str, database: str, timeout: float = 150.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(root, "metadata")):
            tables = rebuild_tables(root, "canal-json")
            marks = tables.get((database, "finish_mark"), {})
            if (1,) in marks or ("1",) in marks:
                return tables
        time.sleep(1)
    raise AssertionError(f"the finish mark of {database} did not reach {root} within {timeout}s")


def test_changefeed_runs_on_a_standalone_cluster(mariadb, tmp_path, monkeypatch):
    cluster = StandaloneCluster(str(tmp_path / "spark")).start()
    try:
        for name in ("SPARK_HOME", "SPARK_LOCAL_IP"):
            monkeypatch.setenv(name, cluster_env()[name])
        server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri,
                               extra_args=("--spark-master", cluster.master_url)).start()
        try:
            database = "e2e_cluster"
            output = str(tmp_path / "out")
            config = tmp_path / "cf.toml"
            config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
            server.cli("changefeed", "create", "-c", "on-cluster", "--config", str(config), "--no-confirm",
                       "--sink-uri", f"file://{output}?protocol=canal-json&enable-tidb-extension=true")
            conn = mariadb.connect()
            workload = Workload(conn, database, seed=11)
            workload.create_tables()
            workload.run(120)
            workload.finish()

            rebuilt = wait_for_mark(output, database)
            for table in TABLES:
                expected = read_upstream_table(conn, database, table)
                actual = {tuple(str(k) for k in key): row for key, row in rebuilt.get((database, table), {}).items()}
                assert expected, f"the workload left {table} empty"
                problems = diff_tables(expected, actual)
                assert not problems, f"{database}.{table}: " + "\n".join(problems)

            apps = cluster.master_state()["activeapps"]
            assert [app["name"] for app in apps] == ["sparkcdc"] and apps[0]["cores"] > 0
            executor_log = cluster.executor_logs()
            # The Python data source's reads (the binlog decode) run as Python tasks in the executor.
            assert re.findall(r"Finished task [\d.]+ in stage", executor_log), "no task ran in the worker's executor"
            assert re.findall(r"Starting Python task execution", executor_log), "no Python (decode) task in the executor"
        finally:
            server.stop()
    finally:
        cluster.stop()
