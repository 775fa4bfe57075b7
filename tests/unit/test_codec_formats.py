"""Golden vectors for canal-json and csv: literal expected bytes live in tests/unit/golden/."""

from pathlib import Path

import pytest

from test_codec_fixtures import ROWS, TABLE, TS1
from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import ErrSinkUnknownProtocol
from sparkcdc.model.events import DDLEvent
from sparkcdc.sink.codec import make_file_encoder
from sparkcdc.sink.codec.csv import go_float_text
from sparkcdc.sink.codec.gojson import quote

GOLDEN = Path(__file__).parent / "golden"
CLOCK = lambda: 1700000005.0  # noqa: E731


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def test_canal_json_rows_with_tidb_extension():
    sink = SinkConfig(protocol="canal-json", enable_tidb_extension=True)
    assert make_file_encoder("canal-json", sink, CLOCK).encode_rows(TABLE, ROWS) == golden("canal_json_rows.json")


def test_canal_json_rows_plain_only_updated_columns():
    sink = SinkConfig(protocol="canal-json", only_output_updated_columns=True)
    out = make_file_encoder("canal-json", sink, CLOCK).encode_rows(TABLE, ROWS[2:3]).decode()
    assert '"old":[{"t_varchar":"say \\"hi\\", \\u003cok\\u003e \\u0026 go"}]' in out
    assert "_tidb" not in out and out.endswith("}\r\n")


def test_canal_json_ddl_and_watermark():
    sink = SinkConfig(protocol="canal-json", enable_tidb_extension=True)
    encoder = make_file_encoder("canal-json", sink, CLOCK)
    ddl = DDLEvent(TS1, "db", "t", "ALTER TABLE t ADD COLUMN c INT", "add column")
    assert encoder.encode_ddl(ddl) == (
        b'{"id":0,"database":"db","table":"t","pkNames":null,"isDdl":true,"type":"ALTER",'
        b'"es":1700000001000,"ts":1700000005000,"sql":"ALTER TABLE t ADD COLUMN c INT",'
        b'"sqlType":null,"mysqlType":null,"data":null,"old":null,'
        b'"_tidb":{"commitTs":445644800262144001}}\r\n'
    )
    assert encoder.encode_watermark(TS1) == (
        b'{"id":0,"database":"","table":"","pkNames":null,"isDdl":false,"type":"TIDB_WATERMARK",'
        b'"es":1700000001000,"ts":1700000005000,"sql":"","sqlType":null,"mysqlType":null,'
        b'"data":null,"old":null,"_tidb":{"watermarkTs":445644800262144001}}\r\n'
    )
    plain = make_file_encoder("canal-json", SinkConfig(protocol="canal-json"), CLOCK)
    assert plain.encode_watermark(TS1) is None


def test_csv_rows_with_commit_ts():
    sink = SinkConfig(protocol="csv")
    sink.csv.include_commit_ts = True
    assert make_file_encoder("csv", sink).encode_rows(TABLE, ROWS) == golden("csv_rows.csv")


def test_csv_old_value_hex_header():
    sink = SinkConfig(protocol="csv")
    sink.csv.output_old_value = True
    sink.csv.binary_encoding_method = "hex"
    sink.csv.output_field_header = True
    sink.csv.null = "NULL"
    encoder = make_file_encoder("csv", sink)
    assert encoder.header(TABLE).startswith(
        b"ticdc-meta$operation,ticdc-meta$table,ticdc-meta$schema,ticdc-meta$is-update,id,t_tiny,"
    )
    assert encoder.encode_rows(TABLE, ROWS) == golden("csv_rows_old_value_hex.csv")
    assert encoder.encode_ddl(DDLEvent(TS1, "db", "t", "x", "add column")) is None


@pytest.mark.parametrize(
    "text,expected",
    [("1.5", "1.5"), ("1234567", "1.234567e+06"), ("123456", "123456"), ("0.0001", "0.0001"),
     ("0.00001", "1e-05"), ("-0.5", "-0.5"), ("0", "0")],
)
def test_csv_floats_like_go_percent_v(text, expected):
    assert go_float_text(text) == expected


def test_go_json_escaping():
    assert quote('<a&b>"\\\n\x01\u2028') == '"\\u003ca\\u0026b\\u003e\\"\\\\\\n\\u0001\\u2028"'


def test_unknown_protocol():
    with pytest.raises(ErrSinkUnknownProtocol, match="canal-json, csv"):
        make_file_encoder("avro", SinkConfig())
