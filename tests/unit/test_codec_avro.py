"""Avro: the schemas TiCDC registers (pinned JSON), the Confluent wire format decoded with fastavro
against those exact schemas, tombstone deletes, the `_tidb_*` fields and the handling modes."""

import io
import json
import struct
from pathlib import Path

import fastavro
import pytest

from sparkcdc.config.replica import SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.sink.codec.avro import (
    AvroDecoder,
    AvroEncoder,
    canonical_value,
    parse_envelope,
    record_schema,
)

GOLDEN = Path(__file__).parent / "golden" / "avro"
TS = compose(1701347696000, 5)

TABLE = TableInfo("test", "t-1", 7, (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("ti", "tinyint", unsigned=True),
    ColumnInfo("iu", "int", unsigned=True),
    ColumnInfo("bu", "bigint", unsigned=True),
    ColumnInfo("f", "float"),
    ColumnInfo("d", "double"),
    ColumnInfo("dec", "decimal", precision=10, scale=3),
    ColumnInfo("bits", "bit", length=12),
    ColumnInfo("vc", "varchar", length=20, charset="utf8mb4"),
    ColumnInfo("vb", "varbinary", length=20, charset="binary"),
    ColumnInfo("tx", "text", charset="utf8mb4"),
    ColumnInfo("bl", "blob", charset="binary"),
    ColumnInfo("e", "enum", elements=("a,b", "it's")),
    ColumnInfo("s", "set", elements=("x", "y")),
    ColumnInfo("j", "json"),
    ColumnInfo("dt", "datetime", scale=3),
    ColumnInfo("ts", "timestamp"),
    ColumnInfo("t", "time"),
    ColumnInfo("dd", "date"),
    ColumnInfo("y", "year"),
    ColumnInfo("1st", "int", nullable=False),
), 3, ("id",))
ROW = ("1", "255", "4294967295", "18446744073709551615", "1.5", "-2.25", "-12.340", "2049",
       "héllo", "\x00\xff", "text", "\x01\x02", "it's", "x,y", '{"k": 1}',
       "2023-11-30 12:34:56.123", "2023-11-30 12:34:56", "-12:00:01", "2023-11-30", "2023", "9")


class FakeRegistry:
    """The Confluent register/lookup calls, in memory: ids per distinct schema text."""

    def __init__(self):
        self.subjects: dict[str, list[str]] = {}
        self.ids: dict[str, int] = {}

    def register(self, subject, schema):
        self.subjects.setdefault(subject, [])
        if schema not in self.subjects[subject]:
            self.subjects[subject].append(schema)
        return self.ids.setdefault(schema, len(self.ids) + 1)

    def parsed_schema(self, schema_id):
        text = next(s for s, i in self.ids.items() if i == schema_id)
        return fastavro.parse_schema(json.loads(text))


def encoder(registry, extension=True, watermark=False, decimal="precise", unsigned="long"):
    sink = SinkConfig(enable_tidb_extension=extension)
    codec = sink.kafka_config.codec_config
    codec.enable_tidb_extension = extension
    codec.avro_enable_watermark = watermark
    codec.avro_decimal_handling_mode = decimal
    codec.avro_bigint_unsigned_handling_mode = unsigned
    return AvroEncoder(sink, registry)


def read(registry, data):
    schema_id, body = parse_envelope(data)
    return fastavro.schemaless_reader(io.BytesIO(body), registry.parsed_schema(schema_id))


def test_schemas_are_pinned():
    expected = json.loads((GOLDEN / "schemas.json").read_text())
    key = record_schema("default", TABLE, [TABLE.columns[0]], False)
    value = record_schema("default", TABLE, TABLE.columns, True)
    strings = record_schema("default", TABLE, TABLE.columns, False, "string", "string")
    assert {"key": key, "value": value, "value_string_modes": strings} == expected
    parsed = json.loads(value)
    assert parsed["name"] == "t_1" and parsed["namespace"] == "default.test"
    fields = {f["name"]: f for f in parsed["fields"]}
    assert fields["id"]["type"] == {"type": "int", "connect.parameters": {"tidb_type": "INT"}}
    assert fields["_1st"]["type"]["type"] == "int"
    assert fields["dec"]["type"][1]["logicalType"] == "decimal" and fields["dec"]["type"][1]["scale"] == 3
    assert fields["bits"]["type"][1]["connect.parameters"] == {"length": "12", "tidb_type": "BIT"}
    assert fields["e"]["type"][1]["connect.parameters"]["allowed"] == "a\\,b,it's"
    assert fields["vb"]["type"][1] == {"type": "bytes", "connect.parameters": {"tidb_type": "BLOB"}}
    assert fields["iu"]["type"][1]["type"] == "long" and fields["bu"]["type"][1]["type"] == "long"
    assert [f["name"] for f in parsed["fields"][-3:]] == ["_tidb_op", "_tidb_commit_ts", "_tidb_commit_physical_time"]


