"""MariaDB -> Spark changefeed -> real Kafka (canal-json with watermarks, the open protocol with
resolved events, Avro with a real Apicurio schema registry, or Simple JSON; 3 partitions, index-value dispatch) -> sparkcdc's Kafka
consumer -> a second MariaDB, compared table by table. Covers DDL mid-stream, PK-changing updates
(split into delete + insert; an Avro tombstone plus an insert) and the product document's
PK-swap transaction.

All four protocols run at once: one broker, one registry, one server with a changefeed per
protocol (each on its own database) and one consumer each into one downstream MariaDB. One
Spark and Kafka start-up instead of four keeps the suite short; a failure names its protocol."""

from __future__ import annotations

import pytest

from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.kafka import ConsumerThread
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark", "swap"]


PROTOCOLS = ["canal-json", "open-protocol", "avro", "simple"]


def test_every_protocol_over_kafka_rebuilds_mysql(mariadb, mariadb_factory, kafka, registry, tmp_path):
    broker = kafka
    downstream_db = mariadb_factory()
    down_uri = f"mysql://root@127.0.0.1:{downstream_db.port}/?worker-count=2"
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    consumers: dict[str, ConsumerThread] = {}
    try:
        workloads = {}
        for protocol in PROTOCOLS:
            database = f"e2e_kafka_{protocol.replace('-', '_')}"
            sink_uri = f"kafka://{broker.bootstrap}/cdc-e2e-{protocol}?protocol={protocol}&partition-num=3"
            if protocol == "canal-json":
                sink_uri += "&enable-tidb-extension=true"
            if protocol == "avro":
                sink_uri += f"&enable-tidb-extension=true&avro-enable-watermark=true&schema-registry={registry.url}"
            config = tmp_path / f"{protocol}.toml"
            config.write_text(f'[filter]\nrules = ["{database}.*"]\n'
                              f'[sink]\ndispatchers = [{{matcher = ["{database}.*"], partition = "index-value"}}]\n')
            server.cli("changefeed", "create", "-c", f"to-kafka-{protocol.replace('-', '')}", "--config", str(config),
                       "--sink-uri", sink_uri)
            consumers[protocol] = ConsumerThread(parse_kafka_sink_uri(sink_uri), down_uri, f"e2e-{protocol}")
            up = mariadb.connect()
            workloads[protocol] = (database, up, Workload(up, database, seed=7))
        for protocol, (database, up, workload) in workloads.items():
            workload.create_tables()
            with up.cursor() as cur:
                cur.execute(f"CREATE TABLE `{database}`.swap (a INT PRIMARY KEY, b INT)")
                cur.execute(f"INSERT INTO `{database}`.swap VALUES (1, 1), (2, 2)")
            consumers[protocol].start()
        for protocol, (database, up, workload) in workloads.items():
            workload.run(100)
            with up.cursor() as cur:
                cur.execute(f"ALTER TABLE `{database}`.orders ADD COLUMN region VARCHAR(16) NULL DEFAULT 'eu'")
                cur.execute(f"UPDATE `{database}`.orders SET region = 'us' WHERE id % 2 = 0")
                cur.execute("BEGIN")
                cur.execute(f"UPDATE `{database}`.swap SET a = 3 WHERE a = 1")
                cur.execute(f"UPDATE `{database}`.swap SET a = 1 WHERE a = 2")
                cur.execute(f"UPDATE `{database}`.swap SET a = 2 WHERE a = 3")
                cur.execute("COMMIT")
            workload.run(60)
            workload.finish()
        down = downstream_db.connect()
        failures = []
        for protocol, (database, up, _) in workloads.items():
            try:
                try:
                    wait_for_row(down, database, "finish_mark", timeout=240)
                finally:
                    assert not consumers[protocol].errors, consumers[protocol].errors
                for table in TABLES:
                    assert read_upstream_table(up, database, table), f"workload left {table} empty"
                wait_tables_equal(up, down, database, TABLES)
                assert consumers[protocol].consumer.rows_applied > 100
            except AssertionError as exc:
                failures.append(f"[{protocol}] {exc}")
        assert not failures, "\n".join(failures)
    finally:
        for consumer in consumers.values():
            consumer.stop()
        server.stop()
