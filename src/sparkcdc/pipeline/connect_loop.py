"""Spark Connect mode: the capture drives each changefeed's micro-batches itself.

Over Spark Connect a `foreachBatch` function runs in a Python process on the Connect server,
where the changefeed's sink, metadata store and transaction index are not. So the capture plays
the streaming engine's part: it plans each batch from the transaction index with the stream
reader's own pacing and planning (`BatchPacer.plan`, `plan_partitions`), and the
Connect server's executors decode the batch's binlog ranges in a batch read of a Python data
source whose options carry that plan (the upstream password beside it, under a key Spark
redacts, never inside the pickle). The read's DataFrame goes to the very batch writer
`foreachBatch` calls (its `toArrow()` runs the read and brings the rows back to the capture), so
writing, checkpoints and failure handling are the ones of local and cluster mode.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
import uuid
from typing import Callable

from sparkcdc.errors import ErrSparkRemoteInvalid, ErrSparkRemoteSessionLost, ErrSparkRemoteUnreachable
from sparkcdc.pipeline.planning import BatchOffset, BatchPacer, BatchPlan, MarkerPartition, SourceOptions, plan_partitions
from sparkcdc.pipeline.source import BATCH_SOURCE_NAME, PlannedBinlogSource

log = logging.getLogger(__name__)

DEFAULT_CONNECT_PORT = 15002  # Spark Connect's, for an sc:// URL without one
POLL_SECONDS = 0.1  # how often the loop asks BatchPacer whether the next batch may run
CONNECT_RETRIES = 5  # gRPC retries of one call (backoff 50 ms x4 each time, at most 10 s)
# How long stop() waits for the batch in flight (Spark's spark.sql.streaming.stopTimeout here too).
STOP_TIMEOUT_SECONDS = 30.0


def validate_spark_remote(url: str) -> str:
    """The Spark Connect URL, checked at the edge: `sc://host:port` (parameters after `/;` allowed)."""
    if not re.fullmatch(r"sc://[^/:;\s]+(:\d+)?(/(;[^;\s]+)*)?", url or ""):
        raise ErrSparkRemoteInvalid(
            f"--spark-remote {(url or '').split(';', 1)[0]!r} is not a Spark Connect URL; give sc://host:port, "
            "e.g. sc://127.0.0.1:15002 (the port of the server started by sbin/start-connect-server.sh)")
    return url


def masked_remote(url: str) -> str:
    """The URL without its parameters (a `;token=...` must not reach the logs)."""
    return url.split("/;", 1)[0].rstrip("/")


def make_connect_session(remote: str) -> "ConnectSession":
    """The capture's Spark Connect session on `remote`, with the planned-batch source registered."""
    return ConnectSession(validate_spark_remote(remote))


class ConnectSession:
    """The capture's Spark Connect session, opened anew when the server has forgotten it (it
    restarted): the changefeed that hit that restarts on the new one. Anything else is the
    pyspark session's own."""

    def __init__(self, remote: str, open_session: Callable[[str], object] | None = None):
        self.remote = remote
        self._open = open_session or _open_session
        self._lock = threading.Lock()
        self.session = self._open(remote)

    def renew(self, lost) -> None:
        """Replace `lost` with a new session (once, when several changefeeds saw it gone)."""
        with self._lock:
            if self.session is not lost:
                return
            try:
                lost.stop()
            except Exception:  # the server may not know it any more: nothing to release
                pass
            self.session = self._open(self.remote)
            log.info("opened a new Spark Connect session on %s", masked_remote(self.remote))

    def stop(self) -> None:
        self.session.stop()

    def __getattr__(self, name: str):
        return getattr(self.session, name)


