"""The Arrow batches the Spark source yields: their schema is Spark's ROW_SCHEMA, the range
marker row, and the reference builder's conversion of row changes."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from sparkcdc.model.events import RowChange
from sparkcdc.pipeline.source import RANGE_MARKER, ROW_SCHEMA, marker_batch
from sparkcdc.upstream.range_reader import CHANGE_SCHEMA, PythonBatchBuilder

_TYPES = {"long": LongType(), "string": StringType(), "array<string>": ArrayType(StringType())}


def test_change_schema_is_what_spark_expects_for_row_schema():
    # Spark compares a reader's first batch with to_arrow_schema(ROW_SCHEMA) and fails the task
    # on any difference, so the two definitions must not drift apart.
    fields = [StructField(name, _TYPES[kind]) for name, kind in (f.split(" ", 1) for f in ROW_SCHEMA.split(", "))]
    expected = to_arrow_schema(StructType(fields), timezone="UTC")
    assert expected.equals(CHANGE_SCHEMA)
    assert [f.type.value_field.name for f in CHANGE_SCHEMA if pa.types.is_list(f.type)] == [
        f.type.value_field.name for f in expected if pa.types.is_list(f.type)]


def test_marker_batch_carries_the_bounds():
    batch = marker_batch(10, 20)
    assert batch.schema.equals(CHANGE_SCHEMA)
    assert batch.to_pylist() == [{"commit_ts": 20, "seq": 10, "schema_name": "", "table_name": "", "op": RANGE_MARKER,
                                  "before": None, "after": None}]


def test_python_builder_keeps_order_images_and_nulls():
    builder = PythonBatchBuilder()
    changes = [
        RowChange(7, "db", "t", "insert", None, ("1", None), 0),
        RowChange(7, "db", "u", "update", ("1", "a"), ("1", "b"), 1),
        RowChange(9, "db", "t", "delete", ("1", ""), None, 0),
    ]
    assert builder.add_changes(changes) == 3 and len(builder) == 3
    batch = builder.finish()
    assert len(builder) == 0
    assert batch.schema.equals(CHANGE_SCHEMA)
    assert [(r["commit_ts"], r["seq"], r["table_name"], r["op"], r["before"], r["after"]) for r in batch.to_pylist()] == [
        (7, 0, "t", "insert", None, ["1", None]), (7, 1, "u", "update", ["1", "a"], ["1", "b"]),
        (9, 0, "t", "delete", ["1", ""], None)]


def test_tables_of_orders_groups_and_drops_the_marker():
    from sparkcdc.pipeline.batch_sink import tables_of

    def rows_by_table(batch: pa.Table) -> dict:
        return {(rows.schema, rows.table): rows.changes() for rows in tables_of(batch)}

    builder = PythonBatchBuilder()
    builder.add_changes([
        RowChange(9, "db", "u", "insert", None, ("3",), 0),
        RowChange(7, "db", "t", "update", ("1",), ("2",), 1),
        RowChange(7, "db", "u", "delete", ("1",), None, 0),
    ])
    table = pa.Table.from_batches([marker_batch(5, 9), builder.finish()])
    grouped = rows_by_table(table)
    assert list(grouped) == [("db", "u"), ("db", "t")]  # first appearance in (commit_ts, seq) order
    assert grouped[("db", "u")] == [RowChange(7, "db", "u", "delete", ("1",), None, 0),
                                    RowChange(9, "db", "u", "insert", None, ("3",), 0)]
    assert grouped[("db", "t")] == [RowChange(7, "db", "t", "update", ("1",), ("2",), 1)]
    assert rows_by_table(pa.Table.from_batches([marker_batch(5, 9)])) == {}


def test_change_batch_from_native_buffers_equals_the_reference_builder():
    # The native framer hands its buffers and table names to change_batch; so does NativeBatchBuilder.
    import pytest

    from sparkcdc.upstream.native_decode import native_module
    from sparkcdc.upstream.range_reader import change_batch

    native = native_module()
    if native is None:
        pytest.skip("sparkcdc_native not built")
    changes = [
        RowChange(7, "db", "t", "insert", None, ("1", None), 0),
        RowChange(7, "db", "u", "update", ("1", "a"), ("1", "b"), 1),
        RowChange(9, "other", "t", "delete", ("1", ""), None, 0),
    ]
    names = [("db", "u"), ("db", "t"), ("other", "t")]
    builder = native.ChangeBatchBuilder()
    for change in changes:
        builder.add_row(change.commit_ts, change.seq, names.index((change.schema, change.table)),
                        {"insert": 0, "update": 1, "delete": 2}[change.op], change.before, change.after)
    reference = PythonBatchBuilder()
    reference.add_changes(changes)
    assert change_batch(builder.finish(), names).equals(reference.finish())
