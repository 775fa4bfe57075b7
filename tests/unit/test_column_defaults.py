"""Column defaults: what the DDL parser captures, the form TiDB records, and how the avro,
debezium, simple and storage-schema encoders write them (TiCDC's rules, pinned as text)."""

import io
import json

import fastavro
import pytest

from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.schema.catalog import build_column
from sparkcdc.schema.defaults import canonical_default
from sparkcdc.schema.parser import DefaultValue, SetColumnDefault, parse, parse_default
from sparkcdc.sink.codec.avro import record_schema
from sparkcdc.sink.codec.debezium import _field_schema
from sparkcdc.sink.codec.simple import table_schema
from sparkcdc.sink.storage.table_definition import TableDefinition, column_definition


def _defaults(ddl: str) -> dict:
    parsed = parse(ddl, "db")
    return {spec.name: build_column(spec, "utf8mb4").default for spec in parsed.columns}


@pytest.mark.parametrize("clause, column_type, expected", [
    ("5", "INT", "5"), ("'7'", "INT", "7"), ("-3", "BIGINT", "-3"), ("2.5", "INT", "3"), ("TRUE", "TINYINT", "1"),
    ("1.5", "DECIMAL(6,2)", "1.50"), ("'12'", "DECIMAL(10,0)", "12"), ("1.250", "FLOAT", "1.25"),
    ("1e3", "DOUBLE", "1000"), ("'it''s'", "VARCHAR(9)", "it's"), ("_utf8mb4'ab'", "CHAR(2)", "ab"),
    ("''", "TEXT", ""), ("NULL", "INT", None), ("'2024-01-02'", "DATETIME(3)", "2024-01-02 00:00:00.000"),
    ("'2024-01-02 03:04:05.123456'", "DATETIME(2)", "2024-01-02 03:04:05.12"), ("'2020-02-29'", "DATE", "2020-02-29"),
    ("'1:2:3'", "TIME", "01:02:03"), ("2024", "YEAR", "2024"), ("b'101'", "BIT(3)", "5"), ("0x0F", "BIT(8)", "15"),
    ("1", "BIT(1)", "1"), ("'b c'", "ENUM('a','b c')", "b c"), ("CURRENT_TIMESTAMP", "TIMESTAMP", "CURRENT_TIMESTAMP"),
    ("now(3)", "DATETIME(3)", "CURRENT_TIMESTAMP(3)"), ("LOCALTIMESTAMP()", "DATETIME", "CURRENT_TIMESTAMP"),
    ("(1 + 2)", "INT", "1+2"), ("(UUID())", "VARCHAR(36)", "uuid()"), ("(5)", "INT", "5"), ("('x')", "TEXT", "x"),
])
def test_ddl_defaults_in_tidb_form(clause, column_type, expected):
    assert _defaults(f"CREATE TABLE t (c {column_type} DEFAULT {clause})")["c"] == expected


def test_no_default_auto_increment_and_generated_have_none():
    found = _defaults("CREATE TABLE t (a INT, b INT NOT NULL, c INT AUTO_INCREMENT KEY, d INT AS (a) VIRTUAL)")
    assert found == {"a": None, "b": None, "c": None, "d": None}


def test_information_schema_text_parses_like_the_clause():
    # MariaDB's COLUMN_DEFAULT: quoted strings, NULL as text, expressions re-printed without parentheses.
    assert parse_default("'it''s'") == DefaultValue("string", "it's")
    assert parse_default("NULL") == DefaultValue("null")
    assert parse_default("current_timestamp(3)") == DefaultValue("expression", "CURRENT_TIMESTAMP(3)")
    assert parse_default("1 + 2") == parse("CREATE TABLE t (c INT DEFAULT (1+2))", "d").columns[0].default
    assert parse_default("b'101'") == DefaultValue("bits", "5")
    assert canonical_default(ColumnInfo("c", "bit", length=3), parse_default("b'101'")) == "5"


def test_alter_set_and_drop_default():
    parsed = parse("ALTER TABLE t ALTER COLUMN a SET DEFAULT 'x', ALTER b DROP DEFAULT", "db")
    assert parsed.ops == (SetColumnDefault("a", DefaultValue("string", "x")), SetColumnDefault("b", None))


def _table(*columns: ColumnInfo) -> TableInfo:
    key = ColumnInfo("id", "int", nullable=False, is_primary_key=True)
    return TableInfo("test", "t", 7, (key,) + columns, 1, ("id",))


DEFAULTS = _table(
    ColumnInfo("i", "int", default="5"), ColumnInfo("nn", "int", nullable=False, default="-2"),
    ColumnInfo("s", "varchar", length=5, charset="utf8mb4", default="a<b"), ColumnInfo("n", "int"),
    ColumnInfo("f", "float", default="1.1"), ColumnInfo("dec", "decimal", precision=6, scale=2, default="1.50"),
    ColumnInfo("b", "bit", length=3, default="5"),
    ColumnInfo("ts", "timestamp", scale=3, default="CURRENT_TIMESTAMP(3)"),
    ColumnInfo("vb", "varbinary", length=4, charset="binary", default="\x01A"), ColumnInfo("y", "year", default="2024"),
)


