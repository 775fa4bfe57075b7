"""An empty micro-batch (only the binlog source's range marker) is written without a Spark job:
the runner rebuilds the marker's table from the batch's planned partition."""

from __future__ import annotations

import pickle

from pyspark.sql.datasource import InputPartition

from sparkcdc.pipeline.runner import marker_only_table
from sparkcdc.pipeline.source import _MarkerPartition, marker_batch


def test_a_sole_marker_partition_gives_the_marker_table():
    table = marker_only_table(pickle.dumps(_MarkerPartition(17, 42)))
    assert table is not None
    assert table.schema == marker_batch(17, 42).schema
    assert table.to_pylist() == marker_batch(17, 42).to_pylist()
    assert table.column("seq").to_pylist() == [17] and table.column("commit_ts").to_pylist() == [42]


def test_anything_else_runs_the_batch():
    assert marker_only_table(None) is None  # no plan to read: another Spark's internals
    assert marker_only_table(b"") is None
    assert marker_only_table(b"not a pickle") is None
    assert marker_only_table(pickle.dumps(InputPartition(0))) is None  # e.g. a binlog range
