"""Differential test of `encode_arrow` for canal-json and CSV: the native encoders
(sparkcdc_native's CanalJsonLayout and CsvLayout), the Python reference path and `encode_rows`
over RowChanges write the same bytes for random tables, values of every column type, ops, and
every SinkConfig option the encoders honour; sliced and chunked arrays included."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcdc.config.replica import CSVConfig, SinkConfig
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.sink.codec.canal_json import CanalJSONEncoder
from sparkcdc.sink.codec.csv import CSVEncoder
from sparkcdc.upstream import native_decode

IMAGE = pa.list_(pa.string())
ENUM = ("a", "b,c", "it's", "", "é", "<&>")
SET = ("x", "y", "z'q", "ü", "\u2028")
# Text that exercises Go's escaping: quotes, backslash, control characters, HTML, U+2028/2029.
TRICKY = st.sampled_from(['"', "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "<", ">", "&", "\u2028",
                          "\u2029", "é", "😀", "\ufffd", "\u0085"])
TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=4)), max_size=6).map("".join)
LATIN1 = st.binary(max_size=12).map(lambda raw: raw.decode("latin-1"))

_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}


def _int_values(name: str, unsigned: bool):
    bits = _INT_BITS[name]
    if unsigned:  # near the signed maximum too, where the Java type is promoted
        edge = 2 ** (bits - 1)
        return st.one_of(st.integers(0, 2**bits - 1), st.integers(edge - 2, edge + 1)).map(str)
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1).map(str)


def _set_values():
    return st.lists(st.sampled_from(SET), unique=True).map(",".join)


# (ColumnInfo keyword arguments, value strategy) per column shape.
_SHAPES = [
    *[(dict(mysql_type=name, unsigned=unsigned), _int_values(name, unsigned))
      for name in _INT_BITS for unsigned in (False, True)],
    (dict(mysql_type="bool"), st.sampled_from(["0", "1"])),
    (dict(mysql_type="float"), st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr)),
    (dict(mysql_type="double"), st.floats(allow_nan=False, allow_infinity=False).map(repr)),
    (dict(mysql_type="decimal", precision=12, scale=3), st.decimals(-10**8, 10**8, places=3).map(str)),
    (dict(mysql_type="decimal"), st.integers(-10**9, 10**9).map(str)),
    (dict(mysql_type="date"), st.dates().map(str)),
    (dict(mysql_type="datetime", scale=3), st.datetimes().map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3])),
    (dict(mysql_type="timestamp"), st.datetimes().map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S"))),
    (dict(mysql_type="time", scale=1), st.sampled_from(["-838:59:59.0", "00:00:00.5", "12:34:56.0"])),
    (dict(mysql_type="year"), st.integers(1901, 2155).map(str)),
    (dict(mysql_type="bit", length=10), st.integers(0, 1023).map(str)),
    (dict(mysql_type="enum", elements=ENUM), st.sampled_from(ENUM)),
    (dict(mysql_type="set", elements=SET), _set_values()),
    (dict(mysql_type="char", length=4, charset="utf8mb4"), TEXT),
    (dict(mysql_type="varchar", length=255, charset="utf8mb4"), TEXT),
    (dict(mysql_type="text", charset="utf8mb4"), TEXT),
    (dict(mysql_type="json"), TEXT),
    (dict(mysql_type="binary", length=4, charset="binary"), LATIN1),
    (dict(mysql_type="varbinary", length=12, charset="binary"), LATIN1),
    (dict(mysql_type="varchar", length=12, charset="binary"), LATIN1),
    (dict(mysql_type="blob", charset="binary"), LATIN1),
    (dict(mysql_type="geometry"), LATIN1),
]


@st.composite
def tables(draw):
    shapes = draw(st.lists(st.sampled_from(_SHAPES), max_size=7))
    names = draw(st.lists(st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), TEXT.filter(bool)),
                          min_size=len(shapes), max_size=len(shapes), unique=True))
    keys = draw(st.lists(st.booleans(), min_size=len(shapes), max_size=len(shapes)))
    columns = tuple(ColumnInfo(name, is_primary_key=key, nullable=not key, **shape)
                    for name, key, (shape, _) in zip(names, keys, shapes))
    handle_key = tuple(name for name, key in zip(names, keys) if key)
    table = TableInfo(draw(TEXT), draw(TEXT), 7, columns, 3, handle_key=handle_key)
    return table, [values for _, values in shapes]


@st.composite
def images(draw, table_and_values):
    table, values = table_and_values
    return tuple(draw(st.none() | strategy) if col.nullable else draw(strategy)
                 for col, strategy in zip(table.columns, values))


@st.composite
def transactions(draw, table_and_values):
    """Rows of whole transactions in commit-ts order, as encode_arrow receives them."""
    table, _ = table_and_values
    rows = []
    commit_ts = draw(st.integers(0, 2**62))
    for _ in range(draw(st.integers(1, 4))):
        commit_ts += draw(st.integers(1, 2**30))
        for seq in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(["insert", "update", "delete"]))
            before = draw(images(table_and_values)) if op != "insert" else None
            after = draw(images(table_and_values)) if op != "delete" else None
            if op == "update" and draw(st.booleans()):  # some columns unchanged
                keep = draw(st.lists(st.booleans(), min_size=len(before), max_size=len(before)))
                after = tuple(b if k else a for b, a, k in zip(before, after, keep))
            rows.append(RowChange(commit_ts, table.schema, table.table, op, before, after, seq))
    return rows


SINKS = st.builds(
    SinkConfig,
    terminator=st.sampled_from(["\r\n", "\n"]),
    enable_tidb_extension=st.booleans(),
    only_output_updated_columns=st.booleans(),
    delete_only_output_handle_key_columns=st.booleans(),
    content_compatible=st.booleans(),
)


def _columns(rows: list[RowChange], pad: int = 0):
    """encode_arrow's arguments for `rows`, as slices with `pad` unrelated rows either side."""
    filler = [rows[0]] * pad
    padded = filler + rows + filler
    arrays = (
        pa.array([r.commit_ts for r in padded], pa.int64()),
        pa.array([r.op for r in padded], pa.string()),
        pa.array([None if r.before is None else list(r.before) for r in padded], IMAGE),
        pa.array([None if r.after is None else list(r.after) for r in padded], IMAGE),
    )
    return tuple(array.slice(pad, len(rows)) for array in arrays)


