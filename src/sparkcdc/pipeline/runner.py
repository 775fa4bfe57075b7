"""Runs each changefeed as a streaming query in the capture's SparkSession.

A changefeed's query reads the binlog source from the changefeed's checkpoint-ts and writes
every micro-batch through `write_batch` in `foreachBatch`. The metadata store's checkpoint is
the single source of truth for where a changefeed resumes: each (re)start plans from it with a
fresh Spark checkpoint, so pause/resume, `--overwrite-checkpoint-ts` and a crash all resume the
same way.

Over Spark Connect (`sparkcdc server --spark-remote`) `foreachBatch` would run on the Connect
server, away from the sink and the metadata store, so there the capture drives the same
batches itself (pipeline/connect_loop.py) and the Connect server's executors decode them.

When a query fails, other changefeeds keep running. A retryable failure (downstream or upstream
unreachable, connection lost, lock wait or deadlock; the policy is pipeline/failure.py) puts the
changefeed in `warning` with the error shown and restarts it from its checkpoint with backoff, as
TiCDC does; the first batch that completes after a restart returns it to `normal`. Any other
failure, or retrying for longer than `changefeed-error-stuck-duration`, marks it `failed`.

The capture's binlog puller feeds every changefeed, so its health is theirs (`upstream_health`).
Each query's watcher looks at it every WATCH_SECONDS: while the puller reconnects or stalls, every
changefeed shows `warning` with its error (the upstream named), even one whose query has nothing
to read and so cannot fail; when the puller stopped for good, each fails with its error. A
failure caused by the upstream is not retried after a blind backoff: the restart happens as soon
as the puller has reconnected, so a changefeed goes on within seconds of the upstream's return.
No changefeed stays `normal` with a frozen checkpoint because of its puller for longer than
WATCH_SECONDS after the puller says so (at once for a lost connection, STALL_SECONDS for a
puller that reads nothing).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from sparkcdc import failpoint
from sparkcdc.config.replica import ReplicaConfig, parse_go_duration, replica_config_from_dict
from sparkcdc.filter.change_filters import ChangeFilters
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus, ChangefeedStore
from sparkcdc.observability.log_context import changefeed_context
from sparkcdc.observability.metrics import BatchStats, ChangefeedMetrics, Metrics
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.pipeline.connect_loop import ConnectBatchLoop, connect_parallelism, is_connect_session, trigger_seconds
from sparkcdc.pipeline.failure import error_code, is_retryable_failure, is_upstream_failure, user_message
from sparkcdc.pipeline.planning import (BatchOffset, BatchPlan, ChunkPartition, SourceOptions, batch_marker,
                                        plan_partitions)
from sparkcdc.pipeline.query_rest import REST_TIMEOUT_SECONDS, bring_to_rest
from sparkcdc.pipeline.source import BATCH_SOURCE_NAME, SOURCE_NAME
from sparkcdc.pipeline.spark_session import begin_planner_use, end_planner_use, planner_use, retire_planner_workers
from sparkcdc.pipeline.stream_reader import (SMALL_BATCH_BYTES, plain_span, read_chunks_in_driver, read_in_driver,
                                             read_small_batch)
from sparkcdc.pipeline.transport import unpack_changes
from sparkcdc.schema.rules import DDLPolicy
from sparkcdc.sink.contract import Sink
from sparkcdc.sink.registry import SinkSpec, parse_sink_spec
from sparkcdc.upstream.connection import UpstreamConfig, check_binlog_retained
from sparkcdc.upstream.puller import RUNNING, PullerHealth
from sparkcdc.upstream.switchover import source_server
from sparkcdc.upstream.txn_index import TxnIndex

if TYPE_CHECKING:
    from sparkcdc.pipeline.snapshot import SnapshotStage

log = logging.getLogger(__name__)

# Failpoints of the runner (sparkcdc.failpoint, docs/failpoints.md): Go durations that replace every
# changefeed's changefeed-error-stuck-duration (minimum 30m) and sync-point-interval (minimum 30s).
STUCK_DURATION_FAILPOINT = "changefeed-error-stuck-duration"
SYNC_POINT_INTERVAL_FAILPOINT = "sync-point-interval"
# Restart backoff after a retryable failure: TiCDC's changefeed backoff starts at 10s and doubles.
RESTART_BACKOFF_INITIAL = 10.0
RESTART_BACKOFF_MAX = 600.0
# How long a MySQL sink retries a write in place before the failure restarts the changefeed.
SINK_RETRY_SECONDS = 10.0
# A changefeed whose batches are read in the driver (small or idle) still runs a batch's Spark job
# this often, beside the batch, keeping a Python worker alive (Spark's PythonWorkerFactory stops
# workers idle for a minute).
KEEP_PYTHON_WORKER_SECONDS = 20.0
# How often a query's watcher checks for a failed write the query has not yet seen (PipelinedWriter)
# and for a problem of the binlog puller.
WATCH_SECONDS = 1.0
# How long a start waits for a stop of the same changefeed in flight (a query at rest, then stopped).
STOP_WAIT_SECONDS = 120.0
# While a changefeed waits for its upstream, how often it looks whether the puller is back.
UPSTREAM_POLL_SECONDS = 0.25
# How long the restart after an upstream failover waits for the batch in flight before it
# interrupts the query: that batch mostly reads the old primary, which may be dead (its range
# reader would wait range_reader.UPSTREAM_WAIT_SECONDS, 30 s, for it to come back).
SWITCH_REST_TIMEOUT_SECONDS = 3.0
# How long a changefeed waits before handling a failure again when handling it failed (e.g. the
# metadata store was unreachable while it recorded the failure).
HANDLE_AGAIN_SECONDS = 5.0


def always_healthy() -> PullerHealth:
    """The upstream health of a runner without a puller (unit tests)."""
    return PullerHealth(RUNNING, "", 0.0)


@dataclass
class _Retrying:
    since: _dt.datetime  # the first failure of this warning episode
    attempts: int = 0
    upstream: bool = False  # the episode is the puller's problem: it ends only once the puller is back
    connects: int = 0  # the puller's connections when the episode began or the changefeed last restarted


@dataclass
class _Running:
    query: object
    writer: "PipelinedWriter"
    sink: Sink
    stopping: threading.Event
    extras: tuple = ()  # redo writer, syncpoint writer: closed with the sink

    def closeables(self) -> tuple:
        """What to close when the query is over, in order: the last write finishes first."""
        return (self.writer, self.sink, *self.extras)


class PipelinedWriter:
    """Writes a changefeed's batches on its own thread, one batch behind its query, so that the
    executors decode batch N + 1 while batch N goes to the sink (the two took turns before).

    Batches are written one at a time and in order. `submit` first waits for the previous write:
    at most two batches are in memory, and a failed write fails the query at its next batch;
    `failure` lets the query's watcher fail it sooner when no next batch comes. The checkpoint
    moves only when a write is done, so a batch Spark counts as committed but not yet written is
    replayed after a crash (the metastore checkpoint is where a changefeed resumes)."""

    def __init__(self, name: str):
        self._name = name
        self._pending: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, write: Callable[[], None]) -> None:
        self.wait()
        def run() -> None:
            try:
                write()
            except BaseException as exc:  # raised to the query at its next batch, or by its watcher
                self._error = exc
        self._pending = threading.Thread(target=run, name=self._name, daemon=True)
        self._pending.start()

    def wait(self) -> None:
        """Wait for the write in flight; raise its error if it failed."""
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._error is not None:
            raise self._error

    @property
    def writing(self) -> bool:
        """Whether a write is in flight."""
        pending = self._pending
        return pending is not None and pending.is_alive()

    @property
    def failure(self) -> BaseException | None:
        """The error of a failed write, once it has finished."""
        pending = self._pending
        return self._error if pending is None or not pending.is_alive() else None

    def close(self) -> None:
        """Let the write in flight finish (its error was or will be reported by the watcher)."""
        pending = self._pending
        if pending is not None and pending is not threading.current_thread():
            pending.join()


class ChangefeedRunner:
    def __init__(
        self,
        spark,
        store: ChangefeedStore,
        index_path: str,
        upstream_uri: str,
        work_dir: str,
        capture_address: str,
        trigger_interval: str = "1 second",
        clock: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc),
        cluster_id: str = "default",
        server_id_base: int = 100000,
        upstream_health: Callable[[], PullerHealth] = always_healthy,
        metrics: Metrics | None = None,
    ):
        """`store` is where checkpoints and states go (a cluster passes its fenced view);
        `server_id_base` the first replication server id of this capture's range readers;
        `upstream_health` the capture's binlog puller's health (see the module docstring);
        `metrics` where each batch's numbers go (None: nowhere, `sparkcdc server --metrics off`)."""
        self._spark = spark
        self._cluster_id = cluster_id
        self._store = store
        self._index_path = index_path
        self._upstream_uri = upstream_uri
        self._work_dir = work_dir
        self._address = capture_address
        self._trigger = trigger_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Running] = {}
        # Changefeeds whose query is being stopped: a start waits for it (Spark refuses a second
        # query of the same name while the first is active).
        self._stopping: set[tuple[str, str]] = set()
        self._next_server_id = server_id_base
        self._upstream_health = upstream_health
        self._metrics = metrics
        self._retrying: dict[tuple[str, str], _Retrying] = {}  # warning episodes not yet recovered
        self._backing_off: dict[tuple[str, str], threading.Event] = {}  # set by stop(): no restart
        self._shutdown = threading.Event()
        # Called before a changefeed's query starts: the capture stops its Spark warm-up there.
        self.before_start: Callable[[], None] = lambda: None
        override = failpoint.value(STUCK_DURATION_FAILPOINT)
        self._stuck_override = parse_go_duration(override) if override else None

    def running(self) -> list[tuple[str, str]]:
        """The changefeeds this runner holds: running, or waiting to be restarted after a failure."""
        with self._lock:
            return list(dict.fromkeys([*self._running, *self._backing_off]))

    def last_triggers(self) -> dict[tuple[str, str], dict[str, float]]:
        """Seconds per phase of each running query's last trigger, as Spark reports it
        (StreamingQueryProgress.durationMs: latestOffset, queryPlanning, getBatch, addBatch,
        walCommit, commitOffsets, triggerExecution). Nothing over Spark Connect, where the capture
        drives the batches itself (its phases are in the batch metrics)."""
        if is_connect_session(self._spark):
            return {}
        with self._lock:
            queries = {key: running.query for key, running in self._running.items()}
        triggers = {}
        for key, query in queries.items():
            try:
                progress = query.lastProgress
            except Exception:  # the query stopped meanwhile
                continue
            if progress:
                triggers[key] = {phase: milliseconds / 1000
                                 for phase, milliseconds in (progress.get("durationMs") or {}).items()}
        return triggers

    def start_or_retry_later(self, info: ChangefeedInfo) -> None:
        """Start the changefeed; a start that fails (the upstream is down, a sink unreachable) is
        handled like a failure of its query, in the background: `warning` and another start when
        retryable, else `failed`. For the capture's own starts (its restart, a cluster
        assignment), where no caller would see the error."""
        try:
            self.start(info)
        except Exception as exc:
            message = user_message(exc)
            log.warning("changefeed %s/%s could not start: %s", info.namespace, info.id, message,
                        extra={"changefeed": f"{info.namespace}/{info.id}"})
            key = (info.namespace, info.id)
            cancelled = self._hold_for_restart(key)
            threading.Thread(target=self._handle_failure, args=(key, message, cancelled),
                             name=f"restart-{info.id}", daemon=True).start()

    def start(self, info: ChangefeedInfo) -> None:
        with changefeed_context(info.namespace, info.id):  # what the start logs is about this changefeed
            self._start(info)

    def _start(self, info: ChangefeedInfo) -> None:
        key = (info.namespace, info.id)
        parallelism = self._parallelism()  # over Spark Connect a query: not under the lock
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while True:
            with self._lock:
                if key in self._running or self._shutdown.is_set():
                    return  # running, or the server shuts down (a restart that waited for a stop)
                if key not in self._stopping or time.monotonic() > deadline:
                    break
            time.sleep(0.05)  # e.g. the capture's reconcile loop while a failover restarts it
        self._check_binlog_retained(info, self._store.get_status(info.namespace, info.id).checkpoint_ts)
        with self._lock:
            if key in self._running:
                return
            config = replica_config_from_dict(info.config)
            spec = parse_sink_spec(info.sink_uri, config)
            hold_file = self._hold_path(info.namespace, info.id)
            if os.path.exists(hold_file):
                os.remove(hold_file)  # left by the previous run's stop
            # Anything up to the upstream's current position may already be downstream from a
            # previous run: the sink writes those rows idempotently (TiCDC's replicating ts).
            sink = spec.open(replicating_ts=TxnIndex(self._index_path).resolved_ts(), retry_seconds=SINK_RETRY_SECONDS,
                             changefeed=f"{info.namespace}/{info.id}", changefeed_epoch=info.create_time)
            spool_dir = self._spool_dir(info)
            # The snapshot stage caps the stream while a wave of chunks reads (SourceOptions.cap_file):
            # in the spool dir, which the source's process (on this machine) can read.
            cap_file = os.path.join(spool_dir, "snapshot-cap") if spool_dir else ""
            try:
                snapshot = self._snapshot_stage(info, config, sink, parallelism, spool_dir, cap_file)
            except BaseException:
                _close_quietly(sink)
                raise
            status = self._store.get_status(info.namespace, info.id)
            # Each run's readers get their own server_id range.
            server_id_base = self._next_server_id
            self._next_server_id += 1000
            options = SourceOptions(
                index_path=self._index_path,
                upstream_uri=self._upstream_uri,
                start_ts=replay_start(status, TxnIndex(self._index_path)),
                target_ts=info.target_ts,
                server_id_base=server_id_base,
                parallelism=parallelism,
                filter_rules=tuple(config.filter.rules),
                case_sensitive=config.case_sensitive,
                force_replicate=config.force_replicate,
                split_transactions=spec.splits_large_transactions,
                bdr_mode=config.bdr_mode,
                batch_interval_ms=round(trigger_seconds(self._trigger) * 1000),
                spool_dir=spool_dir,
                hold_file=hold_file,
                cap_file=cap_file if snapshot is not None else "",
            )
            _warn_ineligible(TxnIndex(self._index_path), status.checkpoint_ts, config, info.id)
            # information_schema's foreign keys open every upstream table: seconds with 10,000
            # tables, which the changefeed's start does not wait for (it is a warning only).
            threading.Thread(target=self._warn_cascades, args=(info, spec), daemon=True,
                             name=f"cascade-warning-{info.id}").start()
            checkpoint_dir = os.path.join(self._work_dir, info.namespace, info.id, "spark-checkpoint")
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
            stopping = threading.Event()
            changefeed_metrics = self._changefeed_metrics(info, spec)
            try:
                extras = self._consistency_writers(info, spec, changefeed_metrics)
            except BaseException:
                _close_quietly(sink)  # e.g. an unreachable redo storage: the restart makes a new sink
                raise
            extras = (*extras, snapshot)
            name = f"changefeed-{info.namespace}-{info.id}"
            writer = PipelinedWriter(f"write-{info.id}")
            self.before_start()
            # The query's start needs Spark's planner processes up to its first batch (spark_session.py).
            planner_token = None if is_connect_session(self._spark) else begin_planner_use()
            # With a local master the driver plans each batch from Spark's offset log and reads it.
            logged_plan = (LoggedBatchPlan(TxnIndex(self._index_path), options, checkpoint_dir)
                           if options.spool_dir else None)
            batch_function = self._batch_writer(info, spec, writer, sink, stopping, changefeed_metrics, *extras,
                                                planner_token=planner_token, logged_plan=logged_plan)
            if is_connect_session(self._spark):  # foreachBatch would run on the Connect server
                query = ConnectBatchLoop(self._spark, options, TxnIndex(self._index_path), batch_function,
                                         trigger_seconds(self._trigger), name).start()
            else:
                try:
                    query = (
                        self._spark.readStream.format(SOURCE_NAME)
                        .options(**options.to_options())
                        .load()
                        .writeStream.queryName(name)
                        .foreachBatch(batch_function)
                        .option("checkpointLocation", checkpoint_dir)
                        # The source paces batches itself (BatchPacer): a backlog runs back to back.
                        .trigger(processingTime="0 seconds")
                        .start()
                    )
                except BaseException:
                    end_planner_use(planner_token)
                    raise
            self._running[key] = _Running(query, writer, sink, stopping, extras)
            if snapshot is not None:
                snapshot.start()
            if info.state == "warning" and key not in self._retrying:  # a warning from before a restart
                self._retrying[key] = _Retrying(_error_time(info.error) or self._clock(),
                                                upstream=is_upstream_failure((info.error or {}).get("message", "")),
                                                connects=self._upstream_health().connects)
        threading.Thread(
            target=self._watch, args=(key, query, writer, stopping, snapshot, planner_token), name=f"watch-{info.id}",
            daemon=True
        ).start()
        log.info("changefeed %s/%s started at checkpoint %d", info.namespace, info.id, status.checkpoint_ts)

    def _check_binlog_retained(self, info: ChangefeedInfo, checkpoint_ts: int) -> None:
        """Fail with ErrBinlogPurged, before any query starts, when the upstream no longer has the
        binlog from the changefeed's checkpoint on (TiCDC refuses a start-ts below its GC safepoint)."""
        index = TxnIndex(self._index_path)
        following = index.txns_between(checkpoint_ts, index.resolved_ts(), limit=1)
        if following:  # the first transaction it still has to read, on the server whose binlog has it
            server = source_server(index, following[0].epoch, UpstreamConfig.from_uri(self._upstream_uri))
            check_binlog_retained(server, following[0].start,
                                  f"changefeed {info.namespace}/{info.id} at checkpoint {checkpoint_ts}")

    def _warn_cascades(self, info: ChangefeedInfo, spec: SinkSpec) -> None:
        """Name each replicated table whose cascaded changes this changefeed's sink cannot have
        (every sink but a MySQL one: the binlog holds no rows for them)."""
        if spec.reruns_foreign_key_cascades:
            return
        from sparkcdc.filter.eligibility import cascaded_tables, describe_cascade
        from sparkcdc.upstream.schema_reader import read_foreign_keys

        try:
            connection = UpstreamConfig.from_uri(self._upstream_uri).connect_any(connect_timeout=5, read_timeout=10)
            try:
                foreign_keys = read_foreign_keys(connection)
            finally:
                connection.close()
        except Exception as exc:  # a warning only: the changefeed starts anyway
            log.info("changefeed %s: cannot read the upstream's foreign keys (%s)", info.id, exc)
            return
        for (schema, table), keys in sorted(cascaded_tables(foreign_keys, spec.config).items()):
            _warn_cascade(info, spec, f"{schema}.{table}", "; ".join(map(describe_cascade, keys)))

    def _snapshot_stage(self, info: ChangefeedInfo, config: ReplicaConfig, sink: Sink, parallelism: int,
                        spool_dir: str, cap_file: str = "") -> "SnapshotStage | None":
        """The changefeed's snapshot stage when `[snapshot] mode` asks for one; on its first start it
        sends the tables' definitions to the sink and moves the checkpoint to where the copy starts."""
        if config.snapshot.mode == "never":
            return None
        from sparkcdc.pipeline.snapshot import SnapshotStage

        index = TxnIndex(self._index_path)
        options = SourceOptions(index_path=self._index_path, upstream_uri=self._upstream_uri, start_ts=0,
                                spool_dir=spool_dir)

        def read_wave(reads):
            if spool_dir:  # a local master: the driver reads the wave (stream_reader.read_chunks_in_driver)
                return read_chunks_in_driver(reads)
            plan = BatchPlan(options, tuple(ChunkPartition(read) for read in reads))
            session = getattr(self._spark, "session", self._spark)
            with planner_use():  # Spark's planner processes read the plan (spark_session.py)
                return unpack_changes(session.read.format(BATCH_SOURCE_NAME).options(**plan.to_options()).load()
                                      .toArrow())

        stage = SnapshotStage(info.namespace, info.id, config, self._upstream_uri, index, self._store, read_wave,
                              parallelism, cap_file=cap_file)
        checkpoint = self._store.get_status(info.namespace, info.id).checkpoint_ts
        start = stage.bootstrap(sink, checkpoint)
        if start > checkpoint:
            self._store.advance_checkpoint(info.namespace, info.id, start, index.resolved_ts())
        return stage

    def _spool_dir(self, info: ChangefeedInfo) -> str:
        """The changefeed's spool directory, emptied, when the read tasks run on this machine (a
        `local` master; pipeline/transport.py); "" when the batches must travel through Spark."""
        if is_connect_session(self._spark) or not self._spark.sparkContext.master.startswith("local"):
            return ""
        spool_dir = self._spool_path(info.namespace, info.id)
        shutil.rmtree(spool_dir, ignore_errors=True)  # a failed task's file from an earlier run
        os.makedirs(spool_dir)
        return spool_dir

    def _spool_path(self, namespace: str, changefeed_id: str) -> str:
        return os.path.join(self._work_dir, namespace, changefeed_id, "spool")

    def _hold_path(self, namespace: str, changefeed_id: str) -> str:
        return os.path.join(self._work_dir, namespace, changefeed_id, "hold")

    def _parallelism(self) -> int:
        """How many binlog ranges a batch is cut into: the cores Spark has for this session."""
        if is_connect_session(self._spark):
            return connect_parallelism(self._spark)
        return max(1, self._spark.sparkContext.defaultParallelism)

    def _changefeed_metrics(self, info: ChangefeedInfo, spec: SinkSpec) -> ChangefeedMetrics | None:
        if self._metrics is None:
            return None
        return self._metrics.changefeed(info.namespace, info.id, spec.kind.name)

    def _consistency_writers(self, info: ChangefeedInfo, spec: SinkSpec,
                             changefeed_metrics: ChangefeedMetrics | None = None) -> tuple:
        """The redo writer and the syncpoint writer of a MySQL-sink changefeed (None when off)."""
        config = spec.config
        redo = syncpoint = None
        if config.consistent.level == "eventual":
            from sparkcdc.redo.storage import RedoStorage
            from sparkcdc.redo.writer import RedoWriter

            redo = RedoWriter(RedoStorage.from_uri(config.consistent.storage), config.consistent,
                              f"{info.namespace}/{info.id}", metrics=changefeed_metrics)
        if config.enable_sync_point:
            from sparkcdc.sink.mysql.syncpoint import SyncpointWriter

            interval = failpoint.value(SYNC_POINT_INTERVAL_FAILPOINT) or config.sync_point_interval
            syncpoint = SyncpointWriter(spec.settings, config, self._cluster_id, info.id,
                                        parse_go_duration(interval), parse_go_duration(config.sync_point_retention))
        return redo, syncpoint

    def _batch_writer(self, info: ChangefeedInfo, spec: SinkSpec, writer: PipelinedWriter, sink,
                      stopping: threading.Event, changefeed_metrics: ChangefeedMetrics | None = None,
                      redo=None, syncpoint=None, snapshot=None, planner_token: object | None = None,
                      logged_plan: "LoggedBatchPlan | None" = None):
        config = spec.config
        index = TxnIndex(self._index_path)
        table_filter = TableFilter(config.filter.rules, config.case_sensitive)
        namespace, changefeed_id, target_ts = info.namespace, info.id, info.target_ts
        split_updates = spec.splits_key_updates
        warn_cascades = not spec.reruns_foreign_key_cascades
        ddl_policy = DDLPolicy(force_replicate=config.force_replicate, skip_unparseable=config.skip_unparseable_ddl,
                               bdr_mode=config.bdr_mode, bdr_role=config.bdr_role)
        filters = ChangeFilters(config)

        initial_only = config.snapshot.mode == "initial-only"

        def on_checkpoint(ts: int) -> None:
            self._store.advance_checkpoint(namespace, changefeed_id, ts, index.resolved_ts())
            self._recovered((namespace, changefeed_id))
            if (target_ts and ts >= target_ts) or (initial_only and snapshot is not None and snapshot.finished):
                self._finish(namespace, changefeed_id)

        started = [False]  # whether this query wrote its first batch
        last_job = [float("-inf")]  # when this query last ran a Spark job (monotonic)
        planners_retired = [False]  # whether this query's catch-up stopped Spark's planner processes
        handed_off = [time.monotonic()]  # when the previous batch went to the writer (or the query started)

        def write(df, batch_id: int) -> None:
            with changefeed_context(namespace, changefeed_id):
                write_batch_of_query(df, batch_id)
            handed_off[0] = time.monotonic()

        def write_batch_of_query(df, batch_id: int) -> None:
            if stopping.is_set():
                return  # a stopping changefeed writes nothing more; its checkpoint stays where it is
            began = time.monotonic()
            planned = began - handed_off[0]
            # A batch the driver can read itself is read here, without the Spark job that costs
            # more than its rows (stream_reader.read_in_driver). With a local master that is every
            # batch of binlog ranges, the query's first and a catch-up's too (the ranges decode in
            # threads without the GIL, beside the writer), planned from Spark's offset log
            # (LoggedBatchPlan): no Spark job reads the stream, so no Python worker starts for it
            # (~450 MiB of the catch-up's peak, docs/benchmarks.md); a batch the driver could not
            # read (an upstream that does not answer at once) goes to Spark's read tasks. With
            # executors elsewhere it is a small batch (a caught-up changefeed's, or an idle
            # upstream's range marker alone), known from the plan Spark holds; a batch that comes
            # while the previous one is still being written is a catch-up's and its plan is not
            # looked at: its ~15 Py4J calls would each wait for the writer's thread to let go of
            # the GIL, ~0.1 s in all. There Spark stops a Python worker idle for a minute, and the
            # next batch for Spark's tasks would wait for a cold one (seconds on a loaded
            # machine): so a small batch's job still runs every KEEP_PYTHON_WORKER_SECONDS, beside
            # the batch rather than in its way. A query's first batch runs it in its way: beside
            # the next batch's job it would start workers of its own, each to warm up again.
            first = not started[0]
            started[0] = True
            catching_up = writer.writing
            table, large = None, False
            if logged_plan is not None:
                partitions = logged_plan.partitions(batch_id)
                if partitions is not None and (table := read_in_driver(partitions, None)) is not None:
                    span = plain_span(batch_marker(partitions)[1])  # None: a large transaction's piece
                    large = span is None or span > SMALL_BATCH_BYTES
            elif not first and not catching_up:
                table = read_small_batch(planned_partitions(df))  # at most SMALL_BATCH_BYTES
                if table is not None and began - last_job[0] >= KEEP_PYTHON_WORKER_SECONDS:
                    last_job[0] = began
                    keep_python_worker(df, changefeed_id)
            if table is None:
                try:
                    table = unpack_changes(df.toArrow())  # runs the read tasks: the executors decode the batch
                except Exception:
                    if stopping.is_set():
                        return  # stop() cancelled the read: nothing of this batch was written
                    raise
                large = not first
                last_job[0] = began
            if first and planner_token is not None:
                end_planner_use(planner_token)  # started: Spark's planner processes idle from here
            if (catching_up or large) and planner_token is not None and not planners_retired[0]:
                # A catch-up's batches are the changefeed's peak memory: Spark's idle planner
                # processes go now, not a minute from now (spark_session.py). Only then, as the
                # next query's start brings them back at ~1 s of its own. A writer that keeps up
                # with the reads is no sign of the end of a catch-up: its batches are still large.
                planners_retired[0] = True
                threading.Thread(target=self._retire_planner_workers, args=(namespace, changefeed_id),
                                 name=f"retire-planners-{changefeed_id}", daemon=True).start()
            if stopping.is_set():
                return
            decoded = time.monotonic()

            def write_table() -> None:
                with changefeed_context(namespace, changefeed_id):
                    write_and_record()

            def write_and_record() -> None:
                writing = time.monotonic()
                try:
                    result = write_batch(table, index, sink, table_filter.match_event, on_checkpoint,
                                         split_updates, filters, ddl_policy, redo, syncpoint, snapshot,
                                         target_ts)
                except BaseException:
                    if changefeed_metrics is not None:
                        changefeed_metrics.record_sink_error()
                    raise
                if result is not None and changefeed_metrics is not None:
                    changefeed_metrics.record_batch(BatchStats(
                        rows=result.rows, bytes=result.bytes_written, ddls=result.ddls, plan_seconds=planned,
                        decode_seconds=decoded - began, write_seconds=result.write_seconds,
                        flush_seconds=result.flush_seconds, ddl_seconds=result.ddl_seconds))
                if result is not None and result.ddls and warn_cascades:
                    _warn_cascading_ddls(info, spec, index, result.start, result.end, table_filter)
                if result is not None and (result.rows or result.ddls):
                    log.info("changefeed %s batch %d: (%d, %d] rows=%d ddls=%d in %.1fs (decode %.2fs, write %.2fs, "
                             "of which flush %.2fs)",
                             changefeed_id, batch_id, result.start, result.end, result.rows, result.ddls,
                             time.monotonic() - began, decoded - began, time.monotonic() - writing,
                             result.flush_seconds,
                             extra={"batch": batch_id, "start_ts": result.start, "end_ts": result.end,
                                    "rows": result.rows, "ddls": result.ddls,
                                    "seconds": round(time.monotonic() - began, 3)})

            writer.submit(write_table)

        return write

    def _retire_planner_workers(self, namespace: str, changefeed_id: str) -> None:
        with changefeed_context(namespace, changefeed_id):
            if retired := retire_planner_workers(self._spark):
                log.info("changefeed %s catches up: stopped Spark's idle planner processes (%s)", changefeed_id,
                         ", ".join(retired))

    def _finish(self, namespace: str, changefeed_id: str) -> None:
        info = self._store.get_changefeed(namespace, changefeed_id)
        info.state = "finished"
        self._store.update_changefeed(info)
        # Stopping the query from inside its own batch would deadlock: do it from a thread.
        threading.Thread(target=self.stop, args=(namespace, changefeed_id), daemon=True).start()

    def _watch(self, key, query, writer: PipelinedWriter, stopping: threading.Event, snapshot=None,
               planner_token: object | None = None) -> None:
        try:
            with changefeed_context(*key):
                self._watch_query(key, query, writer, stopping, snapshot)
        finally:
            if planner_token is not None:
                end_planner_use(planner_token)  # a query that ended before its first batch

    def _watch_query(self, key, query, writer: PipelinedWriter, stopping: threading.Event, snapshot=None) -> None:
        failure = None  # what the watcher itself stopped the query for
        epoch = self._upstream_health().epoch
        try:
            while not query.awaitTermination(WATCH_SECONDS):
                health = self._upstream_health()
                if health.epoch != epoch and health.problem is None and not stopping.is_set():
                    # A failover moved the positions (a large transaction's pieces too): plan again
                    # from the checkpoint, on the new server. On this thread: the stop takes this
                    # query out of `_running` before the `finally` below looks.
                    self._restart_after_switch(key, health.server)
                    return
                # A failed write with no next batch to fail the query, a failed snapshot read, or a
                # puller that stopped for good.
                failure = (writer.failure or (snapshot.failure if snapshot is not None else None)
                           or self._upstream_failure(key))
                if failure is not None and not stopping.is_set():
                    stopping.set()
                    query.stop()
                    raise failure
            return
        except BaseException as exc:  # the query died: record why, keep the others running
            if stopping.is_set() and failure is None and writer.failure is None:
                return
            message = user_message(exc)
        finally:
            with self._lock:
                running = self._running.get(key)
                if running is not None and running.query is query:
                    del self._running[key]
        if running is not None and running.query is query:
            for closeable in running.closeables():
                _close_quietly(closeable)
        self._handle_failure(key, message)

    def _restart_after_switch(self, key: tuple[str, str], server: str) -> None:
        """Stop the changefeed at rest and start it again from its checkpoint: the puller followed
        a failover to `server` and re-mapped the positions the changefeed still needs."""
        with changefeed_context(*key):
            log.info("changefeed %s/%s: the upstream failed over to %s; restarting from its checkpoint there",
                     *key, server)
            try:
                # A batch in flight usually reads the dead server's binlog, whose range reader would
                # wait UPSTREAM_WAIT_SECONDS for it to come back: do not wait for that batch long.
                self.stop(*key, rest_timeout=SWITCH_REST_TIMEOUT_SECONDS)
            except Exception:  # noqa: BLE001 - a query that failed meanwhile: starting again is what matters
                log.exception("stopping %s/%s for the failover", *key)
            message = self._restart(key)
            if message is not None:
                self._handle_failure(key, message)

    def _upstream_failure(self, key: tuple[str, str]) -> BaseException | None:
        """`_check_upstream`, for the watcher: a metadata store that cannot be read or written
        right now must not end the watch of a query that still runs."""
        try:
            return self._check_upstream(key)
        except Exception as exc:
            log.warning("changefeed %s/%s: could not show its puller's state: %s", *key, exc)
            return None

    def _check_upstream(self, key: tuple[str, str]) -> BaseException | None:
        """Show the puller's problem on a running changefeed: `warning` while it may pass (the
        query keeps running and goes on by itself when the puller is back), else the error to
        fail the changefeed with. None while the puller is fine."""
        problem = self._upstream_health().problem
        if problem is None:
            return None
        message = str(problem)
        if not is_retryable_failure(message):
            return problem
        with self._lock:
            retrying = self._retrying.get(key)
            if retrying is not None and retrying.upstream:
                since = retrying.since  # already shown
            else:
                since = None
        if since is None:
            self._record_failure(key, message, upstream=True)
            return None
        info = self._store.get_changefeed(*key)
        stuck_for = (self._clock() - since).total_seconds()
        if stuck_for >= self._stuck_duration(info):
            return problem  # _record_failure marks it failed, naming the stuck duration
        return None

    def _hold_for_restart(self, key: tuple[str, str]) -> threading.Event:
        """Keep the changefeed as this runner's while it waits to restart; stop() sets the event."""
        cancelled = threading.Event()
        with self._lock:
            self._backing_off[key] = cancelled
        return cancelled

    def _handle_failure(self, key: tuple[str, str], message: str, cancelled: threading.Event | None = None) -> None:
        """Retry while the error is retryable and not stuck for too long, else fail. Waits out a
        retryable error's backoff, or the upstream's return (see `_wait_to_restart`)."""
        with changefeed_context(*key):
            self._handle_failure_of_changefeed(key, message, cancelled or self._hold_for_restart(key))

    def _handle_failure_of_changefeed(self, key: tuple[str, str], message: str, cancelled: threading.Event) -> None:
        try:
            while message is not None and not cancelled.is_set() and not self._shutdown.is_set():
                try:
                    delay = self._record_failure(key, message)
                    if delay is None or not self._wait_to_restart(key, delay, cancelled):
                        return
                    message = self._restart(key)
                except Exception:
                    # Recording the failure failed (e.g. the metadata store is unreachable): the
                    # changefeed is neither running nor marked, so try again rather than leave it.
                    log.exception("could not handle the failure of %s/%s; trying again in %.0fs", *key,
                                  HANDLE_AGAIN_SECONDS)
                    if cancelled.wait(HANDLE_AGAIN_SECONDS):
                        return
        finally:
            with self._lock:
                if self._backing_off.get(key) is cancelled:
                    del self._backing_off[key]

    def _wait_to_restart(self, key: tuple[str, str], delay: float, cancelled: threading.Event) -> bool:
        """Wait `delay` s before a restart, but restart as soon as the puller has reconnected
        since the episode began or the last restart, or at once after an episode's first
        failure caused by the upstream when the puller is already back (a blind backoff would keep
        a changefeed down for up to 10 min after its upstream is back). False when cancelled, or
        when the puller stopped for good (the changefeed is then failed with its error)."""
        with self._lock:
            retrying = self._retrying.get(key)
        connects = retrying.connects if retrying is not None else self._upstream_health().connects
        already_back = retrying is not None and retrying.upstream and retrying.attempts <= 1
        deadline = time.monotonic() + delay
        while True:
            health = self._upstream_health()
            if health.problem is not None and not is_retryable_failure(str(health.problem)):
                self._record_failure(key, str(health.problem))
                return False
            back = health.problem is None and (health.connects != connects or already_back)
            if back or time.monotonic() >= deadline:
                if retrying is not None:
                    retrying.connects = health.connects
                return not cancelled.is_set()
            if cancelled.wait(min(deadline - time.monotonic(), UPSTREAM_POLL_SECONDS)) or self._shutdown.is_set():
                return False

    def _record_failure(self, key: tuple[str, str], message: str, upstream: bool = False) -> float | None:
        """Mark the changefeed warning (returning the backoff) or failed (returning None).
        `upstream`: the puller's problem, shown on a changefeed whose query still runs (no
        restart, so no backoff: None)."""
        info = self._store.get_changefeed(*key)
        if info.state not in ("normal", "warning"):
            return None  # paused, finished or failed meanwhile
        now = self._clock()
        with self._lock:
            retrying = self._retrying.get(key)
            if retrying is None:
                retrying = self._retrying[key] = _Retrying(now, connects=self._upstream_health().connects)
            retrying.attempts += not upstream
            retrying.upstream = retrying.upstream or upstream or is_upstream_failure(message)
            attempts, since = max(1, retrying.attempts), retrying.since
        stuck_for = (now - since).total_seconds()
        limit = self._stuck_duration(info)
        retryable = is_retryable_failure(message)
        if not upstream and self._metrics is not None:
            exited = self._metrics.changefeed_totals(*key)
            if exited is not None:
                exited.record_exit_with_error()
        info.error = {"addr": self._address, "code": error_code(message), "message": message,
                      "time": now.isoformat()}
        if not retryable or stuck_for >= limit:
            with self._lock:
                self._retrying.pop(key, None)
            info.state = "failed"
            if retryable:
                info.error["message"] = (f"{message} (retried for {stuck_for:.0f}s, longer than "
                                         f"changefeed-error-stuck-duration {limit:.0f}s)")
            log.error("changefeed %s/%s failed: %s", key[0], key[1], info.error["message"])
            self._store.update_changefeed(info)
            return None
        info.state = "warning"
        # The error's time is the episode's start, so a restarted server still knows how long
        # this changefeed has been stuck.
        info.error["time"] = since.isoformat()
        self._store.update_changefeed(info)
        if upstream:
            log.warning("changefeed %s/%s waits for its upstream: %s", key[0], key[1], message)
            return None
        delay = min(RESTART_BACKOFF_MAX, RESTART_BACKOFF_INITIAL * 2 ** (attempts - 1))
        log.warning("changefeed %s/%s hit a retryable error (attempt %d); restarting from its checkpoint "
                    "in %.0fs: %s", key[0], key[1], attempts, delay, message)
        return delay

    def _restart(self, key: tuple[str, str]) -> str | None:
        """Start the changefeed again from its checkpoint; the failure message if that fails."""
        try:
            info = self._store.get_changefeed(*key)
            if info.state not in ("normal", "warning"):
                return None
            self.start(info)
            return None
        except Exception as exc:
            log.info("changefeed %s/%s: the restart failed", *key, exc_info=True)
            return user_message(exc)

    def _recovered(self, key: tuple[str, str]) -> None:
        """A batch went through after a restart: the changefeed is back to normal (for the
        puller's problem: once the puller is running again too)."""
        with self._lock:
            retrying = self._retrying.get(key)
            if retrying is None:
                return
            if retrying.upstream and self._upstream_health().problem is not None:
                return
            del self._retrying[key]
        info = self._store.get_changefeed(*key)
        if info.state == "warning":
            info.state, info.error = "normal", None
            self._store.update_changefeed(info)
            log.info("changefeed %s/%s recovered and is normal again", *key)

    def _stuck_duration(self, info: ChangefeedInfo) -> float:
        if self._stuck_override is not None:
            return self._stuck_override
        return parse_go_duration(replica_config_from_dict(info.config).changefeed_error_stuck_duration)

    def stop(self, namespace: str, changefeed_id: str, rest_timeout: float = REST_TIMEOUT_SECONDS) -> None:
        """Stop the changefeed's query at rest (its batch in flight finished, waiting at most
        `rest_timeout` s; past it the query is interrupted, its batch replayed on the next start)."""
        with self._lock:
            running = self._running.pop((namespace, changefeed_id), None)
            backing_off = self._backing_off.pop((namespace, changefeed_id), None)
            self._retrying.pop((namespace, changefeed_id), None)
            if running is not None:
                self._stopping.add((namespace, changefeed_id))
        if backing_off is not None:
            backing_off.set()
        if running is None:
            return
        running.stopping.set()
        try:
            if not is_connect_session(self._spark):
                bring_to_rest(running.query, self._hold_path(namespace, changefeed_id), rest_timeout)
            running.query.stop()
        finally:
            running.writer.close()
            running.sink.close()
            for extra in running.extras:
                _close_quietly(extra)
            shutil.rmtree(self._spool_path(namespace, changefeed_id), ignore_errors=True)
            with self._lock:
                self._stopping.discard((namespace, changefeed_id))

    def stop_all(self) -> None:
        self._shutdown.set()
        with self._lock:
            waiting = list(self._backing_off.values())
        for event in waiting:
            event.set()
        for namespace, changefeed_id in self.running():
            self.stop(namespace, changefeed_id)


