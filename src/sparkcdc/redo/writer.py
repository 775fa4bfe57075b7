"""The changefeed side of the redo log: each batch's frames, made durable before the sink runs.

Per micro-batch (start, end]: `RedoWriter.batch(start, end)` returns a `RedoBatch`; the batch
writer hands it each table's rows and the DDLs as soon as they are planned, and a background
thread encodes, compresses and writes them while the next table is planned. `commit()` waits
until every frame and the COMMIT frame are durable (fsync on file://, a finished put on object
stores). Only then may the sink apply the batch. A reader's resolved-ts is the end of the last
complete batch in an unbroken chain from the checkpoint (and at least the meta's resolved-ts),
so the meta file need not be rewritten per batch: it follows within `meta-flush-interval`.
Batches with no rows and no DDL get an unsynced COMMIT frame that keeps the chain unbroken.

`checkpoint(ts)` records the sink's checkpoint; the meta file gets it within
`meta-flush-interval`, and log files whose every batch ends at or below the persisted checkpoint
are deleted. `flush_checkpoint(ts)` persists it at once: a DDL runs only after the meta says
every row before it is downstream, so `redo apply` never replays old-schema rows into a table a
DDL already changed (TiCDC's owner waits for the redo checkpoint the same way).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from sparkcdc.config.replica import ConsistentConfig
from sparkcdc.errors import ErrConsistentStorage, ErrRedoFileOp, SparkCDCError
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.redo import format as fmt
from sparkcdc.redo.storage import RedoStorage

if TYPE_CHECKING:
    from sparkcdc.observability.metrics import ChangefeedMetrics

log = logging.getLogger(__name__)


class _LogFile:
    """One open log file of one kind. Local files are appended and fsynced; on object stores a
    file is one object, uploaded whole when the batch commits."""

    def __init__(self, storage: RedoStorage, name: str):
        self.storage, self.name = storage, name
        self.size, self.max_end = 0, 0
        self._chunks: list[bytes] = []
        self._handle = open(storage.path(name), "ab") if storage.is_local else None
        self.new = True  # its directory entry is not synced yet
        self.dirty = False  # frames appended since the last sync

    def append(self, frame: bytes, end: int) -> None:
        if self._handle is not None:
            self._handle.write(frame)
        else:
            self._chunks.append(frame)
        self.size += len(frame)
        self.max_end = max(self.max_end, end)
        self.dirty = True

    def sync(self) -> None:
        if not self.dirty:
            return
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            if self.new:
                self.storage.sync_directory()
        else:
            self.storage.put(self.name, b"".join(self._chunks))
        self.new = False
        self.dirty = False

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def new_run_id() -> int:
    """Tells the batches of different changefeed runs apart (time-ordered, random low bits)."""
    return (int(time.time() * 1000) << 16) | random.getrandbits(16)


class RedoWriter:
    def __init__(self, storage: RedoStorage, consistent: ConsistentConfig, changefeed: str,
                 clock: Callable[[], float] = time.monotonic, metrics: Optional["ChangefeedMetrics"] = None):
        """`metrics`: where each frame's bytes and time and each sync's time go (TiCDC's redo metrics)."""
        self._storage = storage
        self._metrics = {kind: metrics.redo(kind) for kind in ("row", "ddl")} if metrics is not None else {}
        self._changefeed = changefeed
        self._compress = consistent.compression == "lz4"
        self._max_bytes = max(1, consistent.max_log_size) << 20
        self._meta_interval = consistent.meta_flush_interval / 1000.0
        self._clock = clock
        self._run = new_run_id()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="redo-writer")
        self._open: dict[str, _LogFile] = {}
        self._numbers = 0
        self._closed_files: dict[str, int] = {}  # name -> the largest batch end it holds
        self._lock = threading.Lock()
        self._error: Optional[BaseException] = None
        try:
            meta = self._read_meta()
            self._scan_existing_files()
        except SparkCDCError:
            raise
        except Exception as exc:  # unreachable endpoint, bad credentials, ...
            raise ErrConsistentStorage(
                f"cannot read the redo storage {self._storage.location.scheme}://{self._storage.location.root}: "
                f"{exc}; check consistent.storage and that the storage is reachable") from exc
        self._resolved = meta.resolved_ts if meta else 0
        self._checkpoint = meta.checkpoint_ts if meta else 0
        self._persisted_checkpoint = self._checkpoint
        self._meta_dirty = False
        self._anchored = False
        self._last_meta_write = self._clock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_meta_periodically, name="redo-meta-flusher",
                                         daemon=True)
        self._flusher.start()

    # -- start ---------------------------------------------------------------------------
    def _read_meta(self) -> Optional[fmt.RedoMeta]:
        try:
            if not self._storage.exists(fmt.META_FILE):
                return None
            meta = fmt.RedoMeta.from_bytes(self._storage.read(fmt.META_FILE))
        except (OSError, ValueError, KeyError) as exc:
            raise ErrConsistentStorage(f"cannot read the redo meta in {self._storage.location.scheme}://"
                                       f"{self._storage.location.root}: {exc}") from exc
        if meta.changefeed and meta.changefeed != self._changefeed:
            raise ErrConsistentStorage(
                f"the redo storage {self._storage.location.scheme}://{self._storage.location.root} holds the "
                f"redo log of changefeed {meta.changefeed}; give each changefeed its own consistent.storage path")
        return meta

    def _scan_existing_files(self) -> None:
        """Log files of earlier runs: kept until the checkpoint passes their last batch."""
        for name in self._storage.list():
            if name.endswith(fmt.LOG_SUFFIX):
                ends = [frame.end for frame in fmt.decode_frames(self._storage.read(name))]
                self._closed_files[name] = max(ends, default=0)

    # -- batches -------------------------------------------------------------------------
    def batch(self, start: int, end: int) -> "RedoBatch":
        self._raise_if_failed()
        if not self._anchored:
            # A run starts at the changefeed's checkpoint: persisting it anchors this run's chain
            # of batches, whatever unsynced tail the previous run left.
            self._anchored = True
            self.flush_checkpoint(start)
        return RedoBatch(self, start, end)

    def _submit(self, task: Callable[[], None]) -> Future:
        def guarded() -> None:
            if self._error is not None:  # nothing after a failed write may reach the log or meta
                raise ErrRedoFileOp("an earlier redo write failed")
            try:
                task()
            except BaseException as exc:
                with self._lock:
                    if self._error is None:
                        self._error = exc
                raise
        return self._executor.submit(guarded)

    def _append(self, kind: str, frame: bytes, start: int, end: int, may_rotate: bool = True) -> None:
        current = self._open.get(kind)
        if may_rotate and current is not None and current.size >= self._max_bytes:
            self._close_file(kind)  # rotate at max-log-size (already synced at the last commit)
            current = None
        if current is None:
            self._numbers += 1
            current = self._open[kind] = _LogFile(self._storage, fmt.log_file_name(kind, start, self._run,
                                                                                 self._numbers))
        current.append(frame, end)
        if not self._storage.is_local and current.size >= self._max_bytes:
            current.sync()  # an object holds at most about max-log-size
            self._close_file(kind)

    def _close_file(self, kind: str) -> None:
        current = self._open.pop(kind)
        current.sync()  # frames of empty batches may not be synced yet
        current.close()
        self._closed_files[current.name] = current.max_end

    def _commit(self, start: int, end: int, frames: int, durable: bool) -> None:
        self._append("row", fmt.encode_frame(fmt.KIND_COMMIT, self._run, start, end, frames,
                                              fmt.encode_commit(frames), False), start, end,
                     may_rotate=False)  # a COMMIT stays with its batch
        if not durable:
            return  # an empty batch: it only keeps the log contiguous, nothing waits for it
        syncing = time.monotonic()
        for kind in list(self._open):
            self._open[kind].sync()
            if not self._storage.is_local:
                self._close_file(kind)
        if "row" in self._metrics:
            self._metrics["row"].record_flush(time.monotonic() - syncing)
        # The log itself now proves the batch (a reader takes the resolved-ts from the last
        # complete batch); the meta file follows within meta-flush-interval.
        self._resolved = max(self._resolved, end)
        self._meta_dirty = True

    # -- meta and cleanup ----------------------------------------------------------------
    def _write_meta(self) -> None:
        checkpoint = self._checkpoint
        # Everything at or below the checkpoint is downstream, so the log is complete up to it
        # too: batches with no rows and no DDL write no frames and advance resolved-ts this way.
        self._resolved = max(self._resolved, checkpoint)
        self._storage.put(fmt.META_FILE, fmt.RedoMeta(checkpoint, self._resolved, self._changefeed).to_bytes())
        self._persisted_checkpoint = checkpoint
        self._last_meta_write = self._clock()
        self._meta_dirty = False
        for name, max_end in list(self._closed_files.items()):
            if max_end <= checkpoint:
                self._storage.delete(name)
                del self._closed_files[name]
                log.debug("redo log %s is below the checkpoint %d: deleted", name, checkpoint)

    def checkpoint(self, ts: int) -> None:
        """The sink's checkpoint; persisted within meta-flush-interval."""
        self._checkpoint = ts
        self._meta_dirty = True
        if self._clock() - self._last_meta_write >= self._meta_interval:
            self._submit(self._write_meta_if_dirty)

    def flush_checkpoint(self, ts: int) -> None:
        """Persist `ts` as the checkpoint now (before a DDL runs)."""
        self._checkpoint = ts
        self._submit(self._write_meta).result()

    def _write_meta_if_dirty(self) -> None:
        if self._meta_dirty:
            self._write_meta()

    def _flush_meta_periodically(self) -> None:
        while not self._stop.wait(self._meta_interval):
            if self._meta_dirty and self._error is None:
                try:
                    self._submit(self._write_meta_if_dirty)
                except RuntimeError:  # the executor shut down meanwhile
                    return

    # -- lifecycle -----------------------------------------------------------------------
    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise ErrRedoFileOp(f"writing the redo log to {self._storage.location.scheme}://"
                                f"{self._storage.location.root} failed: {self._error}") from self._error

    @property
    def is_local(self) -> bool:
        return self._storage.is_local

    @property
    def persisted_checkpoint(self) -> int:
        return self._persisted_checkpoint

    def close(self) -> None:
        self._stop.set()
        self._flusher.join(timeout=10)
        try:
            if self._error is None:
                self._submit(self._write_meta_if_dirty).result()
        except BaseException:
            log.exception("flushing the redo meta on close")
        finally:
            for kind in list(self._open):
                self._executor.submit(self._close_file, kind)
            self._executor.shutdown(wait=True)