def _expected(encoder, table: TableInfo, rows: list[RowChange]) -> list[tuple[int, bytes]]:
    by_txn: dict[int, list[RowChange]] = {}
    for row in rows:
        by_txn.setdefault(row.commit_ts, []).append(row)
    return [(ts, encoder.encode_rows(table, txn)) for ts, txn in by_txn.items()]


native_encoder = native_decode.native_encoder_module()
needs_native = pytest.mark.skipif(native_encoder is None, reason=native_decode.decoder_description())
CLOCK = lambda: 1700000000.123  # noqa: E731


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), sink=SINKS, pad=st.integers(0, 2))
def test_python_encode_arrow_is_encode_rows_per_transaction(data, sink, pad):
    table_and_values = data.draw(tables())
    table = table_and_values[0]
    rows = data.draw(transactions(table_and_values))
    encoder = CanalJSONEncoder(sink, clock=CLOCK, native=False)
    assert encoder.encode_arrow(table, *_columns(rows, pad)) == _expected(encoder, table, rows)


@needs_native
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), sink=SINKS, pad=st.integers(0, 2))
def test_native_encode_arrow_matches_the_python_reference(data, sink, pad):
    table_and_values = data.draw(tables())
    table = table_and_values[0]
    rows = data.draw(transactions(table_and_values))
    native = CanalJSONEncoder(sink, clock=CLOCK)
    python = CanalJSONEncoder(sink, clock=CLOCK, native=False)
    assert native.is_native
    columns = _columns(rows, pad)
    assert native.encode_arrow(table, *columns) == python.encode_arrow(table, *columns) == _expected(python, table, rows)


