"""What a capture shows about itself: the status its metrics read at each scrape, the recent
history of each changefeed for the status page, and the status page's data.

The observer reads the components that own the numbers (the metadata store for states and
checkpoints, the puller, the cluster, the runner's per-batch metrics) when asked, and a sampler
thread records every HISTORY_INTERVAL seconds each changefeed's checkpoint lag and the rows its
sink wrote on this capture (observability/history.py). Nothing here runs per batch or per row.
Checkpoint and resolved ts of changefeeds are the owner's to report, as in TiCDC: in a cluster
only the owner exports them, so a sum over captures counts each changefeed once.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Callable, Optional

from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrChangefeedNotExists
from sparkcdc.model import tso
from sparkcdc.model.snapshot import snapshot_progress
from sparkcdc.observability.history import Sample, StatusHistory
from sparkcdc.observability.metrics import (
    CONTENT_TYPE,
    RUNNING_STATES,
    CaptureStatus,
    ChangefeedStatus,
    Metrics,
    PullerStatus,
    SnapshotStatus,
    TriggerStatus,
)

if TYPE_CHECKING:
    from sparkcdc.server.capture import Capture

log = logging.getLogger(__name__)

# Files of the transaction index (SQLite and its write-ahead log).
INDEX_SUFFIXES = ("", "-wal", "-shm")


def index_size_bytes(path: str) -> int:
    """The transaction index's bytes on disk: the database and its WAL and shared-memory files.
    SQLite removes the WAL when its last connection closes, at any moment: a file gone counts 0
    (checking that it exists first raced with that, and the scrape lost the whole capture)."""
    total = 0
    for suffix in INDEX_SUFFIXES:
        try:
            total += os.path.getsize(path + suffix)
        except FileNotFoundError:
            pass
    return total


class OwnershipClock:
    """Seconds this process has been the owner, from observations of whether it is now."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._last: Optional[float] = None
        self._owned = False
        self.seconds = 0.0
        self._lock = threading.Lock()

    def observe(self, is_owner: bool) -> float:
        with self._lock:
            now = self._clock()
            if self._last is not None and self._owned and is_owner:
                self.seconds += now - self._last
            self._last, self._owned = now, is_owner
            return self.seconds


