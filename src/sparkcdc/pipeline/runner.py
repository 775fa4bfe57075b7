"""Runs each changefeed as a streaming query in the capture's SparkSession.

A changefeed's query reads the binlog source from the changefeed's checkpoint-ts and writes
every micro-batch through `write_batch` in `foreachBatch`. The metadata store's checkpoint is
the single source of truth for where a changefeed resumes: each (re)start plans from it with a
fresh Spark checkpoint, so pause/resume, `--overwrite-checkpoint-ts` and a crash all resume the
same way. When a query fails, the changefeed is marked failed with the error, and other
changefeeds keep running.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from typing import Callable

from sparkcdc.config.replica import ReplicaConfig, replica_config_from_dict
from sparkcdc.filter.change_filters import ChangeFilters
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.pipeline.source import SOURCE_NAME, BinlogDataSource, SourceOptions
from sparkcdc.schema.rules import DDLPolicy
from sparkcdc.server.metastore import ChangefeedInfo, MetaStore
from sparkcdc.sink.factory import make_sink, splits_key_updates
from sparkcdc.upstream.txn_index import TxnIndex

log = logging.getLogger(__name__)


def make_spark_session(master: str = "local[*]", app_name: str = "sparkcdc"):
    """A SparkSession whose Python workers run this interpreter (see components.md)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(BinlogDataSource)
    return spark


@dataclass
class _Running:
    query: object
    sink: object  # a RowSink with close()
    stopping: threading.Event


