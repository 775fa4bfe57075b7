"""The Kafka sink against a real broker (KRaft, from scripts/setup-kafka.sh), read back by the
Kafka consumer: routing, DDL placement, watermarks after data, replays, broker restart."""

from __future__ import annotations

import json

import pytest

from sparkcdc.config.replica import ReplicaConfig, parse_replica_config
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.sink.kafka.sink import KafkaSink
from sparkcdc.testing.kafka import KafkaBroker, RecordingDownstream, consume_until, read_topic

pytestmark = pytest.mark.integration

TABLE = TableInfo("db", "t", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("v", "varchar", length=20),
    ColumnInfo("e", "enum", elements=("x", "y")),
), 1, ("id",))


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """This module's own broker: its tests stop and restart it (the session's broker is shared)."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka")).start()
    yield broker
    broker.stop()


def rows(ts, ids, op="insert"):
    return [RowChange(ts, "db", "t", op, after=(str(i), f"v{i}", "y")) for i in ids]




@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
def test_rows_ddl_and_watermarks_round_trip(kafka, protocol):
    topic = f"rt-{protocol}"
    uri = f"kafka://{kafka.bootstrap}/{topic}?protocol={protocol}&enable-tidb-extension=true&partition-num=3&max-batch-size=4"
    config = parse_replica_config("[sink]\ndispatchers = [{matcher = ['db.*'], partition = 'index-value'}]\n")
    sink = KafkaSink(uri, config)
    sink.write_rows(TABLE, rows(100, range(10)))
    sink.flush()
    sink.write_checkpoint(100)
    sink.write_ddl(DDLEvent(200, "db", "t", "ALTER TABLE t ADD COLUMN w INT", "add column"))
    sink.write_rows(TABLE, rows(300, range(10, 15)) + [RowChange(300, "db", "t", "delete", before=("3", "v3", "y"))])
    sink.flush()
    sink.write_checkpoint(300)
    # A replay of the last batch after a crash: the consumer must not apply it twice.
    sink.write_rows(TABLE, rows(300, range(10, 15)))
    sink.flush()
    sink.write_checkpoint(300)
    sink.close()

    messages = read_topic(kafka.bootstrap, topic)
    assert sorted(messages) == [0, 1, 2]
    for partition, items in messages.items():
        assert items, f"partition {partition} got nothing"
    if protocol == "canal-json":
        ddl_partitions = [p for p, items in messages.items() for m in items if json.loads(m.value())["isDdl"]]
        assert ddl_partitions == [0]
        for partition, items in messages.items():
            kinds = [json.loads(m.value())["type"] for m in items]
            assert kinds.count("TIDB_WATERMARK") == 3
    recorder = RecordingDownstream()
    consumer = consume_until(uri, recorder, TABLE, 300)
    assert consumer.checkpoint_ts == 300
    assert [r.op for r in recorder.rows].count("insert") == 15
    assert [r.op for r in recorder.rows].count("delete") == 1
    assert recorder.ddls == [(200, "ALTER TABLE t ADD COLUMN w INT", 10)]
    assert all(r.after[2] == "y" for r in recorder.rows if r.op == "insert")


def test_flush_waits_through_a_broker_restart(kafka):
    topic = "restart"
    uri = f"kafka://{kafka.bootstrap}/{topic}?protocol=canal-json&enable-tidb-extension=true"
    sink = KafkaSink(uri, ReplicaConfig())
    sink.write_rows(TABLE, rows(100, range(100)))
    sink.flush()
    kafka.stop()
    sink.write_rows(TABLE, rows(200, range(100, 200)))
    kafka.start()
    sink.flush()
    sink.write_checkpoint(200)
    sink.close()
    recorder = RecordingDownstream()
    consume_until(uri, recorder, TABLE, 200)
    assert len({r.after[0] for r in recorder.rows}) == 200


def test_a_broker_down_for_longer_than_write_timeout_is_a_retryable_error(kafka):
    import time

    from sparkcdc.errors import ErrKafkaSendMessage
    from sparkcdc.pipeline.failure import is_retryable_failure

    uri = f"kafka://{kafka.bootstrap}/down?protocol=canal-json&enable-tidb-extension=true&write-timeout=3s"
    sink = KafkaSink(uri, ReplicaConfig())
    sink.write_rows(TABLE, rows(100, range(10)))
    sink.write_checkpoint(100)
    kafka.stop()
    try:
        started = time.monotonic()
        sink.write_rows(TABLE, rows(200, range(10, 20)))
        with pytest.raises(ErrKafkaSendMessage, match="write-timeout=3s") as raised:
            sink.flush()
        assert 3 <= time.monotonic() - started < 10
        assert is_retryable_failure(str(raised.value))
        started = time.monotonic()
        with pytest.raises(ErrKafkaSendMessage):
            sink.close()  # purges what is queued instead of waiting again
        assert time.monotonic() - started < 2
    finally:
        kafka.start()
    time.sleep(3)  # a purged message that were still sent would arrive now
    sent = [json.loads(m.value()) for items in read_topic(kafka.bootstrap, "down").values() for m in items]
    assert sorted(int(m["data"][0]["id"]) for m in sent if m["type"] == "INSERT") == list(range(10))