class LoggedBatchPlan:
    """A micro-batch's partitions planned in the driver, as the source's planner plans them
    (planning.plan_partitions), for the bounds Spark logged: its end in `offsets/<batch id>` of the
    query's checkpoint, its start in the batch before's or, for the query's first, the source's
    start (the checkpoint is new with each query, and keeps the last two). Unlike
    `planned_partitions` it makes no Py4J call: those wait for the writer thread to let go of the
    GIL, ~0.1 s per batch of a catch-up (docs/benchmarks.md)."""

    def __init__(self, index: TxnIndex, options: SourceOptions, checkpoint_dir: str):
        self._index = index
        self._options = options
        self._offsets = os.path.join(checkpoint_dir, "offsets")
        # The stream reader's planner logs ineligible tables; the driver's plan does not again.
        self._warned = _AlreadyWarned()

    def partitions(self, batch_id: int) -> list | None:
        """The batch's partitions; None when the log does not hold its bounds or cannot be read."""
        try:
            return plan_partitions(self._index, self._options, *self.bounds(batch_id), self._warned)
        except Exception as exc:  # noqa: BLE001 - Spark's read tasks read the batch instead
            log.debug("no plan from the offset log for batch %d: %s", batch_id, exc)
            return None

    def bounds(self, batch_id: int) -> tuple[BatchOffset, BatchOffset]:
        """The batch's (start, end] as Spark logged them: the query's first batch starts at the
        source's initial offset (BinlogStreamReader.initialOffset, in no log). Raises for a log
        it cannot read."""
        start = BatchOffset(self._options.start_ts) if batch_id == 0 else self._logged(batch_id - 1)
        return start, self._logged(batch_id)

    def _logged(self, batch_id: int) -> BatchOffset:
        with open(os.path.join(self._offsets, str(batch_id)), encoding="utf-8") as f:
            lines = f.read().splitlines()
        if len(lines) != 3 or lines[0] != "v1":  # version, metadata, this query's one source
            raise ValueError(f"offset log {batch_id} is not one source's v1 log")
        return BatchOffset.of(json.loads(lines[2]))


