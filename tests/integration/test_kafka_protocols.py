"""Avro, Debezium and Simple through a real broker (KRaft) and, for Avro, a real Confluent-API
schema registry (Apicurio, from scripts/setup-registry.sh): what lands in the topic, and what the
Kafka consumer rebuilds from it."""

from __future__ import annotations

import json

import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.sink.codec.debezium import decode_value
from sparkcdc.sink.kafka.sink import KafkaSink
from sparkcdc.testing.kafka import RecordingDownstream, consume_until, read_topic

pytestmark = pytest.mark.integration

TABLE = TableInfo("db", "t", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("v", "varchar", length=20, charset="utf8mb4"),
    ColumnInfo("e", "enum", elements=("x", "y")),
    ColumnInfo("d", "decimal", precision=8, scale=2),
    ColumnInfo("b", "varbinary", length=8, charset="binary"),
), 1, ("id",))
DISPATCH = "[sink]\ndispatchers = [{matcher = ['db.*'], partition = 'index-value'}]\n"







def row(ts, i, op="insert", value=None):
    image = (str(i), value or f"v{i}", "y", f"{i}.50", "\x00\xff")
    if op == "delete":
        return RowChange(ts, "db", "t", op, before=image)
    if op == "update":
        return RowChange(ts, "db", "t", op, before=image, after=image[:1] + ("new",) + image[2:])
    return RowChange(ts, "db", "t", op, after=image)


def workload(sink):
    sink.write_rows(TABLE, [row(100, i) for i in range(10)])
    sink.flush()
    sink.write_checkpoint(100)
    sink.write_ddl(DDLEvent(200, "db", "t", "ALTER TABLE t ADD COLUMN w INT", "add column"))
    sink.write_rows(TABLE, [row(300, i) for i in range(10, 15)] + [row(300, 3, "delete"), row(300, 4, "update")])
    sink.flush()
    sink.write_checkpoint(300)
    sink.write_rows(TABLE, [row(300, i) for i in range(10, 15)])  # a replay after a crash
    sink.flush()
    sink.write_checkpoint(300)
    sink.close()




def test_avro_with_a_real_registry_round_trips(kafka, registry):
    topic = "avro-rt"
    uri = (f"kafka://{kafka.bootstrap}/{topic}?protocol=avro&enable-tidb-extension=true"
           f"&avro-enable-watermark=true&partition-num=3&schema-registry={registry.url}")
    workload(KafkaSink(uri, parse_replica_config(DISPATCH)))

    import urllib.request
    with urllib.request.urlopen(f"{registry.url}/subjects") as response:
        subjects = set(json.loads(response.read()))  # the registry is the session's: other topics' too
    assert {s for s in subjects if s.startswith(f"{topic}-")} == {"avro-rt-key", "avro-rt-value"}
    messages = read_topic(kafka.bootstrap, topic)
    tombstones = [m for items in messages.values() for m in items if m.value() is None]
    assert len(tombstones) == 1  # the delete: key only, value null
    assert all(m.key()[0] == 0 for m in tombstones)
    for items in messages.values():
        assert sum(1 for m in items if m.value() and m.value()[0] == 2) == 3  # watermarks everywhere

    recorder = RecordingDownstream()
    consumer = consume_until(uri, recorder, TABLE, 300)
    assert consumer.checkpoint_ts == 300
    ops = [r.op for r in recorder.rows]
    assert ops.count("insert") == 15 and ops.count("delete") == 1 and ops.count("update") == 1
    assert recorder.ddls == [(200, "ALTER TABLE t ADD COLUMN w INT", 10)]
    inserted = {r.after[0]: r.after for r in recorder.rows if r.op == "insert"}
    assert inserted["7"] == ("7", "v7", "y", "7.50", "\x00\xff")
    (delete,) = [r for r in recorder.rows if r.op == "delete"]
    assert delete.before[0] == "3" and delete.commit_ts == 300
    (update,) = [r for r in recorder.rows if r.op == "update"]
    assert update.after[1] == "new"


def test_avro_confluent_deserializer_reads_our_messages(kafka, registry):
    """A stock Confluent client (confluent-kafka's AvroDeserializer) reads what we produce."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = "avro-confluent"
    uri = f"kafka://{kafka.bootstrap}/{topic}?protocol=avro&enable-tidb-extension=true&schema-registry={registry.url}"
    sink = KafkaSink(uri, parse_replica_config(""))
    sink.write_rows(TABLE, [row(100, 1)])
    sink.close()
    (message,) = [m for items in read_topic(kafka.bootstrap, topic).values() for m in items]
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
    value = deserializer(message.value(), SerializationContext(topic, MessageField.VALUE))
    assert value["id"] == 1 and value["v"] == "v1" and str(value["d"]) == "1.50"
    assert value["_tidb_op"] == "c" and value["_tidb_commit_ts"] == 100
    assert deserializer(message.key(), SerializationContext(topic, MessageField.KEY)) == {"id": 1}


def test_debezium_on_a_real_broker(kafka):
    topic = "dbz-rt"
    uri = f"kafka://{kafka.bootstrap}/{topic}?protocol=debezium&partition-num=3"
    workload(KafkaSink(uri, parse_replica_config(DISPATCH)))
    messages = read_topic(kafka.bootstrap, topic)
    values = [m for items in messages.values() for m in items]
    assert len(values) == 10 + 5 + 2 + 5  # no DDL, no watermark
    decoded = [decode_value(TABLE, m.value()) for m in values]
    assert sorted(r.op for r in decoded).count("delete") == 1
    assert {r.after[0] for r in decoded if r.op == "insert"} == {str(i) for i in range(15)}
    assert all(json.loads(m.key())["payload"]["id"] == int(json.loads(m.value())["payload"]["after" if json.loads(
        m.value())["payload"]["op"] != "d" else "before"]["id"]) for m in values)


def test_simple_on_a_real_broker_round_trips(kafka):
    topic = "simple-rt"
    uri = f"kafka://{kafka.bootstrap}/{topic}?protocol=simple&partition-num=3"
    workload(KafkaSink(uri, parse_replica_config(DISPATCH)))
    messages = read_topic(kafka.bootstrap, topic)
    for items in messages.values():
        kinds = [json.loads(m.value())["type"] for m in items]
        assert kinds[0] == "BOOTSTRAP"  # the schema precedes the rows on every partition
        assert kinds.count("WATERMARK") == 3 and kinds.count("ALTER") == 1
    recorder = RecordingDownstream()
    consumer = consume_until(uri, recorder, TABLE, 300)
    assert consumer.checkpoint_ts == 300
    ops = [r.op for r in recorder.rows]
    assert ops.count("insert") == 15 and ops.count("delete") == 1 and ops.count("update") == 1
    assert recorder.ddls == [(200, "ALTER TABLE t ADD COLUMN w INT", 10)]
    inserted = {r.after[0]: r.after for r in recorder.rows if r.op == "insert"}
    assert inserted["7"] == ("7", "v7", "y", "7.50", "\x00\xff")
    (update,) = [r for r in recorder.rows if r.op == "update"]
    assert update.before[1] == "v4" and update.after[1] == "new"