@needs_native
def test_native_encoder_reads_chunked_arrays_and_null_free_buffers():
    table = TableInfo("db", "t", 1, (ColumnInfo("id", "int", is_primary_key=True, nullable=False),
                                     ColumnInfo("v", "varchar", length=9)), 1, handle_key=("id",))
    rows = [RowChange(5 << 18, "db", "t", "insert", None, ("1", "a<b")),
            RowChange(5 << 18, "db", "t", "update", ("1", "a<b"), ("1", None)),
            RowChange(9 << 18, "db", "t", "delete", ("1", None), None)]
    columns = _columns(rows)
    chunked = tuple(pa.chunked_array([c.slice(0, 1), c.slice(1)]) for c in columns)
    native, python = CanalJSONEncoder(SinkConfig(), clock=CLOCK), CanalJSONEncoder(SinkConfig(), clock=CLOCK, native=False)
    expected = _expected(python, table, rows)
    assert native.encode_arrow(table, *chunked) == expected
    assert [ts for ts, _ in expected] == [5 << 18, 9 << 18]
    assert native.encode_arrow(table, *(c.slice(0, 0) for c in columns)) == []
    # list values that are themselves a slice (the child array has an offset of its own)
    values = pa.array(["junk", "1", "a<b", "1", None])[1:]
    after = pa.ListArray.from_arrays(pa.array([0, 2, 4], pa.int32()), values)
    assert after.values.offset == 1
    inserts = [RowChange(5 << 18, "db", "t", "insert", None, ("1", "a<b")),
               RowChange(5 << 18, "db", "t", "insert", None, ("1", None))]
    assert native.encode_arrow(table, columns[0][:2], pa.array(["insert"] * 2), pa.nulls(2, IMAGE), after) == (
        _expected(python, table, inserts))


def test_clock_is_read_once_per_call():
    ticks = iter(range(1, 100))
    encoder = CanalJSONEncoder(SinkConfig(), clock=lambda: next(ticks), native=False)
    table = TableInfo("db", "t", 1, (ColumnInfo("id", "int"),), 1)
    rows = [RowChange(ts << 18, "db", "t", "insert", None, ("1",)) for ts in (1, 2)]
    out = encoder.encode_arrow(table, *_columns(rows))
    assert all(b'"ts":1000,' in data for _, data in out)


@pytest.mark.parametrize("native", [False, pytest.param(True, marks=needs_native)])
def test_bad_columns_name_the_problem(native):
    encoder = CanalJSONEncoder(SinkConfig(), clock=CLOCK, native=native)
    table = TableInfo("db", "t", 1, (ColumnInfo("id", "int"), ColumnInfo("e", "enum", elements=("a",))), 1)
    ts, ops = pa.array([1], pa.int64()), pa.array(["insert"])
    with pytest.raises(ValueError, match="unknown ops \\['upsert'\\]; use insert, update or delete"):
        encoder.encode_arrow(table, ts, pa.array(["upsert"]), pa.array([None], IMAGE), pa.array([["1", "a"]], IMAGE))
    with pytest.raises(ValueError, match="db.t.* has 1 values but the table (has )?2 columns"):
        encoder.encode_arrow(table, ts, ops, pa.array([None], IMAGE), pa.array([["1"]], IMAGE))
    with pytest.raises(ValueError, match="differ in length"):
        encoder.encode_arrow(table, ts, pa.array(["insert", "insert"]), pa.array([None], IMAGE), pa.array([["1", "a"]], IMAGE))
    with pytest.raises(ValueError, match="insert row needs before=False after=True"):
        encoder.encode_arrow(table, ts, ops, pa.array([["1", "a"]], IMAGE), pa.array([["1", "a"]], IMAGE))
    with pytest.raises(ValueError, match=r"""['"]b['"] is not"""):
        encoder.encode_arrow(table, ts, ops, pa.array([None], IMAGE), pa.array([["1", "b"]], IMAGE))


