"""Open protocol bytes pinned: framing, key/value JSON, flags, batching, resolved and DDL."""

import struct

from sparkcdc.config.replica import SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.sink.codec.open import OpenProtocolEncoder, canonical_value, decode_message

TABLE = TableInfo("test", "t1", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("val", "varbinary", charset="binary", length=10),
    ColumnInfo("txt", "text"),
    ColumnInfo("e", "enum", elements=("a", "b")),
    ColumnInfo("f", "double"),
), 1, ("id",))


def frame(*chunks):
    return b"".join(struct.pack(">Q", len(c)) + c for c in chunks)


def encoder(batch=16):
    sink = SinkConfig()
    sink.kafka_config.codec_config.max_batch_size = batch
    return OpenProtocolEncoder(sink)


def test_insert_and_update_bytes():
    rows = [
        RowChange(415508878783938562, "test", "t1", "insert", after=("1", "a\x00\"", "hé", "b", "1.5")),
        RowChange(415508878783938563, "test", "t1", "update", before=("1", "x", None, "a", "2"),
                  after=("1", "y", None, "a", "2")),
    ]
    (message,) = encoder().encode_rows(TABLE, rows)
    key1 = b'{"ts":415508878783938562,"scm":"test","tbl":"t1","t":1}'
    key2 = b'{"ts":415508878783938563,"scm":"test","tbl":"t1","t":1}'
    assert message.key == struct.pack(">Q", 1) + frame(key1, key2)
    value1 = ('{"u":{"e":{"t":247,"f":64,"v":2},"f":{"t":5,"f":65,"v":1.5},'
              '"id":{"t":3,"h":true,"f":11,"v":1},"txt":{"t":252,"f":64,"v":"aMOp"},'
              '"val":{"t":15,"f":65,"v":"a\\\\x00\\\\\\""}}}').encode()
    assert message.value.startswith(frame(value1))
    value2 = message.value[len(frame(value1)) + 8:]
    assert value2.startswith(b'{"u":{') and b',"p":{' in value2
    events = decode_message(message.key, message.value)
    assert [e.commit_ts for e in events] == [415508878783938562, 415508878783938563]
    assert canonical_value(TABLE.columns[1], events[0].value["u"]["val"]) == "a\x00\""
    assert canonical_value(TABLE.columns[2], events[0].value["u"]["txt"]) == "hé"
    assert canonical_value(TABLE.columns[3], events[0].value["u"]["e"]) == "b"


def test_delete_batching_resolved_and_ddl():
    rows = [RowChange(i, "test", "t1", "delete", before=(str(i), None, None, None, None)) for i in range(5)]
    messages = encoder(batch=2).encode_rows(TABLE, rows)
    assert [m.rows for m in messages] == [2, 2, 1]
    assert b'{"d":{' in messages[0].value
    resolved = encoder().encode_checkpoint(7)
    assert resolved.key == struct.pack(">Q", 1) + frame(b'{"ts":7,"t":3}')
    assert resolved.value == struct.pack(">Q", 0)
    ddl = encoder().encode_ddl(DDLEvent(9, "test", "t1", "ALTER TABLE t1 ADD COLUMN c INT", "add column"))
    assert ddl.key == struct.pack(">Q", 1) + frame(b'{"ts":9,"scm":"test","tbl":"t1","t":2}')
    assert ddl.value == frame(b'{"q":"ALTER TABLE t1 ADD COLUMN c INT","t":5}')


def test_binary_values_round_trip_through_go_quoting():
    """Bytes that decode to non-printable runes are quoted as \\uHHHH by Go; they come back as the same bytes."""
    from hypothesis import given, strategies

    column = ColumnInfo("val", "varbinary", charset="binary", length=64)

    @given(strategies.binary(max_size=48))
    def round_trip(raw):
        text = raw.decode("latin-1")
        encoded = OpenProtocolEncoder(SinkConfig()).row_value(
            TableInfo("s", "t", 1, (column,), 1, ()), RowChange(1, "s", "t", "insert", after=(text,)))
        import json
        sent = json.loads(encoded)["u"]["val"]
        assert canonical_value(column, sent) == text

    round_trip()
    assert canonical_value(column, {"t": 15, "f": 1, "v": "k\\u0600\\x80"}) == "k\xd8\x80\x80"