class RedoBatch:
    """One micro-batch's redo: frames are written in the background as they are added."""

    def __init__(self, writer: RedoWriter, start: int, end: int):
        self._writer, self.start, self.end = writer, start, end
        self._frames = 0
        self._futures: list[Future] = []

    def _add(self, kind: str, kind_code: int, encode: Callable[[], bytes], rows: int = 0) -> None:
        part = self._frames
        self._frames += 1
        writer = self._writer

        def task() -> None:
            began = time.monotonic()
            frame = fmt.encode_frame(kind_code, writer._run, self.start, self.end, part, encode(),
                                     writer._compress)
            writer._append(kind, frame, self.start, self.end)
            metrics = writer._metrics.get(kind)
            if metrics is not None:
                metrics.record_write(len(frame), rows, time.monotonic() - began)

        self._futures.append(writer._submit(task))

    def add_rows(self, info: TableInfo, rows: Sequence[RowChange]) -> None:
        if rows:
            self._add("row", fmt.KIND_ROW, lambda: fmt.encode_rows(info, rows), len(rows))

    def add_ddls(self, ddls: Sequence[DDLEvent]) -> None:
        if ddls:
            self._add("ddl", fmt.KIND_DDL, lambda: fmt.encode_ddls(ddls))

    def seal(self, durable: bool = True) -> None:
        """No more frames: the COMMIT frame follows in the background, then a sync unless
        `durable` is False (a batch with no rows and no DDL: nothing is applied from it)."""
        writer = self._writer
        frames = self._frames
        self._futures.append(writer._submit(lambda: writer._commit(self.start, self.end, frames, durable)))

    def commit(self) -> None:
        """Return once the batch is durable: a reader's resolved-ts is at least its end."""
        self.seal()
        self.wait()

    def wait(self) -> None:
        """Return once a sealed batch is durable: a reader's resolved-ts is at least its end."""
        for future in self._futures:
            try:
                future.result()
            except BaseException:
                break
        self._writer._raise_if_failed()