def test_an_older_native_build_without_the_encoder_falls_back(monkeypatch):
    class OlderBuild:  # a sparkcdc_native from before the encoder: decoder classes only
        __version__ = "0.0.9"
        ChangeBatchBuilder = RowLayout = object

    monkeypatch.delenv(native_decode.FORCE_PURE_ENCODER_ENV, raising=False)
    monkeypatch.delenv(native_decode.FORCE_PURE_ENV, raising=False)
    monkeypatch.setattr(native_decode, "_built_module", lambda: OlderBuild)
    assert native_decode.native_encoder_module() is None
    assert "canal-json/CSV encoders: pure Python (sparkcdc_native is older than native/" in native_decode.decoder_description()
    encoder = CanalJSONEncoder(SinkConfig(), clock=CLOCK)
    assert not encoder.is_native
    table = TableInfo("db", "t", 1, (ColumnInfo("id", "int"),), 1)
    rows = [RowChange(1 << 18, "db", "t", "insert", None, ("1",))]
    assert encoder.encode_arrow(table, *_columns(rows)) == _expected(encoder, table, rows)


def test_forcing_the_python_encoder(monkeypatch):
    monkeypatch.setenv(native_decode.FORCE_PURE_ENCODER_ENV, "1")
    assert native_decode.native_encoder_module() is None
    assert not CanalJSONEncoder(SinkConfig()).is_native
    assert "forced by SPARKCDC_PURE_PYTHON_ENCODER" in native_decode.decoder_description()


# -- CSV ------------------------------------------------------------------------------------
CSV_CONFIGS = st.builds(
    CSVConfig,
    delimiter=st.sampled_from([",", "|", ";;", "é"]),
    quote=st.sampled_from(['"', "'", ""]),
    null=st.sampled_from(["\\N", "", "NULL"]),
    include_commit_ts=st.booleans(),
    binary_encoding_method=st.sampled_from(["base64", "hex"]),
    output_old_value=st.booleans(),
    output_handle_key=st.booleans(),
)
CSV_SINKS = st.builds(SinkConfig, terminator=st.sampled_from(["\r\n", "\n"]), csv=CSV_CONFIGS)
needs_native_csv = pytest.mark.skipif(native_encoder is None or not hasattr(native_encoder, "CsvLayout"),
                                      reason=native_decode.decoder_description())


@needs_native_csv
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), sink=CSV_SINKS, pad=st.integers(0, 2))
def test_native_csv_encode_arrow_matches_the_python_reference(data, sink, pad):
    table_and_values = data.draw(tables())
    table = table_and_values[0]
    rows = data.draw(transactions(table_and_values))
    native, python = CSVEncoder(sink), CSVEncoder(sink, native=False)
    assert native.is_native and not python.is_native
    columns = _columns(rows, pad)
    assert native.encode_arrow(table, *columns) == python.encode_arrow(table, *columns) == _expected(python, table, rows)


@pytest.mark.parametrize("text", ["0", "-0.0", "1e+300", "1.5e-07", "123456.7", "1234567", "0.0001", "0.00001",
                                  "-3.14159", "100", "2.5E+3", "+7", "1000000.5"])
@needs_native_csv
def test_native_csv_floats_like_go_percent_v(text):
    table = TableInfo("db", "t", 1, (ColumnInfo("f", "double"),), 1)
    rows = [RowChange(1, "db", "t", "insert", None, (text,))]
    native, python = CSVEncoder(SinkConfig()), CSVEncoder(SinkConfig(), native=False)
    assert native.encode_arrow(table, *_columns(rows)) == _expected(python, table, rows)