def test_wire_format_round_trips_through_fastavro():
    registry = FakeRegistry()
    insert = RowChange(TS, "test", "t-1", "insert", after=ROW)
    (message,) = encoder(registry).encode_rows(TABLE, [insert], topic="cdc.test.t-1")
    assert message.value[0] == 0 and message.key[0] == 0
    assert set(registry.subjects) == {"cdc_test_t-1-key", "cdc_test_t-1-value"}
    value = read(registry, message.value)
    assert value["_tidb_op"] == "c" and value["_tidb_commit_ts"] == TS
    assert value["_tidb_commit_physical_time"] == 1701347696000
    assert value["bu"] == -1 and value["bits"] == b"\x08\x01" and value["vb"] == b"\x00\xff"
    assert read(registry, message.key) == {"id": 1}
    for col, sent in zip(TABLE.columns, ROW):
        assert canonical_value(col, value[col.name if col.name != "1st" else "_1st"]) == sent, col.name
    golden = GOLDEN / "insert.hex"
    assert message.key.hex() + "\n" + message.value.hex() + "\n" == golden.read_text()


def test_update_delete_tombstone_and_string_modes():
    registry = FakeRegistry()
    enc = encoder(registry, decimal="string", unsigned="string")
    update = RowChange(TS, "test", "t-1", "update", before=ROW, after=("1",) + ROW[1:])
    delete = RowChange(TS + 1, "test", "t-1", "delete", before=ROW)
    up, down = enc.encode_rows(TABLE, [update, delete], topic="t")
    assert read(registry, up.value)["_tidb_op"] == "u"
    assert read(registry, up.value)["dec"] == "-12.340" and read(registry, up.value)["bu"] == "18446744073709551615"
    assert down.value is None and read(registry, down.key) == {"id": 1}
    # Registered once per table version.
    enc.encode_rows(TABLE, [update], topic="t")
    assert len(registry.subjects["t-value"]) == 1
    enc.encode_rows(TABLE.with_version(4), [update], topic="t")
    assert len(registry.ids) == 2  # same text: same id


def test_without_extension_no_tidb_fields_and_no_ddl_or_watermark():
    registry = FakeRegistry()
    enc = encoder(registry, extension=False, watermark=True)
    (message,) = enc.encode_rows(TABLE, [RowChange(TS, "test", "t-1", "insert", after=ROW)], topic="t")
    assert "_tidb_op" not in read(registry, message.value)
    assert enc.encode_checkpoint(5) is None
    assert enc.encode_ddl(DDLEvent(5, "test", "t-1", "ALTER TABLE x ADD c INT", "add column")) is None


def test_watermark_and_ddl_markers_decode():
    registry = FakeRegistry()
    enc = encoder(registry, watermark=True)
    checkpoint = enc.encode_checkpoint(TS)
    assert checkpoint.key is None and checkpoint.value == struct.pack(">BQ", 2, TS)
    ddl = enc.encode_ddl(DDLEvent(TS, "test", "t-1", "ALTER TABLE `t-1` ADD c INT", "add column"))
    assert ddl.value == (b'\x01{"query":"ALTER TABLE `t-1` ADD c INT","type":5,"schema":"test",'
                         b'"table":"t-1","commitTs":' + str(TS).encode() + b"}")
    decoder = AvroDecoder(registry)
    assert decoder.decode(None, checkpoint.value) == ("watermark", TS)
    assert decoder.decode(None, ddl.value)[1]["query"].startswith("ALTER")


def test_geometry_is_refused():
    from sparkcdc.errors import ErrSinkUnsupported

    table = TableInfo("d", "g", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),
                                    ColumnInfo("g", "geometry")), 1, ("id",))
    with pytest.raises(ErrSinkUnsupported):
        encoder(FakeRegistry()).encode_rows(table, [RowChange(1, "d", "g", "insert", after=("1", None))], topic="t")
