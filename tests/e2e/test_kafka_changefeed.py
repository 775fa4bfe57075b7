"""MariaDB -> Spark changefeed -> real Kafka (canal-json with watermarks, the open protocol with
resolved events, Avro with a real Apicurio schema registry, or Simple JSON; 3 partitions, index-value dispatch) -> sparkcdc's Kafka
consumer -> a second MariaDB, compared table by table. Covers DDL mid-stream, PK-changing updates
(split into delete + insert; an Avro tombstone plus an insert) and the product document's
PK-swap transaction."""

from __future__ import annotations

import threading
import time

import pytest

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.consumer.kafka_consumer import KafkaConsumer
from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
from sparkcdc.sink.mysql.config import parse_mysql_sink_uri
from sparkcdc.sink.mysql.connection import connect
from sparkcdc.sink.mysql.sink import MySQLSink
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.kafka import KafkaBroker
from sparkcdc.testing.schema_registry import SchemaRegistry
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.upstream.schema_reader import read_table_info
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark", "swap"]


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol", "avro", "simple"])
def test_protocol_over_kafka_rebuilds_mysql(protocol, mariadb, mariadb_factory, tmp_path):
    database = f"e2e_kafka_{protocol.replace('-', '_')}"
    broker = KafkaBroker(tmp_path / "kafka").start()
    registry = SchemaRegistry(tmp_path / "registry").start() if protocol == "avro" else None
    downstream_db = mariadb_factory()
    down_uri = f"mysql://root@127.0.0.1:{downstream_db.port}/?worker-count=2"
    sink_uri = f"kafka://{broker.bootstrap}/cdc-e2e-{protocol}?protocol={protocol}&partition-num=3"
    if protocol == "canal-json":
        sink_uri += "&enable-tidb-extension=true"
    if registry is not None:
        sink_uri += f"&enable-tidb-extension=true&avro-enable-watermark=true&schema-registry={registry.url}"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n'
                      f'[sink]\ndispatchers = [{{matcher = ["{database}.*"], partition = "index-value"}}]\n')
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    stop = threading.Event()
    errors: list[BaseException] = []
    downstream = MySQLSink(down_uri, ReplicaConfig(), replicating_ts=2**63 - 1)
    connection = connect(parse_mysql_sink_uri(down_uri), None)
    cache: dict = {}

    def table_info(schema, table):
        if (schema, table) not in cache:
            cache[(schema, table)] = read_table_info(connection, schema, table, 0, 0)
        return cache[(schema, table)]

    consumer = KafkaConsumer(parse_kafka_sink_uri(sink_uri), downstream, table_info, cache.clear, "e2e")

    def consume():
        try:
            consumer.run(stop)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    try:
        server.cli("changefeed", "create", "-c", f"to-kafka-{protocol.replace('-', '')}", "--config", str(config), "--sink-uri", sink_uri)
        up = mariadb.connect()
        workload = Workload(up, database, seed=7)
        workload.create_tables()
        with up.cursor() as cur:
            cur.execute(f"CREATE TABLE `{database}`.swap (a INT PRIMARY KEY, b INT)")
            cur.execute(f"INSERT INTO `{database}`.swap VALUES (1, 1), (2, 2)")
        thread.start()
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
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not errors:
            with down.cursor() as cur:
                try:
                    if cur.execute(f"SELECT 1 FROM `{database}`.finish_mark"):
                        break
                except Exception:
                    pass
            time.sleep(1)
        assert not errors, errors
        for table in TABLES:
            expected = read_upstream_table(up, database, table)
            assert expected, f"workload left {table} empty"
            problems = diff_tables(expected, read_upstream_table(down, database, table))
            assert not problems, f"{table}: " + "\n".join(problems)
        assert consumer.rows_applied > 100
    finally:
        stop.set()
        thread.join(30)
        server.stop()
        downstream.close()
        broker.stop()
        if registry is not None:
            registry.stop()
