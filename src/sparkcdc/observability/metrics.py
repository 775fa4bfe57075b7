"""A capture's Prometheus metrics: TiCDC's names and labels where TiCDC has the number, ours
(`sparkcdc_*`) where it does not. docs/operations.md lists every metric.

Contract. One `Metrics` per process holds its own CollectorRegistry (passed in or made here;
nothing registers with prometheus_client's global registry). The numbers come from the
components that own them, never per row:
- per micro-batch, the changefeed runner records the batch's rows, bytes, phases and sink
  durations through the `ChangefeedMetrics` of its changefeed (a dozen increments a batch);
  the redo writer records per log piece through `RedoMetrics`;
- at scrape time, a `CaptureStatusSource` (the capture) is read for what the metadata store, the
  puller and the cluster already hold: checkpoint and resolved ts, states, the initial
  snapshot's progress, owner, captures, the binlog the puller has read, the transaction index's
  size. Lags are computed then, from the
  clock, so they grow while a changefeed is stuck.
`exposition()` is the text format served at `GET /metrics`.

TiCDC's counters whose names do not end in `_total` (`ticdc_sink_ddl_exec_count`,
`ticdc_sink_execution_error`, `ticdc_processor_exit_with_error_count`,
`ticdc_owner_ownership_counter`, `ticdc_redo_total_rows_count`) are exported as gauges that only
grow: prometheus_client would append `_total` to a counter and the names would no longer be
TiCDC's. `rate()` and `increase()` work on them the same.

Crash semantics: everything is in memory; a restarted process starts its counters from zero,
which Prometheus's rate() treats as a counter reset. Labels carry the namespace and changefeed
id only, never a URI.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

CHANGEFEED_LABELS = ("namespace", "changefeed")
SINK_LABELS = (*CHANGEFEED_LABELS, "type")  # type: the sink kind (mysql, kafka, storage, lakehouse)

# TiCDC's FeedState.ToInt (cdc/model/changefeed.go): the value of ticdc_owner_status.
STATE_CODES = {"normal": 0, "pending": 1, "failed": 2, "stopped": 3, "finished": 4, "removed": 5, "warning": 6}
# States whose checkpoint and resolved ts TiCDC's owner keeps reporting (a running changefeed).
RUNNING_STATES = ("normal", "warning")

# The phases of a micro-batch in sparkcdc_batch_duration_seconds.
BATCH_PHASES = ("plan", "decode", "write")


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Prometheus's ExponentialBuckets, as TiCDC declares its histograms."""
    return tuple(start * factor ** i for i in range(count))


def _linear(start: float, width: float, count: int) -> list[float]:
    return [start + width * i for i in range(count)]


# TiCDC's LagBucket (cdc/metrics/metrics.go): 0.5 s steps up to 10 s, then coarser up to an hour.
LAG_BUCKETS = tuple(_linear(0.5, 0.5, 20) + _linear(11, 1, 10) + _linear(21, 30, 20) + _linear(900, 300, 10))
# A micro-batch's phases and sink calls: 1 ms .. ~9 min.
DURATION_BUCKETS = exponential_buckets(0.001, 2, 20)


@dataclass(frozen=True)
class BatchStats:
    """One micro-batch as its changefeed's runner saw it."""

    rows: int  # row changes the sink got (after netting, update split and filters)
    bytes: int  # what the sink sent downstream for them (encoded messages, file bytes, SQL text)
    ddls: int
    plan_seconds: float  # Spark's offsets and planning, from the previous batch's hand-off to this one's start
    decode_seconds: float  # the read tasks on the executors and the batch's collection on the driver
    write_seconds: float  # the rows handed to the sink (encoded, sent or executed)
    flush_seconds: float  # the sink's flush: the rows are durable downstream
    ddl_seconds: float  # the batch's DDL barrier, flushed


@dataclass(frozen=True)
class SnapshotStatus:
    """An initial snapshot's progress (model/snapshot.py keeps it in the metadata store)."""

    tables_done: int
    tables_total: int
    chunks_done: int
    chunks_total: int  # exact once every chunk is planned, else from the row estimates
    rows: int  # rows copied so far


@dataclass(frozen=True)
class ChangefeedStatus:
    """A changefeed as the metadata store holds it (read at scrape time by the owner)."""

    namespace: str
    id: str
    state: str
    checkpoint_ts: int  # TSO: physical milliseconds << 18
    resolved_ts: int
    snapshot: Optional[SnapshotStatus] = None  # a changefeed with `[snapshot]` mode other than never


