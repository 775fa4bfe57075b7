"""The Arrow batches the Spark source yields: CHANGE_SCHEMA batches packed one per row of Spark's
SPARK_SCHEMA, the range marker row, and the reference builder's conversion of row changes."""

from __future__ import annotations

import os

import pyarrow as pa
from hypothesis import given, settings, strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, StructField, StructType

from sparkcdc.model.events import RowChange
from sparkcdc.model.change_batch import CHANGE_SCHEMA, RANGE_MARKER, marker_batch
from sparkcdc.pipeline.source import SPARK_SCHEMA
from sparkcdc.pipeline.transport import pack_batch, spool_batches, unpack_changes
from sparkcdc.upstream.range_reader import PythonBatchBuilder


def test_packed_batches_are_what_spark_expects_for_its_schema():
    # Spark compares a reader's first batch with to_arrow_schema(SPARK_SCHEMA) and fails the task
    # on any difference, so the two definitions must not drift apart.
    name, kind = SPARK_SCHEMA.split(" ")
    assert kind == "binary"
    expected = to_arrow_schema(StructType([StructField(name, BinaryType())]), timezone="UTC")
    assert pack_batch(marker_batch(1, 2)).schema.equals(expected)


def test_unpacking_gives_back_every_batch_in_order():
    builder = PythonBatchBuilder()
    builder.add_changes([RowChange(7, "db", "t", "insert", None, ("1", None), 0),
                         RowChange(7, "db", "u", "update", ("1", "a"), ("1", "b"), 1)])
    rows = builder.finish()
    batches = [marker_batch(3, 9), rows, rows.slice(1)]
    # toArrow() returns the packed rows in chunks of any size, and an empty batch as no chunk.
    packed = pa.Table.from_batches([pa.concat_batches([pack_batch(b) for b in batches[:2]]), pack_batch(batches[2])])
    assert packed.column(0).num_chunks == 2
    table = unpack_changes(packed)
    assert table.schema.equals(CHANGE_SCHEMA)
    assert table.to_pylist() == [row for batch in batches for row in batch.to_pylist()]
    assert unpack_changes(pa.Table.from_batches([], schema=packed.schema)).num_rows == 0


def test_spooled_batches_unpack_like_packed_ones_and_their_files_go(tmp_path):
    builder = PythonBatchBuilder()
    builder.add_changes([RowChange(7, "db", "t", "insert", None, ("1", None), 0),
                         RowChange(7, "db", "u", "update", ("1", "a"), ("1", "b"), 1)])
    rows = builder.finish()
    first = spool_batches(iter([marker_batch(3, 9), rows]), str(tmp_path))
    empty = spool_batches(iter([]), str(tmp_path))  # a range with no rows of replicated tables
    assert first.schema.equals(pack_batch(rows).schema)
    assert len(os.listdir(tmp_path)) == 2
    # Spooled and inline values mix in one toArrow() result (the range marker is never spooled).
    table = unpack_changes(pa.Table.from_batches([first, pack_batch(rows.slice(1)), empty]))
    assert table.to_pylist() == marker_batch(3, 9).to_pylist() + rows.to_pylist() + rows.slice(1).to_pylist()
    assert os.listdir(tmp_path) == [], "the driver removes a spooled file once it has mapped it"


def test_each_spool_call_writes_its_own_file(tmp_path):
    # A retried or speculative task must not overwrite the file of the attempt Spark kept.
    values = {spool_batches(iter([marker_batch(1, 2)]), str(tmp_path)).column(0)[0].as_py() for _ in range(3)}
    assert len(values) == 3 and len(os.listdir(tmp_path)) == 3


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
        return {(rows.schema, rows.table): rows.changes() for rows in tables_of(batch)[1]}

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


_CHANGE = st.builds(lambda table, commit_ts, seq: RowChange(commit_ts, "db", table, "insert", None, (str(seq),), seq),
                    st.sampled_from(["t", "u", "v"]), st.integers(1, 3), st.integers(0, 3))


@settings(max_examples=60, deadline=None)
@given(changes=st.lists(_CHANGE, max_size=12), order=st.sampled_from(["drawn", "in order", "seq reversed"]))
def test_tables_of_groups_any_batch_like_a_stable_sort(changes, order):
    from sparkcdc.pipeline.batch_sink import tables_of

    if order != "drawn":  # "in order": as the source sends one table, no sort or take needed
        first_seen = {c.table: i for i, c in reversed(list(enumerate(changes)))}
        sign = -1 if order == "seq reversed" else 1
        changes = sorted(changes, key=lambda c: (first_seen[c.table], c.commit_ts, sign * c.seq))
    builder = PythonBatchBuilder()
    builder.add_changes(changes)
    expected: dict = {}
    for _, change in sorted(enumerate(changes), key=lambda p: (p[1].commit_ts, p[1].seq, p[0])):
        expected.setdefault(("db", change.table), []).append(change)
    sorted_rows, grouped = tables_of(pa.Table.from_batches([marker_batch(0, 3), builder.finish()]))
    assert {(rows.schema, rows.table): rows.changes() for rows in grouped} == expected
    assert [(rows.schema, rows.table) for rows in grouped] == list(expected)
    # Each table's rows are its run of the sorted rows, where `low` says.
    assert all(sorted_rows.slice(rows.low, rows.rows.num_rows).equals(rows.rows) for rows in grouped)


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
