"""The binlog sources' readers (pipeline/source.py: the stream's, and the batch reader of partitions
planned in advance) and their read tasks.

A thin adapter: offsets, pacing and partitions come from pipeline/planning.py (the driver side,
shared with the Spark Connect loop), the change batches from upstream/range_reader.py (the read
tasks, on executors), and their way through Spark from pipeline/transport.py. The batch's range
marker is read without the upstream (model/change_batch.py).

Executors import this module in every fresh Python worker (the stream reader is pickled to
them), so it imports only what a read task needs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from sparkcdc.model.change_batch import marker_batch
from sparkcdc.pipeline.planning import (BatchOffset, BatchPacer, BatchPlan, ChunkPartition, MarkerPartition, SourceOptions,
                                        plan_partitions)
from sparkcdc.pipeline.transport import pack_batch, spool_batches
from sparkcdc.pipeline.without_pandas import in_spark_worker, keep_pandas_out
from sparkcdc.upstream.range_reader import read_range_batches
from sparkcdc.upstream.snapshot_reader import read_chunk_batches

if TYPE_CHECKING:  # the driver-side planning modules stay out of the executors' imports
    from sparkcdc.upstream.txn_index import TxnIndex


def read_partition(partition: InputPartition, spool_dir: str = "") -> Iterator[pa.RecordBatch]:
    """A read task (a binlog range, or a snapshot chunk): the partition's change batches packed for
    Spark (SPARK_SCHEMA), or with
    `spool_dir` one value naming the file they were spooled to (pipeline/transport.py). With
    `spool_dir` the executors are local, this server's own: their workers keep pandas out."""
    if spool_dir and in_spark_worker():
        keep_pandas_out()
    if isinstance(partition, MarkerPartition):
        yield pack_batch(marker_batch(partition.start, partition.end))
        return
    if isinstance(partition, ChunkPartition):
        batches = read_chunk_batches(partition.chunk)
    else:
        batches = read_range_batches(partition.binlog_range)
    if spool_dir:
        yield spool_batches(batches, spool_dir)
        return
    for batch in batches:
        yield pack_batch(batch)


class BinlogStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions):
        self.options = options
        self._warned: set[tuple[str, str, int]] = set()
        self._pacer = BatchPacer(options.batch_interval_ms / 1000)
        self._txn_index: "TxnIndex | None" = None

    def _index(self) -> "TxnIndex":
        if self._txn_index is None:  # latestOffset runs every pollingDelay: open the index once
            from sparkcdc.upstream.txn_index import TxnIndex

            self._txn_index = TxnIndex(self.options.index_path)
        return self._txn_index

    def initialOffset(self) -> dict:
        return BatchOffset(self.options.start_ts).to_json()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        """The next batch's end when BatchPacer lets it run now, else `start` (Spark then runs no
        batch and asks again after spark.sql.streaming.pollingDelay). Always `start` while the
        hold file exists."""
        begin = BatchOffset.of(start) if start else BatchOffset(self.options.start_ts)
        if self.options.hold_file and os.path.exists(self.options.hold_file):
            return begin.to_json()
        return self._pacer.plan(self._index(), begin, self.options.capped()).to_json()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start, end = BatchOffset.of(start), BatchOffset.of(end)
        return plan_partitions(self._index(), self.options, start, end, self._warned, self._pacer.sizes_of(start, end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options.spool_dir)

    def commit(self, end: dict) -> None:
        # The checkpoint is advanced by the sink after it flushed, not here.
        pass


class PlannedBinlogReader(DataSourceReader):
    """Reads the partitions the capture planned, as the stream reader's read tasks do."""

    def __init__(self, plan: BatchPlan):
        self._plan = plan

    def partitions(self) -> Sequence[InputPartition]:
        return list(self._plan.partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self._plan.options.spool_dir)
