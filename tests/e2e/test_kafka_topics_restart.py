"""MariaDB -> changefeed -> real Kafka with a topic per table (`{schema}_{table}`, 2 partitions
each) -> sparkcdc's Kafka consumer reading every topic -> a second MariaDB; the broker is stopped
for 15 s mid-workload and restarted on the same port and data. The changefeed goes to warning
(ErrKafkaSendMessage) and back to normal, and the rebuilt tables equal upstream row by row."""

from __future__ import annotations

import threading
import time

import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.kafka import ConsumerThread, KafkaBroker
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

DATABASE = "e2e_kafka_topics"
TABLES = ["customers", "orders", "items", "finish_mark"]
CHANGEFEED = "kafka-topics"


def test_topic_per_table_survives_a_broker_restart(mariadb, mariadb_factory, tmp_path):
    broker = KafkaBroker(tmp_path / "kafka").start()
    downstream_db = mariadb_factory()
    sink_uri = (f"kafka://{broker.bootstrap}/cdc-topics-default?protocol=canal-json&enable-tidb-extension=true"
                "&partition-num=2")
    config_text = (f'[filter]\nrules = ["{DATABASE}.*"]\n[sink]\n'
                   f'dispatchers = [{{matcher = ["{DATABASE}.*"], topic = "cdc-topics_{{schema}}_{{table}}", '
                   'partition = "index-value"}]\n')
    config = tmp_path / "cf.toml"
    config.write_text(config_text)
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    # As `sparkcdc consumer kafka --config cf.toml`: the topics come from the changefeed's expressions.
    consumer = ConsumerThread(parse_kafka_sink_uri(sink_uri, parse_replica_config(config_text)),
                              f"mysql://root@127.0.0.1:{downstream_db.port}/?worker-count=2", "e2e-topics")
    states: list[str] = []
    writing = threading.Event()
    failures: list[BaseException] = []
    up = mariadb.connect()
    workload = Workload(up, DATABASE, seed=11)

    def write_during_outage() -> None:
        try:
            while writing.is_set():  # a few transactions a second (each UPDATE items touches a third of it)
                workload.run(2)
                time.sleep(0.5)
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    try:
        server.cli("changefeed", "create", "-c", CHANGEFEED, "--config", str(config), "--sink-uri", sink_uri)
        workload.create_tables()
        consumer.start()
        workload.run(60)
        started = server.checkpoint(CHANGEFEED)
        deadline = time.monotonic() + 120
        while server.checkpoint(CHANGEFEED) == started:  # the outage lands mid-stream, not before the first batch
            assert time.monotonic() < deadline, "the changefeed made no progress"
            time.sleep(0.5)
        writer = threading.Thread(target=write_during_outage, daemon=True)
        writing.set()
        writer.start()
        time.sleep(3)
        broker.stop()
        down_until = time.monotonic() + 15
        while time.monotonic() < down_until:
            states.append(server.query(CHANGEFEED)["state"])
            time.sleep(1)
        broker.start()
        time.sleep(3)
        writing.clear()
        writer.join(120)
        assert not failures, failures
        workload.run(30)
        workload.finish()
        server.recovers_from_warning(CHANGEFEED, "SPARKCDC:ErrKafkaSendMessage", timeout=150, states=states)
        down = downstream_db.connect()
        try:
            wait_for_row(down, DATABASE, "finish_mark", timeout=180)
        finally:
            assert not consumer.errors, consumer.errors
        assert {f"cdc-topics_{DATABASE}_{table}" for table in TABLES} <= set(consumer.consumer.topics)
        for table in TABLES:
            assert read_upstream_table(up, DATABASE, table), f"workload left {table} empty"
        wait_tables_equal(up, down, DATABASE, TABLES)
    finally:
        writing.clear()
        consumer.stop()
        server.stop()
        broker.stop()