@dataclass(frozen=True)
class PullerStatus:
    state: str  # the puller's health state: running, reconnecting, stalled, failed, ...
    binlog_bytes: int  # bytes of binlog transactions indexed since this process started
    transactions: int
    resolved_ts: int


@dataclass(frozen=True)
class TriggerStatus:
    """Spark's own phases of a changefeed's last trigger on this capture (StreamingQueryProgress)."""

    namespace: str
    id: str
    phases: tuple[tuple[str, float], ...]  # (Spark's phase name, seconds)


@dataclass(frozen=True)
class CaptureStatus:
    """What a capture knows about itself and, when it is the owner, about every changefeed."""

    is_owner: bool
    owner_seconds: float  # seconds this process has been the owner, in total
    captures: int  # live captures of the cluster (1 on a single node)
    running: int  # changefeeds this capture runs
    changefeeds: tuple[ChangefeedStatus, ...]  # every changefeed (empty unless is_owner)
    puller: Optional[PullerStatus]
    index_bytes: int  # the transaction index's files
    triggers: tuple[TriggerStatus, ...] = ()  # the changefeeds this capture runs


class CaptureStatusSource(Protocol):
    def capture_status(self) -> CaptureStatus: ...


def _physical_ms(ts: int) -> int:
    return ts >> 18  # model.tso.physical_ms; kept here so this layer imports nothing of sparkcdc


class RedoMetrics:
    """The redo writer's numbers for one changefeed and log kind (TiCDC's cdc/redo/common/metric.go)."""

    def __init__(self, metrics: "Metrics", namespace: str, changefeed: str, kind: str):
        labels = (namespace, changefeed, kind)
        self._bytes = metrics.redo_write_bytes.labels(*labels)
        self._rows = metrics.redo_rows.labels(*labels)
        self._write = metrics.redo_write_log_duration.labels(*labels)
        self._flush = metrics.redo_flush_all_duration.labels(*labels)

    def record_write(self, frame_bytes: int, rows: int, seconds: float) -> None:
        """One frame (a piece's rows of one table, or its DDLs) encoded and appended."""
        self._bytes.inc(frame_bytes)
        if rows:
            self._rows.inc(rows)
        self._write.observe(seconds)

    def record_flush(self, seconds: float) -> None:
        """The log files synced (fsync, or the upload of an object) at a batch's commit."""
        self._flush.observe(seconds)


class ChangefeedMetrics:
    """The per-batch numbers of one changefeed on this capture, bound to its labels once."""

    def __init__(self, metrics: "Metrics", namespace: str, changefeed: str, sink_type: str):
        self.namespace, self.changefeed, self.sink_type = namespace, changefeed, sink_type
        self._metrics = metrics
        labels, sink = (namespace, changefeed), (namespace, changefeed, sink_type)
        self._batch_rows = metrics.batch_row_count.labels(*sink)
        self._bytes = metrics.write_bytes.labels(*sink)
        self._ddl_count = metrics.ddl_exec_count.labels(*sink)
        self._ddl_duration = metrics.ddl_exec_duration.labels(*sink)
        self._errors = metrics.execution_error.labels(*sink)
        self._write = metrics.sink_write_duration.labels(*sink)
        self._flush = metrics.sink_flush_duration.labels(*sink)
        self._exits = metrics.exit_with_error_count.labels(*labels)
        self._phases = {phase: metrics.batch_duration.labels(*labels, phase) for phase in BATCH_PHASES}
        self._lock = threading.Lock()
        # Plain totals for the status page and `cli changefeed statistics` (the histogram holds
        # the same sum; prometheus_client offers no public read of it).
        self.rows_written = 0
        self.bytes_written = 0

    def record_batch(self, stats: BatchStats) -> None:
        self._batch_rows.observe(stats.rows)
        if stats.bytes:
            self._bytes.inc(stats.bytes)
        self._write.observe(stats.write_seconds)
        self._flush.observe(stats.flush_seconds)
        if stats.ddls:
            self._ddl_count.inc(stats.ddls)
            self._ddl_duration.observe(stats.ddl_seconds)
        self._phases["plan"].observe(stats.plan_seconds)
        self._phases["decode"].observe(stats.decode_seconds)
        self._phases["write"].observe(stats.write_seconds + stats.flush_seconds + stats.ddl_seconds)
        with self._lock:
            self.rows_written += stats.rows
            self.bytes_written += stats.bytes

    def record_sink_error(self) -> None:
        """A batch's write to the sink failed."""
        self._errors.inc()

    def record_exit_with_error(self) -> None:
        """The changefeed stopped on an error (it goes to warning and retries, or fails)."""
        self._exits.inc()

    def redo(self, kind: str) -> RedoMetrics:
        """The redo log's numbers for log files of `kind` (row or ddl)."""
        return RedoMetrics(self._metrics, self.namespace, self.changefeed, kind)