class ChangefeedRunner:
    def __init__(
        self,
        spark,
        store: MetaStore,
        index_path: str,
        upstream_uri: str,
        work_dir: str,
        capture_address: str,
        trigger_interval: str = "1 second",
        clock: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc),
    ):
        self._spark = spark
        self._store = store
        self._index_path = index_path
        self._upstream_uri = upstream_uri
        self._work_dir = work_dir
        self._address = capture_address
        self._trigger = trigger_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Running] = {}
        self._next_server_id = 100000

    def running(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._running)

    def start(self, info: ChangefeedInfo) -> None:
        key = (info.namespace, info.id)
        with self._lock:
            if key in self._running:
                return
            config = replica_config_from_dict(info.config)
            # Anything up to the upstream's current position may already be downstream from a
            # previous run: the sink writes those rows idempotently (TiCDC's replicating ts).
            sink = make_sink(info.sink_uri, config, replicating_ts=TxnIndex(self._index_path).resolved_ts())
            status = self._store.get_status(info.namespace, info.id)
            # Each run's readers get their own server_id range.
            server_id_base = self._next_server_id
            self._next_server_id += 1000
            options = SourceOptions(
                index_path=self._index_path,
                upstream_uri=self._upstream_uri,
                start_ts=status.checkpoint_ts,
                target_ts=info.target_ts,
                server_id_base=server_id_base,
                parallelism=max(1, self._spark.sparkContext.defaultParallelism),
                filter_rules=tuple(config.filter.rules),
                case_sensitive=config.case_sensitive,
                force_replicate=config.force_replicate,
            )
            _warn_ineligible(TxnIndex(self._index_path), status.checkpoint_ts, config, info.id)
            checkpoint_dir = os.path.join(self._work_dir, info.namespace, info.id, "spark-checkpoint")
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
            stopping = threading.Event()
            query = (
                self._spark.readStream.format(SOURCE_NAME)
                .options(**options.to_options())
                .load()
                .writeStream.queryName(f"changefeed-{info.namespace}-{info.id}")
                .foreachBatch(self._batch_writer(info, config, sink))
                .option("checkpointLocation", checkpoint_dir)
                .trigger(processingTime=self._trigger)
                .start()
            )
            self._running[key] = _Running(query, sink, stopping)
        threading.Thread(
            target=self._watch, args=(key, query, stopping), name=f"watch-{info.id}", daemon=True
        ).start()
        log.info("changefeed %s/%s started at checkpoint %d", info.namespace, info.id, status.checkpoint_ts)

    def _batch_writer(self, info: ChangefeedInfo, config: ReplicaConfig, sink):
        index = TxnIndex(self._index_path)
        table_filter = TableFilter(config.filter.rules, config.case_sensitive)
        namespace, changefeed_id, target_ts = info.namespace, info.id, info.target_ts
        split_updates = splits_key_updates(info.sink_uri, config)
        ddl_policy = DDLPolicy(force_replicate=config.force_replicate, skip_unparseable=config.skip_unparseable_ddl)
        filters = ChangeFilters(config, info.sink_uri)

        def on_checkpoint(ts: int) -> None:
            self._store.advance_checkpoint(namespace, changefeed_id, ts, index.resolved_ts())
            if target_ts and ts >= target_ts:
                self._finish(namespace, changefeed_id)

        def write(df, batch_id: int) -> None:
            result = write_batch(df.toArrow(), index, sink, table_filter.match_event, on_checkpoint,
                                 split_updates, filters, ddl_policy)
            if result is not None and (result.rows or result.ddls):
                log.info("changefeed %s batch %d: (%d, %d] rows=%d ddls=%d", changefeed_id,
                         batch_id, result.start, result.end, result.rows, result.ddls)

        return write

    def _finish(self, namespace: str, changefeed_id: str) -> None:
        info = self._store.get_changefeed(namespace, changefeed_id)
        info.state = "finished"
        self._store.update_changefeed(info)
        # Stopping the query from inside its own batch would deadlock: do it from a thread.
        threading.Thread(target=self.stop, args=(namespace, changefeed_id), daemon=True).start()

    def _watch(self, key, query, stopping: threading.Event) -> None:
        try:
            query.awaitTermination()
            return
        except Exception as exc:  # the query died: record why, keep the others running
            if stopping.is_set():
                return
            message = _short_error(exc)
            log.error("changefeed %s/%s failed: %s", key[0], key[1], message)
            try:
                info = self._store.get_changefeed(*key)
                info.state = "failed"
                info.error = {
                    "addr": self._address,
                    "code": _error_code(message),
                    "message": message,
                    "time": self._clock().isoformat(),
                }
                self._store.update_changefeed(info)
            except Exception:
                log.exception("could not record the failure of %s/%s", *key)
        finally:
            with self._lock:
                running = self._running.get(key)
                if running is not None and running.query is query:
                    del self._running[key]

    def stop(self, namespace: str, changefeed_id: str) -> None:
        with self._lock:
            running = self._running.pop((namespace, changefeed_id), None)
        if running is None:
            return
        running.stopping.set()
        try:
            running.query.stop()
        finally:
            running.sink.close()

    def stop_all(self) -> None:
        for namespace, changefeed_id in self.running():
            self.stop(namespace, changefeed_id)


def _warn_ineligible(index: TxnIndex, ts: int, config: ReplicaConfig, changefeed_id: str) -> None:
    """Name the tables whose rows this changefeed skips (TiCDC logs the same at changefeed start)."""
    from sparkcdc.filter.eligibility import classify_tables

    _, ineligible = classify_tables(index.tables_at(ts), config)
    if ineligible:
        log.warning(
            "[SPARKCDC:WarnIneligibleTable] changefeed %s does not replicate tables without a valid index: %s; "
            "add a primary key or a NOT NULL unique key upstream, or set force-replicate = true",
            changefeed_id, ", ".join(f"{t.schema}.{t.table}" for t in ineligible))


def _short_error(exc: BaseException) -> str:
    """The user-facing part of a Spark streaming failure: our own error line when there is one."""
    text = str(exc)
    for line in text.splitlines():
        if "[SPARKCDC:" in line:
            return line[line.index("[SPARKCDC:"):].strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return (lines[0] if lines else repr(exc))[:2000]


def _error_code(message: str) -> str:
    if message.startswith("[SPARKCDC:"):
        return message[1:message.index("]")]
    return "SPARKCDC:ErrProcessorUnknown"