class _AlreadyWarned(set):
    def __contains__(self, item: object) -> bool:
        return True


def planned_partitions(df) -> list[bytes] | None:
    """The pickled input partitions of a foreachBatch DataFrame that reads a Python data source, in
    order, taken from its plan without running it; None for any other plan."""
    try:
        partitions = df._jdf.queryExecution().logical().rdd().partitions()
        return [bytes(partition.inputPartition().get().pickedPartition()) for partition in partitions]
    except Exception:  # another Spark's internals: the caller runs the batch instead
        return None


def keep_python_worker(df, changefeed_id: str) -> None:
    """Run the batch's Spark job in a thread of its own and drop what it reads: it keeps a
    Python worker warm for the next batch too large to read in the driver. A failure is only
    logged: the batch itself is read and written without it."""
    def run() -> None:
        try:
            unpack_changes(df.toArrow())  # also removes the files its read tasks spooled
        except Exception as exc:
            log.debug("changefeed %s: the job that keeps a Python worker warm failed: %s", changefeed_id, exc)

    threading.Thread(target=run, name=f"keep-python-worker-{changefeed_id}", daemon=True).start()


def replay_start(status: ChangefeedStatus, index: TxnIndex) -> int:
    """Where a (re)started changefeed reads from: its checkpoint, or just below it when the
    checkpoint was set by `resume --overwrite-checkpoint-ts` (min-table-barrier-ts equal to it)
    exactly at a DDL, which then runs again, as TiCDC's owner starts its DDL puller at
    checkpoint-1 (cdc/owner/changefeed.go). Sinks apply the DDL idempotently."""
    checkpoint = status.checkpoint_ts
    if checkpoint and status.min_table_barrier_ts == checkpoint and index.ddls_between(checkpoint - 1, checkpoint):
        return checkpoint - 1
    return checkpoint