def _open_session(remote: str):
    """A new session with our source registered. Its first calls register the source and read the
    server's parallelism; a read of an empty batch then starts the server's Python workers
    (importing sparkcdc there) in the background, so the first changefeed does not pay for them alone."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    _check_reachable(remote)
    spark = SparkSession.builder.remote(remote).create()
    # pyspark's default retries an unreachable server for ~10 min, stalling the changefeed
    # silently; fail within ~half a minute instead, and let the runner's backoff restart it.
    spark.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=10_000)])
    try:
        spark.dataSource.register(PlannedBinlogSource)
        parallelism = _parallelism_of(spark)
    except Exception as exc:
        spark.stop()
        raise ErrSparkRemoteUnreachable(
            f"cannot use the Spark Connect server at {masked_remote(remote)}: {_first_line(exc)}; start it "
            "(sbin/start-connect-server.sh of the Spark installation) or fix --spark-remote") from None
    log.info("Spark Connect server %s: parallelism %d", masked_remote(remote), parallelism)
    threading.Thread(target=_warm_up, args=(spark,), name="connect-warm-up", daemon=True).start()
    return spark


def _warm_up(spark) -> None:
    began = time.monotonic()
    try:
        plan = BatchPlan(SourceOptions(index_path="", upstream_uri="", start_ts=0), (MarkerPartition(0, 1),))
        rows = spark.read.format(BATCH_SOURCE_NAME).options(**plan.to_options()).load().toArrow().num_rows
        log.info("Spark Connect warm-up read %d row in %.1fs", rows, time.monotonic() - began)
    except Exception as exc:  # an optimisation only: the first batch then starts the workers
        log.warning("Spark Connect warm-up failed: %s", _first_line(exc))


def _check_reachable(remote: str) -> None:
    """Fail at once on a refused or unresolvable address (the gRPC client would retry for long)."""
    address = masked_remote(remote)[len("sc://"):]
    host, _, port = address.partition(":")
    try:
        socket.create_connection((host, int(port or DEFAULT_CONNECT_PORT)), timeout=10).close()
    except OSError as exc:
        raise ErrSparkRemoteUnreachable(
            f"cannot reach the Spark Connect server at {masked_remote(remote)} ({exc.strerror or exc}); start it "
            "(sbin/start-connect-server.sh of the Spark installation) or fix --spark-remote") from None


# A Connect server shutting down fails the batch in flight with one of these.
_SERVER_STOPPING_TEXT = ("stopped SparkContext", "SparkContext was shut down", "SparkContext has been shutdown")


def as_changefeed_error(exc: BaseException) -> BaseException:
    """An unreachable Spark Connect server as our retryable error; anything else as it is."""
    text = str(exc)
    if any(marker in text for marker in _SERVER_STOPPING_TEXT):
        return ErrSparkRemoteUnreachable(
            f"the Spark Connect server stopped during the batch ({_first_line(exc)}); the changefeed restarts "
            "from its checkpoint when it is back")
    if "StatusCode.UNAVAILABLE" in text:
        detail = re.search(r'details = "([^"]*)"', text)
        return ErrSparkRemoteUnreachable(
            f"the Spark Connect server is unreachable ({detail.group(1) if detail else 'UNAVAILABLE'}); the changefeed "
            "restarts from its checkpoint when it is back")
    return exc


# What pyspark's client says once the server has forgotten the session (a restarted server): it
# then closes its client for good, and only a new session works again.
# A server that lost our source's registration (seen while it shut down) needs a new session too.
_SESSION_LOST_TEXT = ("INVALID_HANDLE.SESSION", "NO_ACTIVE_SESSION", "create a new Spark Session",
                      f"DATA_SOURCE_NOT_FOUND] Failed to find the data source: {BATCH_SOURCE_NAME}")


def is_session_lost(exc: BaseException, session=None) -> bool:
    closed = getattr(getattr(session, "client", None), "is_closed", False)
    return closed is True or any(marker in str(exc) for marker in _SESSION_LOST_TEXT)


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0][:500] if lines else type(exc).__name__


def is_connect_session(spark) -> bool:
    return isinstance(spark, ConnectSession) or type(spark).__module__.startswith("pyspark.sql.connect")


def connect_parallelism(spark) -> int:
    """The Connect server's default parallelism (a Connect session has no SparkContext to ask).

    Asked at every changefeed (re)start: a forgotten session is opened anew first, an
    unreachable server is the retryable ErrSparkRemoteUnreachable."""
    session = getattr(spark, "session", spark)
    try:
        return _parallelism_of(session)
    except Exception as exc:
        if not (is_session_lost(exc, session) and isinstance(spark, ConnectSession)):
            raise as_changefeed_error(exc) from None
    spark.renew(session)
    return _parallelism_of(spark.session)


def _parallelism_of(spark) -> int:
    # A range without a partition count gets spark.default.parallelism splits; its physical plan
    # says how many without running a job (a job on a cold server costs tens of seconds).
    match = re.search(r"splits=(\d+)", spark.range(0, 1 << 20)._explain_string())
    if match:
        return max(1, int(match.group(1)))
    row = spark.sql("SELECT count(DISTINCT part) AS parts FROM "
                    "(SELECT spark_partition_id() AS part FROM range(0, 100000))").collect()[0]
    return max(1, int(row["parts"] or 1))


_TRIGGER_UNITS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0, "second": 1.0,
                  "seconds": 1.0, "minute": 60.0, "minutes": 60.0}


def trigger_seconds(interval: str) -> float:
    """A processingTime trigger interval such as "1 second" or "500 milliseconds", in seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", interval)
    if not match or match.group(2) not in _TRIGGER_UNITS:
        raise ValueError(f"trigger interval {interval!r}: give a number and a unit (ms, seconds, minutes)")
    return float(match.group(1)) * _TRIGGER_UNITS[match.group(2)]