class Metrics:
    """Every metric of a capture, in one registry."""

    def __init__(self, registry: Optional[CollectorRegistry] = None, clock: Callable[[], float] = time.time,
                 process_metrics: bool = True):
        # No `<name>_created` series: they double the output and no dashboard reads them. The
        # library's only switch for that is process-wide.
        disable_created_metrics()
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._changefeeds: dict[tuple[str, str], ChangefeedMetrics] = {}
        self._lock = threading.Lock()
        r = self.registry
        # -- sink (TiCDC's cdc/sink/metrics) --
        self.batch_row_count = Histogram(
            "ticdc_sink_batch_row_count", "Row changes per micro-batch written to the sink; _sum counts every row",
            SINK_LABELS, buckets=exponential_buckets(1, 2, 18), registry=r)
        self.write_bytes = Counter("ticdc_sink_write_bytes_total", "Bytes the sink sent downstream", SINK_LABELS,
                                   registry=r)
        self.ddl_exec_count = Gauge("ticdc_sink_ddl_exec_count", "DDLs executed by the sink (only grows)",
                                    SINK_LABELS, registry=r)
        self.ddl_exec_duration = Histogram(
            "ticdc_sink_ddl_exec_duration", "Seconds a micro-batch's DDL barrier took in the sink", SINK_LABELS,
            buckets=exponential_buckets(0.01, 2, 18), registry=r)
        self.execution_error = Gauge("ticdc_sink_execution_error", "Failed micro-batch writes to the sink (only grows)",
                                     SINK_LABELS, registry=r)
        self.sink_write_duration = Histogram(
            "sparkcdc_sink_write_duration_seconds",
            "Seconds to hand one micro-batch's rows to the sink (encode and send or execute)", SINK_LABELS,
            buckets=DURATION_BUCKETS, registry=r)
        self.sink_flush_duration = Histogram(
            "sparkcdc_sink_flush_duration_seconds",
            "Seconds the sink's flush of one micro-batch took (until its rows are durable downstream)", SINK_LABELS,
            buckets=DURATION_BUCKETS, registry=r)
        # -- processor (TiCDC's cdc/processor/metrics.go) --
        self.exit_with_error_count = Gauge(
            "ticdc_processor_exit_with_error_count", "Times a changefeed stopped on an error (only grows)",
            CHANGEFEED_LABELS, registry=r)
        # -- the Spark micro-batch (ours) --
        self.batch_duration = Histogram(
            "sparkcdc_batch_duration_seconds",
            "Seconds per micro-batch phase: plan (Spark's offsets and planning), decode (executors read the "
            "binlog, the driver collects), write (sink write, flush, DDL and checkpoint)",
            (*CHANGEFEED_LABELS, "phase"), buckets=DURATION_BUCKETS, registry=r)
        # -- redo log (TiCDC's cdc/redo/common/metric.go) --
        redo_labels = (*CHANGEFEED_LABELS, "type")  # type: row or ddl log files
        self.redo_write_bytes = Counter("ticdc_redo_write_bytes_total", "Bytes written to the redo log", redo_labels,
                                        registry=r)
        self.redo_rows = Gauge("ticdc_redo_total_rows_count", "Rows written to the redo log (only grows)",
                               redo_labels, registry=r)
        self.redo_write_log_duration = Histogram(
            "ticdc_redo_write_log_duration_seconds", "Seconds to encode and append one redo frame", redo_labels,
            buckets=exponential_buckets(0.001, 2, 16), registry=r)
        self.redo_flush_all_duration = Histogram(
            "ticdc_redo_flush_all_duration_seconds",
            "Seconds to make a batch's redo log files durable (fsync, or the upload of an object)", redo_labels,
            buckets=exponential_buckets(0.001, 2, 16), registry=r)
        self._source: Optional[CaptureStatusSource] = None
        r.register(_CaptureCollector(self))
        if process_metrics:  # process_cpu_seconds_total, process_resident_memory_bytes, python_gc_*
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

    def watch(self, source: CaptureStatusSource) -> None:
        """Read `source` at every scrape for the owner, capture and puller metrics."""
        self._source = source

    def changefeed(self, namespace: str, changefeed: str, sink_type: str) -> ChangefeedMetrics:
        """The changefeed's metrics on this capture: the same object across restarts of the
        changefeed here, so its totals keep counting (a new one if its sink kind changed)."""
        key = (namespace, changefeed)
        with self._lock:
            current = self._changefeeds.get(key)
            if current is None or current.sink_type != sink_type:
                if current is not None:
                    self._remove_children(current)
                current = self._changefeeds[key] = ChangefeedMetrics(self, namespace, changefeed, sink_type)
            return current

    def changefeeds(self) -> list[tuple[str, str]]:
        """(namespace, id) of every changefeed with series here."""
        with self._lock:
            return list(self._changefeeds)

    def changefeed_totals(self, namespace: str, changefeed: str) -> Optional[ChangefeedMetrics]:
        with self._lock:
            return self._changefeeds.get((namespace, changefeed))

    def forget(self, namespace: str, changefeed: str) -> None:
        """Drop a removed changefeed's series."""
        with self._lock:
            current = self._changefeeds.pop((namespace, changefeed), None)
        if current is not None:
            self._remove_children(current)

    def _remove_children(self, changefeed: ChangefeedMetrics) -> None:
        labels = (changefeed.namespace, changefeed.changefeed)
        sink = (*labels, changefeed.sink_type)
        for family in (self.batch_row_count, self.write_bytes, self.ddl_exec_count, self.ddl_exec_duration,
                       self.execution_error, self.sink_write_duration, self.sink_flush_duration):
            _remove(family, sink)
        _remove(self.exit_with_error_count, labels)
        for phase in BATCH_PHASES:
            _remove(self.batch_duration, (*labels, phase))
        for kind in ("row", "ddl"):
            for family in (self.redo_write_bytes, self.redo_rows, self.redo_write_log_duration,
                           self.redo_flush_all_duration):
                _remove(family, (*labels, kind))

    def exposition(self) -> bytes:
        """Every metric in Prometheus's text format (CONTENT_TYPE)."""
        return generate_latest(self.registry)

    def status(self) -> Optional[CaptureStatus]:
        """The watched source's status now; None when nothing is watched or reading it failed."""
        source = self._source
        if source is None:
            return None
        try:
            return source.capture_status()
        except Exception as exc:  # an unreachable metadata store must not fail the whole scrape
            log.warning("metrics: reading the capture's status failed: %s", exc)
            return None

    def now(self) -> float:
        return self._clock()