class CaptureObserver:
    """The capture's metrics source and status page (`sparkcdc server`, unless --metrics off)."""

    content_type = CONTENT_TYPE

    def __init__(self, capture: "Capture", metrics: Metrics, clock: Callable[[], float] = time.time,
                 history: Optional[StatusHistory] = None):
        self._capture = capture
        self.metrics = metrics
        self._clock = clock
        self.history = history or StatusHistory()
        self._ownership = OwnershipClock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        metrics.watch(self)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._sample_forever, name="status-history", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _sample_forever(self) -> None:
        while not self._stop.wait(self.history.interval):
            try:
                self.sample()
            except Exception as exc:  # the chart misses a point; the capture goes on
                log.debug("status history sample failed: %s", exc)

    def sample(self) -> None:
        """Record one history point per changefeed (the sampler thread calls it), and drop the
        series of changefeeds that were removed."""
        now = self._clock()
        self._ownership.observe(self._capture.capture_info()["is_owner"])
        changefeeds = self._changefeeds()
        known = {(changefeed.namespace, changefeed.id) for changefeed in changefeeds}
        for key in set(self.metrics.changefeeds()) - known:
            self.metrics.forget(*key)
        samples = {}
        for changefeed in changefeeds:
            key = (changefeed.namespace, changefeed.id)
            totals = self.metrics.changefeed_totals(*key)
            samples[key] = Sample(now, self._lag(changefeed.checkpoint_ts, now) if changefeed.state in RUNNING_STATES
                                  else None, totals.rows_written if totals is not None else None)
        self.history.record(now, samples)

    # -- what the metrics read at each scrape --------------------------------------------------
    def capture_status(self) -> CaptureStatus:
        capture = self._capture
        is_owner = bool(capture.capture_info()["is_owner"])
        transactions, binlog_bytes = capture.puller_totals()
        health = capture.puller_health()
        return CaptureStatus(
            is_owner=is_owner,
            owner_seconds=self._ownership.observe(is_owner),
            captures=len(capture.list_captures()),
            running=len(capture.running_changefeeds()),
            changefeeds=tuple(self._changefeeds(with_snapshot=True)) if is_owner else (),
            puller=PullerStatus(health.state, binlog_bytes, transactions, capture.puller_resolved_ts()),
            index_bytes=index_size_bytes(capture.index_path),
            triggers=tuple(TriggerStatus(namespace, changefeed_id, tuple(sorted(phases.items())))
                           for (namespace, changefeed_id), phases in sorted(capture.last_triggers().items())),
        )

    def metrics_exposition(self) -> bytes:
        return self.metrics.exposition()

    def _changefeeds(self, with_snapshot: bool = False) -> list[ChangefeedStatus]:
        """Every changefeed but removed ones, with the resolved ts a running one can reach: the
        puller's (capped at its target), as TiCDC's owner reports the resolved ts its puller has;
        `with_snapshot`: and the progress of its initial snapshot, if it has one."""
        store = self._capture.store
        puller_resolved = self._capture.puller_resolved_ts()
        changefeeds = []
        for info in store.list_changefeeds():
            if info.state == "removed":
                continue
            try:
                status = store.get_status(info.namespace, info.id)
            except ErrChangefeedNotExists:
                continue  # removed meanwhile
            resolved = status.resolved_ts
            if info.state in RUNNING_STATES:
                resolved = max(resolved, min(puller_resolved, info.target_ts) if info.target_ts else puller_resolved)
            snapshot = None
            if with_snapshot and (progress := snapshot_progress(store, info)) is not None:
                snapshot = SnapshotStatus(progress["tables_done"], progress["tables_total"], progress["chunks_done"],
                                          progress["chunks_total"], progress["rows"])
            changefeeds.append(ChangefeedStatus(info.namespace, info.id, info.state, status.checkpoint_ts, resolved,
                                                snapshot))
        return changefeeds

    def _lag(self, ts: int, now: float) -> float:
        return max(0.0, now - tso.physical_ms(ts) / 1000)

    # -- the status page -------------------------------------------------------------------------
    def overview(self) -> dict:
        """The status page's data: changefeeds with state, checkpoint, lag, throughput and last
        error, their recent history, and the cluster's captures with the owner."""
        now = self._clock()
        capture = self._capture
        store = capture.store
        running_here = set(capture.running_changefeeds())
        changefeeds = []
        for changefeed in self._changefeeds():
            key = (changefeed.namespace, changefeed.id)
            try:
                info = store.get_changefeed(*key)
            except ErrChangefeedNotExists:
                continue
            totals = self.metrics.changefeed_totals(*key)
            points = self.history.series(key, now)
            running = changefeed.state in RUNNING_STATES
            snapshot = snapshot_progress(store, info)
            changefeeds.append({
                "namespace": changefeed.namespace,
                "id": changefeed.id,
                "state": changefeed.state,
                "sink_uri": mask_sink_uri(info.sink_uri),
                "checkpoint_tso": changefeed.checkpoint_ts,
                "checkpoint_time": tso.format_time(changefeed.checkpoint_ts),
                "checkpoint_lag": round(self._lag(changefeed.checkpoint_ts, now), 3) if running else None,
                "resolved_lag": round(self._lag(changefeed.resolved_ts, now), 3) if running else None,
                "on_this_capture": key in running_here,
                "rows_written": totals.rows_written if totals is not None else None,
                "rows_per_second": next((p.rows_per_second for p in reversed(points)
                                         if p.rows_per_second is not None), None),
                "error": info.error,
                # The initial snapshot's summary (`cli changefeed snapshot` shows it per table).
                "snapshot": None if snapshot is None else {k: v for k, v in snapshot.items() if k != "tables"},
                "history": [[round(p.time, 3), p.lag, p.rows_per_second] for p in points],
            })
        captures = capture.list_captures()
        return {
            "now": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds"),
            "capture": capture.capture_info(),
            "captures": [{"id": c.get("id"), "address": c.get("address"), "is_owner": bool(c.get("is_owner"))}
                         for c in captures],
            "puller": capture.puller_state(),
            "history_seconds": self.history.window,
            "changefeeds": changefeeds,
        }