def test_avro_schema_defaults_as_ticdc_marshals_them():
    fields = {f["name"]: f for f in json.loads(record_schema("default", DEFAULTS, DEFAULTS.columns, False))["fields"]}
    # Nullable with a default: the type first in the union, then null (rowToAvroSchema).
    assert fields["i"] == {"default": 5, "name": "i", "type": [{"type": "int", "connect.parameters": {
        "tidb_type": "INT"}}, "null"]}
    assert fields["nn"] == {"default": -2, "name": "nn", "type": {"type": "int", "connect.parameters": {
        "tidb_type": "INT"}}}
    assert fields["n"]["default"] is None and fields["n"]["type"][0] == "null"
    assert fields["s"]["default"] == "a<b"
    assert fields["f"]["default"] == 1.100000023841858  # ParseFloat(v, 32) widened to float64
    assert fields["dec"]["default"] is None and fields["dec"]["type"][0] == "null"  # logical type: no default
    assert fields["b"]["default"] == "BQ=="  # TiDB's one byte 0x05, base64 as json.Marshal writes []byte
    assert fields["ts"]["default"] == "CURRENT_TIMESTAMP(3)"
    assert fields["vb"]["default"] == "AUE=" and fields["y"]["default"] == 2024
    text = record_schema("default", DEFAULTS, DEFAULTS.columns, False)
    assert '"default":"a\\u003cb"' in text  # Go's HTML-safe escaping
    # The schema is valid Avro and a row with NULLs still encodes and decodes.
    parsed = fastavro.parse_schema(json.loads(text))
    record = {f["name"]: None for f in json.loads(text)["fields"]}
    record.update(id=1, nn=3)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, parsed) == record


def test_avro_schema_without_defaults_is_unchanged():
    plain = _table(ColumnInfo("i", "int"), ColumnInfo("nn", "int", nullable=False))
    assert record_schema("default", plain, plain.columns, False) == (
        '{"type":"record","name":"t","namespace":"default.test","fields":['
        '{"name":"id","type":{"type":"int","connect.parameters":{"tidb_type":"INT"}}},'
        '{"default":null,"name":"i","type":["null",{"type":"int","connect.parameters":{"tidb_type":"INT"}}]},'
        '{"name":"nn","type":{"type":"int","connect.parameters":{"tidb_type":"INT"}}}]}')


def test_simple_table_schema_defaults():
    columns = {c["name"]: c["default"] for c in table_schema(DEFAULTS)["columns"]}
    assert columns == {"id": None, "i": "5", "nn": "-2", "s": "a<b", "n": None, "f": "1.1", "dec": "1.50", "b": 5,
                       "ts": "CURRENT_TIMESTAMP(3)", "vb": "\x01A", "y": "2024"}


def test_storage_schema_column_default():
    entries = {c.name: column_definition(c) for c in DEFAULTS.columns}
    assert list(entries["i"]) == ["ColumnName", "ColumnType", "ColumnDefault", "ColumnPrecision"]
    assert entries["i"]["ColumnDefault"] == "5" and "ColumnDefault" not in entries["n"]
    assert entries["b"]["ColumnDefault"] == "\x05"
    with_default = TableDefinition.from_table_info(DEFAULTS, 1)
    without = TableDefinition.from_table_info(_table(*(ColumnInfo(**{**c.__dict__, "default": None})
                                                       for c in DEFAULTS.columns[1:])), 1)
    assert '"ColumnDefault": "5"' in with_default.to_json()
    assert with_default.checksum() != without.checksum()  # the default is part of the schema file's name


def test_debezium_field_schema_defaults():
    fields = {c.name: _field_schema(c) for c in DEFAULTS.columns}
    assert fields["i"] == '{"type":"int32","optional":true,"field":"i","default":5}'
    assert fields["nn"] == '{"type":"int32","optional":false,"field":"nn","default":-2}'
    assert fields["n"] == '{"type":"int32","optional":true,"field":"n"}'
    assert fields["dec"].endswith('"field":"dec","default":1.5}')
    assert fields["b"].endswith('"field":"b","default":"BQ=="}')
    assert fields["ts"].endswith('"field":"ts","default":0}')  # CURRENT_TIMESTAMP(3) does not parse as a time
    assert fields["y"].endswith('"default":2024}')
    not_null_now = ColumnInfo("t2", "timestamp", nullable=False, default="CURRENT_TIMESTAMP")
    assert _field_schema(not_null_now).endswith('"default":"1970-01-01T00:00:00Z"}')
    literal = ColumnInfo("dt", "datetime", default="2024-01-02 03:04:05")
    assert _field_schema(literal).endswith('"default":1704164645000}')
