"""On a real SparkSession: the runner takes a micro-batch's planned partitions from its plan, in
order, and its read of a batch that holds only the binlog source's range marker returns exactly
the table Spark would read for it, and is not taken when the batch has something else to read;
and a batch's bounds in Spark's offset log are those Spark planned it for (LoggedBatchPlan).
One test, because a SparkSession costs ~20 s to start. (A small batch's binlog ranges read in the
driver: tests/integration/test_native_framer.py.)"""

from __future__ import annotations

import pickle
import sys
import tempfile
import time
from typing import Iterator, Sequence

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sparkcdc.pipeline.runner import LoggedBatchPlan, planned_partitions
from sparkcdc.pipeline.stream_reader import read_small_batch
from sparkcdc.pipeline.spark_session import make_spark_session
from sparkcdc.pipeline.source import SPARK_SCHEMA
from sparkcdc.pipeline.transport import pack_batch, unpack_changes
from sparkcdc.pipeline.planning import BatchOffset, MarkerPartition, SourceOptions
from sparkcdc.model.change_batch import marker_batch

# Spark's Python processes unpickle the test source by value: this module is not importable there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _TwoBatchReader(DataSourceStreamReader):
    """Batch (0, 1] is the marker alone; batch (1, 2] is the marker and a binlog-range stand-in."""

    def initialOffset(self) -> dict:
        return {"ts": 0}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        return {"ts": min(2, int(start["ts"]) + 1) if start else 1}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = int(start["ts"]), int(end["ts"])
        marker = [MarkerPartition(begin, stop)]
        return marker if stop == 1 else marker + [InputPartition(stop)]

    def read(self, partition: InputPartition) -> Iterator:
        yield pack_batch(marker_batch(partition.start, partition.end))  # batch (1, 2] is never read

    def commit(self, end: dict) -> None:
        pass


class _TwoBatchSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparkcdc_test_two_batches"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return _TwoBatchReader()


def test_marker_only_batch_skips_the_spark_job_and_reads_the_same():
    spark = make_spark_session("local[1]", "sparkcdc-test-marker-batch")
    try:
        spark.dataSource.register(_TwoBatchSource)
        seen = {}
        checkpoint = tempfile.mkdtemp()
        logged = LoggedBatchPlan(None, SourceOptions(index_path="", upstream_uri="", start_ts=0), checkpoint)
        bounds = {}

        def write(df, batch_id: int) -> None:
            picked = planned_partitions(df)
            shortcut = read_small_batch(picked)
            seen[batch_id] = (shortcut, unpack_changes(df.toArrow()) if batch_id == 0 else None, picked)
            bounds[batch_id] = logged.bounds(batch_id)

        query = (spark.readStream.format("sparkcdc_test_two_batches").load().writeStream
                 .foreachBatch(write).option("checkpointLocation", checkpoint)
                 .trigger(processingTime="100 milliseconds").start())
        deadline = time.monotonic() + 120
        while len(seen) < 2 and time.monotonic() < deadline and query.isActive:
            time.sleep(0.05)
        query.stop()
    finally:
        spark.stop()
    assert sorted(seen) == [0, 1], seen
    shortcut, read, _ = seen[0]
    assert shortcut is not None, "the marker-only batch was not recognised from its plan"
    assert shortcut.column_names == read.column_names
    assert [f.type for f in shortcut.schema] == [f.type for f in read.schema]
    assert shortcut.to_pylist() == read.to_pylist()
    assert seen[1][0] is None, "a batch with another partition to read was taken for a marker-only one"
    marker, stand_in = [pickle.loads(p) for p in seen[1][2]]  # in the order the source planned them
    assert marker == MarkerPartition(1, 2) and type(stand_in) is InputPartition and stand_in.value == 2
    # The driver's own plan (a local master) takes the batch's bounds from Spark's offset log, the
    # first batch's start from the source's options (its initial offset is in no log): the bounds
    # each batch's partitions were planned for.
    assert bounds == {0: (BatchOffset(0), BatchOffset(1)), 1: (BatchOffset(1), BatchOffset(2))}