def _remove(family, labels: tuple[str, ...]) -> None:
    try:
        family.remove(*labels)
    except KeyError:
        pass


class _CaptureCollector:
    """The metrics read at scrape time from the capture (TiCDC's owner and capture metrics, and
    our puller and transaction index)."""

    def __init__(self, metrics: Metrics):
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # names are known only from a status; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        status = self._metrics.status()
        if status is None:
            return
        now_ms = self._metrics.now() * 1000
        yield from _owner_families(status, now_ms)
        yield _gauge("sparkcdc_capture_is_owner", "1 when this capture is the owner", status.is_owner)
        yield _gauge("sparkcdc_cluster_captures", "Live captures in the cluster, as this capture sees it",
                     status.captures)
        yield _gauge("sparkcdc_capture_changefeeds", "Changefeeds this capture runs", status.running)
        yield _gauge("sparkcdc_txn_index_size_bytes", "Size of this capture's transaction index files",
                     status.index_bytes)
        if status.puller is not None:
            yield from _puller_families(status.puller, now_ms)
        triggers = GaugeMetricFamily(
            "sparkcdc_spark_trigger_seconds", "Seconds per phase of a changefeed query's last trigger, as Spark "
            "reports them (latestOffset, queryPlanning, getBatch, addBatch, walCommit, commitOffsets, "
            "triggerExecution)", labels=(*CHANGEFEED_LABELS, "phase"))
        for trigger in status.triggers:
            for phase, seconds in trigger.phases:
                triggers.add_metric([trigger.namespace, trigger.id, phase], seconds)
        yield triggers


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