class ConnectBatchLoop:
    """A changefeed's micro-batches over Spark Connect, behind a StreamingQuery's
    awaitTermination() and stop(), so the runner watches and stops it like a streaming query.

    Batch n+1 starts where batch n ended, from the options' start_ts, as the stream reader's
    offsets do; the sink moves the checkpoint. A trigger with nothing new runs no batch."""

    def __init__(self, spark, options: SourceOptions, index, write: Callable[[object, int], None],
                 trigger_interval: float, name: str):
        self._spark = spark
        self._options = options
        self._index = index
        self._write = write
        self._interval = trigger_interval
        self.name = name
        self._tag = f"sparkcdc-{uuid.uuid4().hex}"
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._session = getattr(spark, "session", spark)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "ConnectBatchLoop":
        self._thread.start()
        return self

    def _run(self) -> None:
        # Tags are per thread: stop() interrupts this loop's read, and only it.
        session = self._session = getattr(self._spark, "session", self._spark)  # the capture's, now
        session.addTag(self._tag)
        try:
            start, batch_id, warned = BatchOffset(self._options.start_ts), 0, set()
            pacer = BatchPacer(self._interval)
            while not self._stopping.is_set():
                end = pacer.plan(self._index, start, self._options)
                if end.key() > start.key():
                    partitions = plan_partitions(self._index, self._options, start, end, warned,
                                                 pacer.sizes_of(start, end))
                    self._write(self._batch_frame(BatchPlan(self._options, tuple(partitions))), batch_id)
                    batch_id += 1
                    start = end
                    if pacer.catching_up:
                        continue
                self._stopping.wait(POLL_SECONDS)
        except BaseException as exc:  # the runner's watcher reads it from awaitTermination()
            if not self._stopping.is_set():
                lost = is_session_lost(exc, session)
                self._error = ErrSparkRemoteSessionLost(
                    f"the Spark Connect server no longer knows this capture's session ({_first_line(exc)}), e.g. "
                    "it restarted; the changefeed restarts from its checkpoint on a new session"
                ) if lost else as_changefeed_error(exc)
                if lost and isinstance(self._spark, ConnectSession):
                    self._renew(session)
        finally:
            self._done.set()

    def _renew(self, lost) -> None:
        try:
            self._spark.renew(lost)
        except Exception as exc:  # the restart tries again with backoff
            self._error = as_changefeed_error(exc)

    def _batch_frame(self, plan: BatchPlan):
        return self._session.read.format(BATCH_SOURCE_NAME).options(**plan.to_options()).load()

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Block until the loop ends; raise what ended it unless it was stopped."""
        if not self._done.wait(timeout):
            return False
        if self._error is not None:
            raise self._error
        return True

    def stop(self) -> None:
        self._stopping.set()
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            return
        try:
            self._session.interruptTag(self._tag)  # the batch's read, if one is running
        except Exception as exc:
            log.warning("could not interrupt the Spark Connect read of %s: %s", self.name, exc)
        self._thread.join(STOP_TIMEOUT_SECONDS)
        if self._thread.is_alive():
            log.warning("%s did not stop within %.0fs; its batch is still being written", self.name,
                        STOP_TIMEOUT_SECONDS)
