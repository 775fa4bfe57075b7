"""The native row decoder on hand-built ROWS event bodies (binary formats from MySQL's
row-image spec), its layout compiler's fallbacks, and decoder selection."""

from __future__ import annotations

import calendar
import datetime
import struct

import pytest
from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE

from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.upstream import native_decode

WRITE_V1, UPDATE_V1, DELETE_V1, WRITE_V2 = 23, 24, 25, 30


def test_forcing_the_pure_path(monkeypatch):
    monkeypatch.setenv(native_decode.FORCE_PURE_ENV, "1")
    assert native_decode.native_module() is None
    assert "forced by SPARKCDC_PURE_PYTHON_DECODER" in native_decode.decoder_description()


def test_an_outdated_build_falls_back_to_pure_python(monkeypatch):
    monkeypatch.delenv(native_decode.FORCE_PURE_ENV, raising=False)
    monkeypatch.setattr(native_decode, "_built_module", lambda: object())  # no ChangeBatchBuilder
    assert native_decode.native_module() is None
    assert "older than native/; rerun scripts/setup.sh" in native_decode.decoder_description()


native = native_decode.native_module()
needs_native = pytest.mark.skipif(native is None, reason="sparkcdc_native not built (scripts/setup.sh needs cargo)")


def _body(columns: int, rows: list[bytes], event_type: int = WRITE_V1, present: bytes | None = None) -> bytes:
    bitmap = present if present is not None else b"\xff" * ((columns + 7) // 8)
    header = (42).to_bytes(6, "little") + b"\x01\x00"
    if event_type in (30, 31, 32):
        header += struct.pack("<H", 2 + 3) + b"\x01\x07\x00"  # extra data: partition info
    bitmaps = bitmap * (2 if event_type in (UPDATE_V1, 31) else 1)
    return header + bytes([columns]) + bitmaps + b"".join(rows)


def _decimal_10_2(negative: bool, whole: int, cents: int) -> bytes:
    raw = bytearray(whole.to_bytes(4, "big") + bytes([cents]))
    raw[0] ^= 0x80
    return bytes(b ^ 0xFF for b in raw) if negative else bytes(raw)


def _datetime2(d: datetime.datetime) -> bytes:
    packed = ((d.year * 13 + d.month) << 22) | (d.day << 17) | (d.hour << 12) | (d.minute << 6) | d.second
    return (packed + 0x80_0000_0000).to_bytes(5, "big")


def _time2_fsp3(negative: bool, seconds: int, ten_thousandths: int) -> bytes:
    hms = ((seconds // 3600) << 12) | ((seconds // 60 % 60) << 6) | (seconds % 60)
    value = (hms << 16) | ten_thousandths
    return ((-value if negative else value) + (0x800000 << 16)).to_bytes(5, "big")


def _length_prefixed(data: bytes, size: int = 1) -> bytes:
    return len(data).to_bytes(size, "little") + data


@needs_native
def test_golden_row_of_many_types():
    specs = [
        ("int", 1, 0, [], "", ""), ("int", 8, 1, [], "", ""), ("int", 3, 0, [], "", ""),
        ("decimal", 10, 2, [], "", ""), ("float", 0, 0, [], "", ""), ("double", 0, 0, [], "", ""),
        ("datetime", 1, 0, [], "", ""), ("timestamp", 3, 0, [], "", ""), ("timestamp", 0, 0, [], "", ""),
        ("time", 3, 0, [], "", ""), ("date", 0, 0, [], "", ""), ("year", 0, 0, [], "", ""),
        ("bit", 2, 10, [], "", ""), ("enum", 1, 0, ["a", "b,c"], "", ""), ("set", 1, 0, ["x", "y", "ü"], "", ""),
        ("text", 2, 0, [], "utf8", "strict"), ("text", 1, 0, [], "cp1252", "strict"),
        ("bytes", 1, 4, [], "", ""), ("enum", 1, 0, ["a"], "", ""),
    ]
    layout = native.RowLayout("db.t", specs)
    leap = calendar.timegm((2000, 2, 29, 0, 0, 0))
    values = [
        b"\x80", (2**64 - 1).to_bytes(8, "little"), (-8388608 & 0xFFFFFF).to_bytes(3, "little"),
        _decimal_10_2(True, 0, 5), struct.pack("<f", 0.1), struct.pack("<d", 1e300),
        _datetime2(datetime.datetime(2024, 2, 29, 23, 59, 59)) + bytes([90]),
        leap.to_bytes(4, "big") + (1230).to_bytes(2, "big"), b"\x00\x00\x00\x00",
        _time2_fsp3(True, 1, 5000), ((2024 << 9) | (0 << 5) | 15).to_bytes(3, "little"), b"\x00",
        (1023).to_bytes(2, "big"), b"\x02", b"\x05",
        _length_prefixed("héllo 😀".encode(), 2), _length_prefixed("€".encode("cp1252")),
        _length_prefixed(b"\x00\x01"), b"\x00",
    ]
    null_bitmap = b"\x00\x00\x00"
    [row] = layout.decode(WRITE_V1, _body(len(specs), [null_bitmap + b"".join(values)]))
    assert row == (
        "-128", "18446744073709551615", "-8388608", "-0.05", "0.1", "1" + "0" * 300,
        "2024-02-29 23:59:59.9", "2000-02-29 00:00:00.123", "0000-00-00 00:00:00",
        "-00:00:01.500", "2024-00-15", "0000", "1023", "b,c", "x,ü", "héllo 😀", "€", "\x00\x01\x00\x00", "",
    )


def _batch_rows(builder) -> list[tuple]:
    """The native ChangeBatchBuilder's rows as (commit_ts, seq, table code, op code, before, after)."""
    import pyarrow as pa

    from sparkcdc.model.change_batch import image_array as _image_array

    rows, commit_ts, seq, codes, ops, before, after = builder.finish()
    ints = lambda kind, data: pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(data)]).to_pylist()  # noqa: E731
    images = [[None if v is None else tuple(v) for v in _image_array(rows, image).to_pylist()] for image in (before, after)]
    return list(zip(ints(pa.int64(), commit_ts), ints(pa.int64(), seq), ints(pa.int32(), codes),
                    ints(pa.uint8(), ops), *images))


@needs_native
def test_batch_builder_holds_the_same_values_as_decode():
    specs = [
        ("int", 4, 0, [], "", ""), ("enum", 1, 0, ["a", "b,c"], "", ""), ("text", 2, 0, [], "utf8", "strict"),
        ("text", 1, 0, [], "cp1252", "strict"), ("bytes", 1, 4, [], "", ""), ("set", 1, 0, ["x", "ü"], "", ""),
    ]
    layout = native.RowLayout("db.t", specs)
    row = (b"\x00" + (7).to_bytes(4, "little") + b"\x02" + _length_prefixed("héllo 😀".encode(), 2)
           + _length_prefixed("€".encode("cp1252")) + _length_prefixed(b"\xff\x01") + b"\x03")
    # enum index 0 (''), UTF-8 text NULL, an empty BINARY(4), no set member
    empty_enum = b"\x04" + (8).to_bytes(4, "little") + b"\x00" + _length_prefixed(b"\x00") + _length_prefixed(b"") + b"\x00"
    builder = native.ChangeBatchBuilder()
    for event_type in (WRITE_V1, UPDATE_V1, DELETE_V1):
        body = _body(len(specs), [row, empty_enum], event_type)
        assert builder.add_event(layout, event_type, body, 0, len(body), 0, 42, 10 * event_type, 3) == (
            1 if event_type == UPDATE_V1 else 2)
    assert len(builder) == 5
    ins, upd, dele = (layout.decode(t, _body(len(specs), [row, empty_enum], t)) for t in (WRITE_V1, UPDATE_V1, DELETE_V1))
    assert ins[0][4] == "\xff\x01\x00\x00" and ins[1][1:] == ("", None, "\x00", "\x00" * 4, "")
    assert _batch_rows(builder) == [
        (42, 230, 3, 0, None, ins[0]), (42, 231, 3, 0, None, ins[1]),
        (42, 240, 3, 1, upd[0], upd[1]),
        (42, 250, 3, 2, dele[0], None), (42, 251, 3, 2, dele[1], None),
    ]
    assert len(builder) == 0  # finish empties it
    builder.add_row(5, 0, 1, 1, ("1", None), ("2", "x"))
    builder.add_row(5, 1, 0, 0, None, ())
    assert _batch_rows(builder) == [(5, 0, 1, 1, ("1", None), ("2", "x")), (5, 1, 0, 0, None, ())]


@needs_native
def test_batch_builder_errors_name_the_table_and_poison_the_builder():
    layout = native.RowLayout("db.t", [("text", 1, 0, [], "utf8", "strict")])
    builder = native.ChangeBatchBuilder()
    bad = _body(1, [b"\x00\x01\xff"])
    with pytest.raises(UnicodeDecodeError):
        builder.add_event(layout, WRITE_V1, bad, 0, len(bad), 0, 1, 0, 0)
    with pytest.raises(ValueError, match="failed earlier"):
        builder.finish()
    truncated = _body(1, [b"\x00\x05ab"])
    with pytest.raises(ValueError, match="db.t: row image truncated"):
        native.ChangeBatchBuilder().add_event(layout, WRITE_V1, truncated, 0, len(truncated), 0, 1, 0, 0)
    with pytest.raises(ValueError, match="op code 7"):
        native.ChangeBatchBuilder().add_row(1, 0, 0, 7, None, None)


@needs_native
def test_nulls_absent_columns_updates_and_v2_post_header():
    layout = native.RowLayout("db.t", [("int", 4, 0, [], "", "")] * 3)
    # column 1 absent from the image (MINIMAL row image), column 2 NULL
    present = bytes([0b101])
    rows = [b"\x02" + (7).to_bytes(4, "little"), b"\x00" + (8).to_bytes(4, "little") + (9).to_bytes(4, "little")]
    assert layout.decode(UPDATE_V1, _body(3, rows, UPDATE_V1, present)) == [("7", None, None), ("8", None, "9")]
    row = b"\x00" + b"".join((n).to_bytes(4, "little", signed=True) for n in (1, -2, 3))
    body = _body(3, [row, row], WRITE_V2)
    assert layout.decode(WRITE_V2, b"junk" + body, 4, 4 + len(body)) == [("1", "-2", "3")] * 2


@needs_native
def test_bad_bodies_raise_errors_naming_the_table():
    layout = native.RowLayout("db.t", [("int", 4, 0, [], "", "")] * 2)
    with pytest.raises(ValueError, match="db.t: the event has 3 columns but the layout 2"):
        layout.decode(WRITE_V1, _body(3, []))
    with pytest.raises(ValueError, match="db.t: row image truncated"):
        layout.decode(WRITE_V1, _body(2, [b"\x00\x01\x00"]))
    with pytest.raises(ValueError, match="not a WRITE/UPDATE/DELETE_ROWS event"):
        layout.decode(19, _body(2, []))
    with pytest.raises(UnicodeDecodeError):
        native.RowLayout("db.t", [("text", 1, 0, [], "utf8", "strict")]).decode(WRITE_V1, _body(1, [b"\x00\x01\xff"]))
    with pytest.raises(ValueError, match="unknown column kind"):
        native.RowLayout("db.t", [("uuid", 1, 0, [], "", "")])


def _binlog_column(field_type: int, **attributes) -> Column:
    defaults = dict(type=field_type, name="c", unsigned=False, character_set_name=None, enum_values=None, set_values=None)
    return Column(**(defaults | attributes))


def _table(*columns: ColumnInfo) -> TableInfo:
    return TableInfo("db", "t", 1, columns, 1)


@needs_native
def test_layouts_fall_back_to_pure_python_for_what_native_does_not_reproduce():
    compile_layout = native_decode.compile_layout
    assert compile_layout(native, _table(ColumnInfo("c", "int")), [_binlog_column(FIELD_TYPE.LONG)]) is not None
    # MySQL binary JSON, and metadata that disagrees with the schema store
    assert compile_layout(native, _table(ColumnInfo("c", "json")), [_binlog_column(FIELD_TYPE.JSON, length_size=4)]) is None
    assert compile_layout(native, _table(ColumnInfo("c", "datetime", scale=3)),
                          [_binlog_column(FIELD_TYPE.DATETIME2, fsp=6)]) is None
    assert compile_layout(native, _table(ColumnInfo("c", "varchar")), [_binlog_column(FIELD_TYPE.LONG)]) is None
    assert compile_layout(native, _table(ColumnInfo("c", "int"), ColumnInfo("d", "int")),
                          [_binlog_column(FIELD_TYPE.LONG)]) is None
    # a binary column decoded under a text charset is left to the reference path
    assert compile_layout(native, _table(ColumnInfo("c", "varbinary", charset="binary")),
                          [_binlog_column(FIELD_TYPE.VARCHAR, max_length=10, character_set_name="utf8")]) is None


def test_string_specs_follow_the_pure_paths_charset_handling():
    spec = native_decode._column_spec
    assert spec(ColumnInfo("c", "varchar", charset="utf8mb4"),
                _binlog_column(FIELD_TYPE.VARCHAR, max_length=1200, character_set_name="utf8")) == (
        "text", 2, 0, [], "utf8", "strict")
    assert spec(ColumnInfo("c", "blob", charset="binary"),
                _binlog_column(FIELD_TYPE.BLOB, length_size=2, character_set_name="binary")) == (
        "bytes", 2, 0, [], "", "")
    assert spec(ColumnInfo("c", "binary", charset="binary", length=4),
                _binlog_column(FIELD_TYPE.STRING, max_length=4, character_set_name="binary")) == (
        "bytes", 1, 4, [], "", "")
    # a charset Python has no codec for: mysql-replication leaves bytes, values._text reads UTF-8
    assert spec(ColumnInfo("c", "varchar", charset="swe7"),
                _binlog_column(FIELD_TYPE.VARCHAR, max_length=10, character_set_name="swe7")) == (
        "text", 1, 0, [], "utf-8", "surrogateescape")


def test_connections_without_tls_options_share_one_preferred_tls_context():
    import ssl

    from pymysql.connections import Connection

    from sparkcdc.upstream import decoder_fixes  # noqa: F401  (applies the fixes)

    first = Connection._create_ssl_ctx(None, {})
    assert Connection._create_ssl_ctx(None, {}) is first
    assert first.verify_mode == ssl.CERT_NONE and not first.check_hostname
    # explicit TLS options still get their own context
    assert Connection._create_ssl_ctx(None, {"verify_mode": "required"}) is not first
