"""Warm a capture's Spark at start, so the first changefeed it takes over does not start cold.

A fresh SparkSession pays once for much of a streaming query's first batch: the Py4J callback
server that runs `foreachBatch`, Spark's planner and source processes, Arrow's conversion path
and the JVM's first compilation of the streaming classes, and with executors elsewhere the
Python daemon and its reused workers (spark.python.worker.reuse), importing sparkcdc's source
and decoder modules in them. A failover lands a changefeed on a capture that may never have run
one. This runs one tiny micro-batch through a changefeed's path (the binlog source's
range-marker batch, which needs no upstream, then `foreachBatch` and `toArrow`; with a local
master, whose changefeeds read their batches in the driver, a batch with no read task) in the
background at capture start, so a takeover pays only for its own query.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sparkcdc.pipeline.source import SPARK_SCHEMA

log = logging.getLogger(__name__)

WARMUP_SOURCE_NAME = "sparkcdc_warmup"
_WARMUP_END_TS = 1


class _WarmupStreamReader(DataSourceStreamReader):
    """One micro-batch (0, 1]: the binlog source's range-marker batch, read by `tasks` tasks at
    once so that each of the executor's Python workers (one per core) is started and warm; with
    `tasks` 0 a batch with nothing to read, which starts no Python worker."""

    def __init__(self, tasks: int = 1):
        self.tasks = max(0, tasks)

    def initialOffset(self) -> dict:
        return {"ts": 0}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        return {"ts": _WARMUP_END_TS}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [InputPartition(task) for task in range(self.tasks)] if int(end["ts"]) > int(start["ts"]) else []

    def read(self, partition: InputPartition) -> Iterator:
        # The binlog source's own range-marker batch: the worker imports (and, reused, keeps)
        # the source's read path and Spark takes the same Arrow route as a changefeed's rows.
        from sparkcdc.pipeline.planning import MarkerPartition
        from sparkcdc.pipeline.stream_reader import read_partition

        yield from read_partition(MarkerPartition(0, _WARMUP_END_TS))

    def commit(self, end: dict) -> None:
        pass


class WarmupDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return WARMUP_SOURCE_NAME

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return _WarmupStreamReader(int(self.options.get("tasks", "1")))


class WarmupCancelled(Exception):
    """A changefeed started here before the warm-up finished."""


def warm_up(spark, timeout: float = 300.0, cancelled: threading.Event | None = None) -> float:
    """Run one micro-batch through a streaming query like a changefeed's; the seconds it took.
    Setting `cancelled` stops the query and raises WarmupCancelled."""
    # Here, not at the top: Spark's planner workers unpickle WarmupDataSource and, reused, keep
    # what its module imported (pipeline/source.py says why that stays PySpark's API alone).
    from sparkcdc.pipeline.query_rest import wait_until_started
    from sparkcdc.pipeline.transport import unpack_changes

    began = time.monotonic()
    cancelled = cancelled or threading.Event()
    spark.dataSource.register(WarmupDataSource)
    checkpoint_dir = tempfile.mkdtemp(prefix="sparkcdc-warmup-")
    seen: list[int] = []

    def write(df, batch_id: int) -> None:
        if cancelled.is_set():
            return  # stopping: no read job for the stop to cancel
        try:
            seen.append(unpack_changes(df.toArrow()).num_rows)
        except Exception:
            if not cancelled.is_set():
                raise

    # With executors elsewhere a changefeed's batch runs one read task per core (`_parallelism` in
    # pipeline/runner.py); a worker the warm-up did not start would import the source's modules in
    # the first batch. With a local master the driver reads every batch itself (the runner's
    # LoggedBatchPlan): Python workers started here would only sit idle through the changefeed's
    # start and catch-up (~450 MiB), so none is.
    local = spark.sparkContext.master.startswith("local")
    tasks = 0 if local else max(1, spark.sparkContext.defaultParallelism)
    try:
        query = (spark.readStream.format(WARMUP_SOURCE_NAME).option("tasks", str(tasks)).load()
                 .writeStream.queryName("sparkcdc-warmup")
                 .foreachBatch(write)
                 .option("checkpointLocation", checkpoint_dir)
                 .trigger(availableNow=True)
                 .start())
        try:
            while not query.awaitTermination(0.2):
                if cancelled.is_set():
                    raise WarmupCancelled()
                if time.monotonic() - began > timeout:
                    raise TimeoutError(f"the warm-up query did not finish within {timeout:.0f}s")
        finally:
            wait_until_started(query)  # stopped while it starts, it strands Spark's source process
            query.stop()
    finally:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    if seen != [tasks]:
        raise RuntimeError(f"the warm-up query saw batches of {seen} rows, expected one of {tasks}")
    return time.monotonic() - began


class WarmUp:
    """A warm-up running in the background."""

    def __init__(self, thread: threading.Thread, cancelled: threading.Event):
        self.thread = thread
        self._cancelled = cancelled

    def cancel(self) -> None:
        """Stop the warm-up if it still runs, without waiting: a changefeed starting now warms
        Spark by itself, and two first queries on a small machine slow each other down."""
        self._cancelled.set()


def start_warm_up(spark, attempts: int = 3, delay: float = 0.0) -> WarmUp:
    """Warm `spark` in a daemon thread after `delay` seconds; a failure is logged, never raised
    (it is an optimisation).

    Retried: on a loaded machine a query's first Python worker may miss Spark's 10 s deadline to
    connect back, the very cost the warm-up is there to pay."""
    from sparkcdc.pipeline.spark_session import planner_use  # not for the planner workers that unpickle this module

    cancelled = threading.Event()

    def run() -> None:
        if cancelled.wait(delay):
            return  # a changefeed came first: nothing to warm
        began = time.monotonic()
        for attempt in range(1, attempts + 1):
            try:
                with planner_use():  # not stopped beneath it by a changefeed's catch-up
                    seconds = warm_up(spark, cancelled=cancelled)
            except Exception as exc:
                if cancelled.is_set():
                    log.info("Spark warm-up stopped after %.1fs: a changefeed started", time.monotonic() - began)
                    return
                if attempt < attempts:
                    log.info("Spark warm-up attempt %d failed; retrying: %s", attempt, _first_line(exc))
                    continue
                log.warning("Spark warm-up failed (the first changefeed here starts cold): %s", _first_line(exc))
                return
            log.info("Spark warm-up done in %.1fs (last attempt %.1fs)", time.monotonic() - began, seconds)
            return

    thread = threading.Thread(target=run, name="spark-warm-up", daemon=True)
    thread.start()
    return WarmUp(thread, cancelled)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)
