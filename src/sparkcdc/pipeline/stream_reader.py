"""The binlog sources' readers (pipeline/source.py: the stream's, and the batch reader of partitions
planned in advance) and their read tasks.

A thin adapter: offsets, pacing and partitions come from pipeline/planning.py (the driver side,
shared with the Spark Connect loop), the change batches from upstream/range_reader.py (the read
tasks, on executors), and their way through Spark from pipeline/transport.py. The batch's range
marker is read without the upstream (model/change_batch.py). A small batch is read by the driver
itself (`read_in_driver`): its Spark job would cost more than its rows; with a local master, so is
every batch of whole transactions.

Executors import this module in every fresh Python worker (the stream reader is pickled to
them), so it imports only what a read task needs.
"""

from __future__ import annotations

import logging
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from sparkcdc.model.change_batch import CHANGE_SCHEMA, marker_batch
from sparkcdc.pipeline.planning import (BatchOffset, BatchPacer, BatchPlan, ChunkPartition, MarkerPartition,
                                        RangePartition, SourceOptions, batch_marker, plan_partitions)
from sparkcdc.pipeline.transport import pack_batch, spool_batches
from sparkcdc.pipeline.without_pandas import in_spark_worker, keep_pandas_out
from sparkcdc.upstream.range_reader import read_range_batches, read_range_batches_at_once
from sparkcdc.upstream.snapshot_reader import ChunkRead, read_chunk_batches

if TYPE_CHECKING:  # the driver-side planning modules stay out of the executors' imports
    from sparkcdc.upstream.txn_index import TxnIndex

log = logging.getLogger(__name__)

# A micro-batch whose binlog ranges span at most this many bytes is read by the driver
# (`read_small_batch`) instead of a Spark job. The job's fixed cost (scheduling, the Python workers'
# round trip, 0.2-0.3 s) is most of a caught-up changefeed's batch, and so of its latency, while
# the native framer reads a 5,000 rows/s changefeed's 1 s batch (~2 MB) in ~10 ms. With executors
# elsewhere (a cluster master) a catch-up's batches (8-32 MiB) run as Spark jobs, one read task per
# core; with a local master the driver reads those too (`read_in_driver`, no limit), a thread per
# range: the native framer decodes without the GIL, so the ranges decode on both cores beside the
# writer, and the job's ~0.15 s per batch is saved (docs/benchmarks.md).
SMALL_BATCH_BYTES = 4 << 20
# How long the driver's read of a small batch waits for a silent upstream; an upstream that refuses
# or drops the connection is not waited for at all. Either way the batch then goes to its read
# tasks, which wait for the upstream as always and which stopping the changefeed can cancel.
SMALL_BATCH_READ_TIMEOUT_SECONDS = 2.0


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
        if partition.marker is not None:  # the batch's first range: its marker comes first
            yield pack_batch(marker_batch(partition.marker.start, partition.marker.end))
        batches = read_range_batches(partition.binlog_range)
    if spool_dir:
        yield spool_batches(batches, spool_dir)
        return
    for batch in batches:
        yield pack_batch(batch)


def read_small_batch(picked: Optional[Sequence[bytes]], limit_bytes: int = SMALL_BATCH_BYTES) -> Optional[pa.Table]:
    """`read_in_driver` of a micro-batch's planned partitions as Spark holds them (pickled, in
    Spark's order); None when they are not this source's."""
    if not picked:
        return None
    try:
        partitions = [pickle.loads(value) for value in picked]
    except Exception:  # not this source's partitions
        return None
    return read_in_driver(partitions, limit_bytes)


def plain_span(ranges: Sequence[InputPartition]) -> Optional[int]:
    """The binlog bytes the batch's ranges span, when each is whole transactions within one binlog
    file (what the driver reads); None otherwise (a large transaction's piece, a range across a
    rotation, another kind of partition)."""
    span = 0
    for partition in ranges:
        if not isinstance(partition, RangePartition):
            return None
        r = partition.binlog_range
        if r.piece or r.table_maps or r.start.file != r.end.file:
            return None
        span += r.end.pos - r.start.pos
    return span


def read_in_driver(partitions: Sequence[InputPartition], limit_bytes: Optional[int]) -> Optional[pa.Table]:
    """A micro-batch's rows read in this process (the driver) from its planned partitions, in
    Spark's order: its range marker and binlog ranges, when those are whole transactions within
    one binlog file spanning at most `limit_bytes` in all (0: the marker alone), or, with
    `limit_bytes` None, any binlog ranges (a large transaction's pieces, ranges across a
    rotation). The same table as its read tasks would give (`read_partition`, then
    transport.unpack_changes); ranges are read in a thread each. None when the batch is for
    Spark to read: another plan, a larger batch, no native framer, or an upstream that does not
    answer at once."""
    try:
        marker, ranges = batch_marker(list(partitions))
    except Exception:  # not this source's partitions
        return None
    if marker is None or not all(isinstance(partition, RangePartition) for partition in ranges):
        return None
    if limit_bytes is not None and ((span := plain_span(ranges)) is None or span > limit_bytes):
        return None
    batches = [marker_batch(marker.start, marker.end)]
    reads: list = []
    if len(ranges) == 1:  # a caught-up changefeed's: no thread
        reads.append(_read_at_once(ranges[0]))
    elif ranges:
        with ThreadPoolExecutor(len(ranges), thread_name_prefix="driver-read") as pool:
            reads = list(pool.map(_read_at_once, ranges))
    for read in reads:
        if isinstance(read, Exception):
            log.info("the driver could not read the batch (%s..%s]: %s; its read tasks will",
                     marker.start, marker.end, read)
            return None
        if read is None:
            return None
        batches.extend(read)
    return pa.Table.from_batches(batches, schema=CHANGE_SCHEMA)


def read_chunks_in_driver(reads: Sequence[ChunkRead]) -> pa.Table:
    """A snapshot wave's chunks read in this process (the driver), a thread each, in the wave's
    order: the same table as the wave's read tasks would give (pipeline/snapshot.py reads it).
    With a local master the executors are this machine's cores anyway, and the Spark job of each
    wave cost more than its reads (its scheduling and Python workers' round trip, and the workers'
    memory). A read's failure is raised here, as the job's would be."""
    with ThreadPoolExecutor(len(reads), thread_name_prefix="snapshot-read") as pool:
        chunks = list(pool.map(lambda read: list(read_chunk_batches(read)), reads))
    return pa.Table.from_batches([batch for batches in chunks for batch in batches], schema=CHANGE_SCHEMA)


def _read_at_once(partition: RangePartition) -> "list[pa.RecordBatch] | Exception | None":
    try:
        return read_range_batches_at_once(partition.binlog_range, SMALL_BATCH_READ_TIMEOUT_SECONDS)
    except Exception as exc:
        return exc


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