def _warn_cascade(info: ChangefeedInfo, spec: SinkSpec, table: str, how: str) -> None:
    log.warning(
        "[SPARKCDC:WarnForeignKeyCascade] changefeed %s: %s changes through %s, but the binlog has no rows "
        "for what InnoDB cascades, so this %s sink's output lacks them (a consumer replaying it into MySQL "
        "keeps those rows unchanged); only a MySQL sink re-runs the cascades", info.id, table, how, spec.kind.name)


def _warn_cascading_ddls(info: ChangefeedInfo, spec: SinkSpec, index: TxnIndex, start: int, end: int,
                         table_filter: TableFilter) -> None:
    """`_warn_cascade` for the cascading foreign keys a batch's replicated DDLs declare."""
    from sparkcdc.filter.eligibility import declares_cascade

    for ddl in index.ddls_between(start, end):
        if ddl.table and table_filter.match(ddl.schema, ddl.table) and declares_cascade(ddl.query):
            _warn_cascade(info, spec, f"{ddl.schema}.{ddl.table}", f"a cascading foreign key ({ddl.query})")


def _warn_ineligible(index: TxnIndex, ts: int, config: ReplicaConfig, changefeed_id: str) -> None:
    """Name the tables whose rows this changefeed skips (TiCDC logs the same at changefeed start)."""
    from sparkcdc.filter.eligibility import classify_tables

    _, ineligible = classify_tables(index.tables_at(ts), config)
    if ineligible:
        log.warning(
            "[SPARKCDC:WarnIneligibleTable] changefeed %s does not replicate tables without a valid index: %s; "
            "add a primary key or a NOT NULL unique key upstream, or set force-replicate = true",
            changefeed_id, ", ".join(f"{t.schema}.{t.table}" for t in ineligible))


def _error_time(error: dict | None) -> _dt.datetime | None:
    try:
        return _dt.datetime.fromisoformat(error["time"]) if error else None
    except (KeyError, TypeError, ValueError):
        return None


def _close_quietly(sink) -> None:
    if sink is None:
        return
    try:
        sink.close()
    except Exception:
        log.exception("closing the sink of a failed changefeed")