def _owner_families(status: CaptureStatus, now_ms: float) -> Iterator[Metric]:
    ownership = GaugeMetricFamily("ticdc_owner_ownership_counter",
                                  "Seconds this capture has been the owner (rate() is 1 on the owner)")
    ownership.add_metric([], status.owner_seconds)
    yield ownership
    if not status.is_owner:
        return  # as TiCDC: only the owner reports changefeeds, so sums over captures count each once
    families = {
        "state": GaugeMetricFamily("ticdc_owner_status", "The state of changefeeds (TiCDC's FeedState.ToInt: "
                                   "0 normal, 2 failed, 3 stopped, 4 finished, 6 warning)", labels=CHANGEFEED_LABELS),
        "checkpoint": GaugeMetricFamily("ticdc_owner_checkpoint_ts", "Checkpoint ts of changefeeds (physical ms)",
                                        labels=CHANGEFEED_LABELS),
        "checkpoint_lag": GaugeMetricFamily("ticdc_owner_checkpoint_ts_lag", "Checkpoint ts lag of changefeeds in "
                                            "seconds", labels=CHANGEFEED_LABELS),
        "resolved": GaugeMetricFamily("ticdc_owner_resolved_ts", "Resolved ts of changefeeds (physical ms)",
                                      labels=CHANGEFEED_LABELS),
        "resolved_lag": GaugeMetricFamily("ticdc_owner_resolved_ts_lag", "Resolved ts lag of changefeeds in seconds",
                                          labels=CHANGEFEED_LABELS),
    }
    snapshot = {
        "chunks": GaugeMetricFamily("sparkcdc_snapshot_chunks", "Initial snapshot chunks copied (done) and in all "
                                    "(total; estimated until every chunk is planned)",
                                    labels=(*CHANGEFEED_LABELS, "state")),
        "tables": GaugeMetricFamily("sparkcdc_snapshot_tables", "Initial snapshot tables copied (done) and in all",
                                    labels=(*CHANGEFEED_LABELS, "state")),
        "rows": GaugeMetricFamily("sparkcdc_snapshot_rows", "Rows the initial snapshot has copied",
                                  labels=CHANGEFEED_LABELS),
    }
    for changefeed in status.changefeeds:
        labels = [changefeed.namespace, changefeed.id]
        families["state"].add_metric(labels, STATE_CODES.get(changefeed.state, -1))
        if changefeed.snapshot is not None:
            progress = changefeed.snapshot
            snapshot["chunks"].add_metric([*labels, "done"], progress.chunks_done)
            snapshot["chunks"].add_metric([*labels, "total"], progress.chunks_total)
            snapshot["tables"].add_metric([*labels, "done"], progress.tables_done)
            snapshot["tables"].add_metric([*labels, "total"], progress.tables_total)
            snapshot["rows"].add_metric(labels, progress.rows)
        if changefeed.state not in RUNNING_STATES:
            continue  # TiCDC drops a stopped changefeed's ts and lags with its owner-side object
        checkpoint_ms, resolved_ms = _physical_ms(changefeed.checkpoint_ts), _physical_ms(changefeed.resolved_ts)
        families["checkpoint"].add_metric(labels, checkpoint_ms)
        families["checkpoint_lag"].add_metric(labels, max(0.0, (now_ms - checkpoint_ms) / 1000))
        families["resolved"].add_metric(labels, resolved_ms)
        families["resolved_lag"].add_metric(labels, max(0.0, (now_ms - resolved_ms) / 1000))
    yield from families.values()
    yield from snapshot.values()


def _puller_families(puller: PullerStatus, now_ms: float) -> Iterator[Metric]:
    state = GaugeMetricFamily("sparkcdc_puller_state", "1 for the binlog puller's current state", labels=["state"])
    state.add_metric([puller.state], 1)
    yield state
    yield CounterMetricFamily("sparkcdc_puller_binlog_bytes", "Bytes of binlog transactions the puller has indexed",
                              value=puller.binlog_bytes)
    yield CounterMetricFamily("sparkcdc_puller_transactions", "Transactions the puller has indexed",
                              value=puller.transactions)
    resolved_ms = _physical_ms(puller.resolved_ts)
    yield _gauge("sparkcdc_puller_resolved_ts", "The puller's resolved ts (physical ms)", resolved_ms)
    yield _gauge("sparkcdc_puller_resolved_ts_lag", "Seconds the puller's resolved ts is behind the clock",
                 max(0.0, (now_ms - resolved_ms) / 1000) if resolved_ms else 0.0)
