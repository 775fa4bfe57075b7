"""Simple protocol (JSON): message bytes pinned for rows, DDL, watermark and bootstrap; values
decode back to canonical form; bootstrap timing."""

import json
from pathlib import Path

from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.kafka_consumer import DDLMessage, RowEvent, decode_simple
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.sink.codec.simple import BOOTSTRAP_MESSAGE_COUNT, SimpleEncoder, canonical_value

GOLDEN = Path(__file__).parent / "golden" / "simple_messages.jsonl"
TABLE = TableInfo("test", "t", 42, (
    ColumnInfo("id", "bigint", unsigned=True, nullable=False, is_primary_key=True),
    ColumnInfo("name", "varchar", length=32, charset="utf8mb4"),
    ColumnInfo("raw", "varbinary", length=8, charset="binary"),
    ColumnInfo("e", "enum", elements=("a", "b")),
    ColumnInfo("s", "set", elements=("x", "y", "z")),
    ColumnInfo("bits", "bit", length=4),
    ColumnInfo("f", "float"),
    ColumnInfo("dec", "decimal", precision=6, scale=2),
    ColumnInfo("ts", "timestamp", scale=3),
    ColumnInfo("dt", "datetime"),
    ColumnInfo("j", "json"),
), 447984124732375040, ("id",))
ROW = ("18446744073709551615", "<a&b>", "\x00\xfe", "b", "x,z", "5", "1.25", "-0.50",
       "2024-02-26 05:03:36.123", "2024-02-26 05:03:36", '{"k": [1]}')
TS = 447984124732375041


def encoder(now=1708923816.911):
    clock = [now]
    return SimpleEncoder(SinkConfig(), clock=lambda: clock[0]), clock


def test_messages_are_pinned():
    enc, _ = encoder()
    lines = [
        enc.bootstrap(TABLE, "topic").value,
        *(m.value for m in enc.encode_rows(TABLE, [
            RowChange(TS, "test", "t", "insert", after=ROW),
            RowChange(TS, "test", "t", "update", before=ROW, after=("1",) + ROW[1:]),
            RowChange(TS, "test", "t", "delete", before=("1",) + (None,) * 10),
        ], topic="topic")),
        enc.encode_ddl(DDLEvent(TS + 1, "test", "t", "ALTER TABLE t ADD COLUMN c INT", "add column",
                                table_info=TABLE, pre_table_info=TABLE)).value,
        enc.encode_ddl(DDLEvent(TS + 2, "test", "", "CREATE DATABASE test", "create schema")).value,
        enc.encode_checkpoint(TS).value,
    ]
    assert b"\n".join(lines).decode() + "\n" == GOLDEN.read_text()
    assert lines[-1] == b'{"version":1,"type":"WATERMARK","commitTs":447984124732375041,"buildTs":1708923816911}'
    insert = json.loads(lines[1])
    assert insert["type"] == "INSERT" and "old" not in insert and insert["tableID"] == 42
    assert insert["data"]["e"] == "2" and insert["data"]["s"] == "5" and insert["data"]["bits"] == "5"
    assert insert["data"]["raw"] == "AP4=" and insert["data"]["ts"] == {"location": "UTC", "value": ROW[8]}
    assert b"\\u003ca\\u0026b\\u003e" in lines[1]  # Go's HTML-safe escaping
    bootstrap = json.loads(lines[0])
    assert bootstrap["type"] == "BOOTSTRAP" and bootstrap["commitTs"] == 0
    schema = bootstrap["tableSchema"]
    assert schema["indexes"] == [{"name": "primary", "unique": True, "primary": True, "nullable": False,
                                  "columns": ["id"]}]
    assert schema["columns"][0]["dataType"] == {"mysqlType": "bigint", "charset": "binary", "collate": "binary",
                                                "length": 20, "unsigned": True}
    assert json.loads(lines[4])["type"] == "ALTER" and json.loads(lines[5])["type"] == "QUERY"


def test_decoding_back_to_canonical():
    enc, _ = encoder()
    (message,) = enc.encode_rows(TABLE, [RowChange(TS, "test", "t", "update", before=ROW, after=ROW)])
    (event,) = decode_simple(message.value)
    assert isinstance(event, RowEvent) and event.op == "update" and event.commit_ts == TS
    after = dict(event.after)
    assert tuple(canonical_value(c, after[c.name]) for c in TABLE.columns) == ROW
    ddl = enc.encode_ddl(DDLEvent(TS + 1, "test", "t", "DROP TABLE t", "drop table"))
    assert decode_simple(ddl.value) == [DDLMessage(TS + 1, "test", "t", "DROP TABLE t")]
    assert decode_simple(enc.encode_checkpoint(9).value) == [("watermark", 9)]
    assert decode_simple(enc.bootstrap(TABLE, "other").value) == []


def test_bootstrap_before_first_rows_then_by_time_count_or_new_version():
    enc, clock = encoder()
    assert enc.bootstrap(TABLE, "t1") is not None
    assert enc.bootstrap(TABLE, "t1") is None
    assert enc.bootstrap(TABLE, "t2") is not None  # per topic
    assert enc.bootstrap(TABLE.with_version(TS + 5), "t1") is not None  # schema changed
    enc.encode_rows(TABLE.with_version(TS + 5), [RowChange(TS, "test", "t", "insert", after=ROW)]
                    * BOOTSTRAP_MESSAGE_COUNT, topic="t1")
    assert enc.bootstrap(TABLE.with_version(TS + 5), "t1") is not None  # 10000 messages
    clock[0] += 121
    assert enc.bootstrap(TABLE.with_version(TS + 5), "t1") is not None  # 120 s
