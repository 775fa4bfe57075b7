"""The initial snapshot: a changefeed copies the rows its tables already hold, beside its stream.

Design (docs/snapshot.md has the reasoning and the measurements):
- **No lock, one consistent read per chunk.** Each table is cut into chunks by its chunk key
  (upstream/snapshot_reader.py), and each chunk is read by a Spark task in its own
  `START TRANSACTION WITH CONSISTENT SNAPSHOT`, whose binlog_snapshot_file/position P is the
  exact binlog position the rows are consistent with. Chunks are read in waves of `parallelism`
  tasks (a Spark job of chunk partitions, next to the stream's own jobs).
- **A chunk enters the stream exactly at P.** The stream runs from the snapshot's start; a chunk
  read at P goes into the micro-batch that holds the end of P's last transaction T, right after
  T and before the next one, with the commit-ts free_slot_after(T) (model/tso.py keeps that value
  free), or at the start of a batch beyond T when T is older than it. So every DDL before P is
  downstream before the chunk's rows (which have P's table version; a chunk read with another
  version than P's is read again), every change after P follows them, and sinks and consumers
  see one stream ordered by commit-ts: for a key, the changes before P (if any), the chunk's
  insert with the row as of P, the changes after P. Nothing is dropped for keyed tables.
- **Why that is equal to the upstream.** Downstream, each row ever written is a copy of the
  upstream row at that point of the stream (inserts and updates carry whole rows), so the
  downstream is always a subset of the upstream; a chunk's insert then makes the rows of its
  key range exact. While a table is copied the MySQL sink writes its rows idempotently (a chunk
  row over an earlier insert, a key moved into an already copied chunk: `Sink.set_snapshot_tables`),
  as TiCDC writes a table's first rows after a table move. Storage and Kafka split key-changing
  updates into delete + insert, so their consumers rebuild the same tables.
- **Ordering with the stream without locking it.** A micro-batch may only be written when every
  chunk whose P lies inside it is in hand: the batch writer waits (`wait_for_reads`) while a
  wave that started before the batch's end is still reading (its chunks' P are after the
  resolved-ts the wave started at). Read chunks wait in memory (memory-mapped spool files with
  local executors) until the stream reaches them; at most PENDING_WAVES waves of them.
- **Tables without a valid index** (force-replicate) are one chunk; their changes are dropped
  until that chunk is in the stream (a row without a key cannot be matched later), so the
  downstream gets the table as of P and every change after it.
- **Resume.** Chunk boundaries are kept in the metadata store as they are planned, a chunk is
  marked done after its batch is flushed and before that batch's checkpoint, so a restart (crash,
  SIGKILL, pause) reads only the chunks not done; a chunk read but not yet in a checkpointed
  batch is read again at a new position, which is as correct as the first.
- **Downstream tables.** Before the stream starts, the sink gets a CREATE DATABASE and a CREATE
  TABLE (SHOW CREATE TABLE, checked against the binlog to be the definition at the start point)
  for every table to copy, as DDL events: MySQL runs them, storage writes schema files, Kafka
  sends them where the protocol has DDL events.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc import failpoint
from sparkcdc.errors import ErrUpstreamUnreachable, SparkCDCError
from sparkcdc.model import tso
from sparkcdc.model.change_batch import RANGE_MARKER, runs_of_equal
from sparkcdc.model.changefeed import ChangefeedStore
from sparkcdc.model.events import DDLEvent, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.model.snapshot import ChunkState, SnapshotState, TableSnapshot
from sparkcdc.pipeline.planning import set_chunks_waiting, set_stream_cap
from sparkcdc.schema import ddl_types as T
from sparkcdc.upstream.connection import UpstreamConfig, binlog_end
from sparkcdc.upstream.snapshot_reader import (
    CHUNK_MARKER, PROBLEM_TABLE_GONE, ChunkRead, check_readable, choose_chunk_key, connect_for_reads,
    estimated_rows, last_key, next_boundary, quote_name, table_indexes, table_name,
)
from sparkcdc.upstream.switchover import followed_server
from sparkcdc.upstream.txn_index import TxnIndex

log = logging.getLogger(__name__)

# Read chunks waiting for the stream to reach them: at most this many waves' worth.
PENDING_WAVES = 2
# How often the progress line is logged while the snapshot runs.
PROGRESS_LOG_SECONDS = 5.0
# A wave that read nothing usable (its tables changed under it) is tried again after this.
RETRY_SECONDS = 1.0
# How long the first chunk reads wait for the stream's first batch.
STREAM_START_WAIT_SECONDS = 60.0
# How often the stage looks for snapshots asked for through the API.
REQUEST_POLL_SECONDS = 2.0
# Failpoint (docs/failpoints.md): each wave of chunk reads waits this many seconds first.
SNAPSHOT_WAVE_PAUSE = "snapshot-wave-pause"


@dataclass
class PendingChunk:
    """A chunk read and waiting for its place in the stream."""

    table: TableSnapshot
    chunk: ChunkState
    position: BinlogPosition
    version: int
    rows: pa.Table  # CHANGE_SCHEMA rows, commit_ts still the read's chunk number
    epoch: int = 0  # the index's source whose binlog `position` is in (the server the chunk was read on)


@dataclass
class Placement:
    """A chunk placed into a micro-batch at `commit_ts`."""

    pending: PendingChunk
    commit_ts: int


@dataclass
class _Wave:
    since: int  # the resolved-ts when the wave began: its chunks' positions are after it
    epoch: int  # the index's source the chunks are read on
    chunks: list[tuple[TableSnapshot, ChunkState, ChunkRead]] = field(default_factory=list)


def snapshot_tables(index: TxnIndex, ts: int, config) -> list[TableInfo]:
    """The tables a changefeed with ReplicaConfig `config` copies at `ts`: those its filter
    replicates (eligible, or every one with force-replicate), narrowed by `[snapshot] tables`."""
    from sparkcdc.filter.eligibility import classify_tables
    from sparkcdc.filter.table_filter import TableFilter

    eligible, _ = classify_tables(index.tables_at(ts), config)
    if config.snapshot.tables:
        only = TableFilter(config.snapshot.tables, config.case_sensitive)
        eligible = [t for t in eligible if only.match(t.schema, t.table)]
    return sorted(eligible, key=lambda t: (t.schema, t.table))


def verify_snapshot(upstream: UpstreamConfig, tables: list[TableInfo], config) -> None:
    """At changefeed creation: every table is readable and every chunk-key rule names an index
    (coded errors naming the fix)."""
    rules = {rule.table: rule.columns for rule in config.snapshot.chunk_keys}
    conn = connect_for_reads(upstream)
    try:
        names = set()
        for info in tables:
            check_readable(conn, info)
            name = f"{info.schema}.{info.table}"
            names.add(name)
            if name in rules:
                choose_chunk_key(info, table_indexes(conn, info.schema, info.table), rules[name])
        for table in rules:
            if table not in names:
                from sparkcdc.errors import ErrSnapshotChunkKeyInvalid

                raise ErrSnapshotChunkKeyInvalid(
                    f"[[snapshot.chunk-keys]] names {table}, which this changefeed does not copy (it does not exist, "
                    "or the filter or [snapshot] tables leave it out); fix the table name or remove the rule")
    finally:
        conn.close()


def in_commit_order(batch: pa.Table, chunks: list[tuple[int, pa.Table]]) -> pa.Table:
    """The batch with each chunk's rows (commit-ts, rows) among its own rows in commit-ts order,
    range markers first, when the batch is so ordered itself: then a batch of one table (a big
    table's chunks and the writes to it meanwhile) stays in the order batch_sink.tables_of needs
    not to sort and copy every row image. Appended last, any stream row after a chunk's commit-ts
    made it do so: a 3M-row snapshot beside a writer took 3.2-4.1 us of CPU a row against 2.2-2.4
    without one, and 2.8-3.0 in order (docs/benchmarks.md). Else the chunks go last, and
    tables_of sorts. Zero-copy: slices of the batch and the chunks."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])  # stable: chunks of one commit-ts keep their seq order
    markers = pc.equal(batch["op"], RANGE_MARKER).to_numpy(zero_copy_only=False)
    first_row = int(markers.sum())
    commit_ts = batch["commit_ts"].to_numpy()[first_row:]
    if markers[first_row:].any() or (commit_ts.size > 1 and bool(np.any(commit_ts[1:] < commit_ts[:-1]))):
        return pa.concat_tables([batch, *(rows for _, rows in chunks)])
    parts, done = [batch.slice(0, first_row)], first_row
    for ts, rows in chunks:
        at = first_row + int(np.searchsorted(commit_ts, ts, side="right"))
        parts += [batch.slice(done, at - done), rows]
        done = at
    parts.append(batch.slice(done))
    return pa.concat_tables(parts)


class SnapshotStage:
    """One changefeed's snapshot while its query runs: the reading thread (waves of chunk reads
    on Spark), the chunks waiting for their place, and what the batch writer asks of it."""

    def __init__(self, namespace: str, changefeed_id: str, config, upstream_uri: str, index: TxnIndex,
                 store: ChangefeedStore, read_wave: Callable[[list[ChunkRead]], pa.Table], parallelism: int,
                 clock: Callable[[], float] = time.time, cap_file: str = ""):
        """`config` the ReplicaConfig; `read_wave` runs the chunk reads (a Spark job) and returns
        their CHANGE_SCHEMA rows with markers; `cap_file` the stream's cap file
        (SourceOptions.cap_file), "" where the source cannot read it."""
        self.namespace, self.changefeed_id = namespace, changefeed_id
        self.name = f"{namespace}/{changefeed_id}"
        self._config = config
        self._snapshot = config.snapshot
        self._upstream = UpstreamConfig.from_uri(upstream_uri)  # its servers: read from `_server()`
        self._index = index
        self._store = store
        self._read_wave = read_wave
        self._parallelism = max(1, config.snapshot.parallelism or parallelism)
        self._clock = clock
        self._lock = threading.Condition()
        self.state = SnapshotState.from_json(store.get_snapshot(namespace, changefeed_id))
        self._pending: list[PendingChunk] = []
        self._waiting_told = False  # whether the source was told chunks wait (_tell_waiting)
        self._reading: Optional[_Wave] = None
        self._stop = threading.Event()
        self._stream_running = threading.Event()  # the stream has written its first batch
        self._thread: Optional[threading.Thread] = None
        self.failure: Optional[BaseException] = None
        self._last_log = 0.0
        self.chunks_read = 0  # by this run (the restart tests read it from the log)
        self._cap_file = cap_file

    def _server(self) -> tuple[UpstreamConfig, int]:
        """The server the index follows (of several in the URI, the primary) and its epoch: a
        chunk's binlog position is that server's, mapped into the index in that epoch. A chunk
        read before a failover and not yet placed is read again on the new server (`placements`)."""
        return followed_server(self._index, self._upstream)

    # -- start: the downstream tables ---------------------------------------------------------
    @property
    def finished(self) -> bool:
        with self._lock:
            return self.state.finished

    def bootstrap(self, sink, checkpoint_ts: int, attempts: int = 10) -> int:
        """Before the first start: choose the tables, send their databases and tables to the sink
        as CREATE DDL events, and return the checkpoint the stream starts at (the point those
        definitions are the upstream's). A restart returns `checkpoint_ts`."""
        if self.state.bootstrapped:
            self._log_resume()
            return checkpoint_ts
        server, epoch = self._server()
        conn = connect_for_reads(server)
        try:
            for _ in range(attempts):
                start = max(checkpoint_ts, self._index.resolved_ts())
                tables = snapshot_tables(self._index, start, self._config)
                definitions = self._definitions(conn, tables)
                end = binlog_end(conn)
                self._wait_covered(end, epoch)
                changed = self._ddls_touching(tables, start, self._index.ts_at_position(end, epoch) or start)
                if not changed:
                    break
                log.info("snapshot of %s: DDL on %s while reading the table definitions; reading them again",
                         self.name, ", ".join(sorted(changed)))
            else:
                raise SparkCDCError(f"snapshot of {self.name}: the tables kept changing while their definitions were "
                                    "read; retry when DDL is quiet")
            rules = {rule.table: rule.columns for rule in self._snapshot.chunk_keys}
            snapshots = []
            for info in tables:
                check_readable(conn, info)
                name = f"{info.schema}.{info.table}"
                key = choose_chunk_key(info, table_indexes(conn, info.schema, info.table), rules.get(name, ()))
                snapshots.append(TableSnapshot(info.schema, info.table, key,
                                               estimated_rows=estimated_rows(conn, info.schema, info.table)))
        finally:
            conn.close()
        for ddl in definitions:
            sink.write_ddl(replace(ddl, commit_ts=start))
        sink.flush()
        with self._lock:
            self.state = SnapshotState(snapshots, True, start)
            self._persist()
        log.info("snapshot of %s starts at %d: %d tables (%s); their definitions are downstream", self.name, start,
                 len(snapshots), ", ".join(t.name for t in snapshots[:10]) + (" ..." if len(snapshots) > 10 else ""))
        return start

    def _definitions(self, conn, tables: list[TableInfo]) -> list[DDLEvent]:
        events, databases = [], []
        for info in tables:
            if info.schema not in databases:
                databases.append(info.schema)
        with conn.cursor() as cursor:
            for schema in databases:
                cursor.execute(f"SHOW CREATE DATABASE {quote_name(schema)}")
                query = _text(cursor.fetchone()[1]).replace("CREATE DATABASE", "CREATE DATABASE IF NOT EXISTS", 1)
                events.append(DDLEvent(0, schema, "", query, T.CREATE_DATABASE, extra={"default_schema": schema}))
            for info in tables:
                cursor.execute(f"SHOW CREATE TABLE {table_name(info.schema, info.table)}")
                query = _text(cursor.fetchone()[1])
                events.append(DDLEvent(0, info.schema, info.table, query, T.CREATE_TABLE, table_info=info,
                                       extra={"default_schema": info.schema, "snapshot": True}))
        return events

    def _ddls_touching(self, tables: list[TableInfo], low: int, high: int) -> set[str]:
        names = {f"{t.schema}.{t.table}" for t in tables} | {t.schema for t in tables}
        touched = set()
        for ddl in self._index.ddls_between(low, high):
            for name in (f"{ddl.schema}.{ddl.table}", ddl.schema):
                if name in names:
                    touched.add(name)
        return touched

    def _wait_covered(self, position: BinlogPosition, epoch: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self._index.covers(position, epoch):
            if self._index.current_epoch() != epoch:
                old = self._index.source(epoch)
                raise ErrUpstreamUnreachable(
                    f"snapshot of {self.name}: the upstream failed over while the copy's start was read from "
                    f"{old.address if old is not None else 'the old primary'}; the changefeed starts again on the "
                    "new primary")
            if time.monotonic() > deadline:
                raise SparkCDCError(f"snapshot of {self.name}: the binlog puller did not reach {position} within "
                                    f"{timeout:.0f}s; the server log says why")
            time.sleep(0.1)

    def _log_resume(self) -> None:
        done = sum(t.done_chunks for t in self.state.tables)
        left = sum(1 for t in self.state.tables if not t.finished)
        if not self.state.finished:
            log.info("snapshot of %s resumes: %d chunks already done are kept (not read again), %d tables still to "
                     "copy", self.name, done, left)

    # -- the reading thread ---------------------------------------------------------------------
    def start(self) -> "SnapshotStage":
        self._thread = threading.Thread(target=self._run, name=f"snapshot-{self.changefeed_id}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._stream_running.set()
        with self._lock:
            self._lock.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(60)
        set_stream_cap(self._cap_file, None)
        set_chunks_waiting(self._cap_file, False)

    close = stop

    def _run(self) -> None:
        try:
            # The first reads wait for the stream's first batch: a query's start (its Python source
            # process must connect back to Spark within 10 s) is the most fragile moment on a busy
            # machine, and a wave of chunk reads beside it made it miss that.
            self._stream_running.wait(STREAM_START_WAIT_SECONDS)
            while not self._stop.is_set():
                self._take_requests()
                if (seconds := failpoint.value(SNAPSHOT_WAVE_PAUSE)) is not None and not self.state.finished:
                    self._stop.wait(float(seconds))
                wave = self._next_wave()
                if wave is None:
                    self._log_progress()
                    with self._lock:
                        self._lock.wait(REQUEST_POLL_SECONDS)
                    continue
                self._read(wave)
                self._log_progress()
        except BaseException as exc:
            if not self._stop.is_set():
                log.error("snapshot of %s failed: %s", self.name, exc)
                self.failure = exc
        finally:
            with self._lock:
                self._reading = None
                self._lock.notify_all()

    def _next_wave(self) -> Optional[_Wave]:
        """Plan the next chunks to read (at most `parallelism`), or None when there is nothing to
        read now (all read and waiting for the stream, or too many waiting)."""
        with self._lock:
            if len(self._pending) >= PENDING_WAVES * self._parallelism:
                return None
            busy = {(id(p.table), p.chunk.number) for p in self._pending}
            wanted = self._parallelism
        since = self._index.resolved_ts()
        server, epoch = self._server()
        wave = _Wave(since, epoch)
        conn = None
        try:
            for table in list(self.state.tables):
                if len(wave.chunks) >= wanted:
                    break
                if table.finished:
                    continue
                info = self._index.table_info_at(table.schema, table.table, since)
                if info is None:
                    with self._lock:
                        table.finish(skipped="dropped before it was copied")
                        self._persist()
                    log.info("snapshot of %s: %s was dropped before it was copied", self.name, table.name)
                    continue
                if not table.started_at:
                    table.started_at = self._clock()
                for chunk in table.chunks:
                    if len(wave.chunks) >= wanted:
                        break
                    if not chunk.done and (id(table), chunk.number) not in busy:
                        wave.chunks.append((table, chunk, ChunkRead(server, len(wave.chunks), info.to_json(),
                                                                    table.key, chunk.low, chunk.high)))
                while len(wave.chunks) < wanted and not table.planned_all:
                    conn = conn or connect_for_reads(server)
                    chunk = self._plan_chunk(conn, info, table)
                    wave.chunks.append((table, chunk, ChunkRead(server, len(wave.chunks), info.to_json(), table.key,
                                                                chunk.low, chunk.high)))
        finally:
            if conn is not None:
                conn.close()
        if not wave.chunks:
            return None
        with self._lock:
            self._persist()  # the new boundaries survive a restart
            # The resolved-ts read above is older than now: every chunk's position is after it.
            self._reading = wave
            # So the stream may run up to it meanwhile: batches below it are written while the
            # wave reads (a batch beyond it would wait for the wave in wait_for_reads).
            set_stream_cap(self._cap_file, since)
        return wave

    def _tell_waiting(self) -> None:
        """With the lock held, after `_pending` changed: the source runs batches at once while
        read chunks wait for one (planning.set_chunks_waiting), at its interval otherwise."""
        waiting = bool(self._pending)
        if waiting != self._waiting_told:
            set_chunks_waiting(self._cap_file, waiting)
            self._waiting_told = waiting

    def _plan_chunk(self, conn, info: TableInfo, table: TableSnapshot) -> ChunkState:
        low = table.chunks[-1].high if table.chunks else None
        high = None
        if table.key is not None:
            if not table.chunks:
                table.last_key = last_key(conn, info, table.key)
            if table.last_key is not None:
                high = next_boundary(conn, info, table.key, low, self._snapshot.chunk_size, table.last_key)
        chunk = ChunkState(len(table.chunks), low, high)
        with self._lock:
            table.chunks.append(chunk)
        return chunk

    def _read(self, wave: _Wave) -> None:
        log.info("snapshot of %s reads %s", self.name,
                 ", ".join(f"{table.name}#{chunk.number}" for table, chunk, _ in wave.chunks))
        # The wave stops counting as reading only together with its chunks becoming pending: a
        # batch let through in between would miss chunks whose position lies inside it.
        try:
            read = self._pending_chunks(wave, self._read_wave([read for _, _, read in wave.chunks]))
        except BaseException:
            with self._lock:
                self._reading = None
                set_stream_cap(self._cap_file, None)
                self._lock.notify_all()
            raise
        with self._lock:
            self._pending.extend(read)
            self._tell_waiting()
            self.chunks_read += len(read)
            self._reading = None
            set_stream_cap(self._cap_file, None)
            self._lock.notify_all()
        if len(read) < len(wave.chunks):
            self._stop.wait(RETRY_SECONDS)

    def _pending_chunks(self, wave: _Wave, rows: pa.Table) -> list[PendingChunk]:
        """The wave's chunks from its rows: each chunk's marker, then its rows (model docstring of
        upstream/snapshot_reader.py); chunks whose table changed under them are left to read again."""
        result = []
        numbers = rows["commit_ts"].to_numpy() if rows.num_rows else []
        for low, high in runs_of_equal(numbers):
            marker = rows.slice(low, 1).to_pylist()[0]
            if marker["op"] != CHUNK_MARKER:
                raise SparkCDCError(f"snapshot of {self.name}: a chunk read returned rows without its marker")
            table, chunk, read = wave.chunks[marker["commit_ts"]]
            position, version, problem = marker["after"]
            if problem:
                log.info("snapshot of %s: %s#%d is read again: %s", self.name, table.name, chunk.number, problem)
                if problem.startswith(PROBLEM_TABLE_GONE):
                    self._stop.wait(RETRY_SECONDS)  # the index then shows it dropped
                continue
            result.append(PendingChunk(table, chunk, BinlogPosition.parse(position), int(version),
                                       rows.slice(low + 1, high - low - 1), wave.epoch))
        return result

    # -- what the batch writer asks -------------------------------------------------------------
    def wait_for_reads(self, end: int) -> None:
        """Block while a wave that began below `end` still reads: a batch up to `end` may hold
        changes after its chunks' positions, so it must wait for those chunks."""
        self._stream_running.set()
        with self._lock:
            while self._reading is not None and self._reading.since < end and not self._stop.is_set():
                self._lock.wait(0.5)

    def copying_tables(self) -> frozenset[tuple[str, str]]:
        """Tables whose copy is not finished (the sink writes their rows idempotently)."""
        with self._lock:
            return frozenset((t.schema, t.table) for t in self.state.tables if not t.finished)

    def placements(self, start: int, end: int) -> list[Placement]:
        """The read chunks whose place is in the batch (start, end], each with its commit-ts;
        chunks read with another table version than their position's are dropped to read again."""
        with self._lock:
            pending = list(self._pending)
        placed, stale = [], []
        for chunk in pending:
            if not self._index.covers(chunk.position, chunk.epoch):
                continue  # not read that far yet, or read on a server the index no longer follows (below)
            last = self._index.ts_at_position(chunk.position, chunk.epoch)
            if last is None:
                stale.append(chunk)
                continue
            commit_ts = tso.free_slot_after(max(last, start))
            if commit_ts > end:
                continue
            info = self._index.table_info_at(chunk.table.schema, chunk.table.table, last)
            if info is None or info.version != chunk.version:
                log.info("snapshot of %s: %s#%d was read with another table version than at %s (a DDL ran meanwhile); "
                         "it is read again", self.name, chunk.table.name, chunk.chunk.number, chunk.position)
                stale.append(chunk)
                continue
            placed.append(Placement(chunk, commit_ts))
        # Read after the lookups: a failover records its new source before it re-maps any position,
        # so a chunk of the epoch still current here was mapped before the re-map began.
        epoch = self._index.current_epoch()
        for chunk in pending:
            if chunk.epoch != epoch and chunk not in stale:
                log.info("snapshot of %s: %s#%d was read on %s, which the upstream failed over from; it is read again "
                         "on the new primary", self.name, chunk.table.name, chunk.chunk.number,
                         "a server" if (source := self._index.source(chunk.epoch)) is None else source.address)
                stale.append(chunk)
        placed = [p for p in placed if p.pending not in stale]
        if stale:
            with self._lock:
                self._pending = [p for p in self._pending if p not in stale]
                self._tell_waiting()
                self._lock.notify_all()
        return placed

    def dropped_before(self) -> dict[tuple[str, str], Optional[int]]:
        """Tables read as one chunk (no valid index): their changes at or before the returned
        commit-ts are dropped, all of them (None) while the chunk is not in the stream yet."""
        with self._lock:
            tables = [t for t in self.state.tables if t.key is None and not t.skipped]
        result: dict[tuple[str, str], Optional[int]] = {}
        for table in tables:
            done = [c for c in table.chunks if c.done and (c.commit_ts or c.position)]
            if done:
                # Its changes up to the chunk's place: in the stream, one below its commit-ts (a
                # state from before commit-ts were kept maps the position, on the server of then).
                anchor = (done[0].commit_ts - 1 if done[0].commit_ts
                          else self._index.ts_at_position(BinlogPosition.parse(done[0].position), 0))
                result[(table.schema, table.table)] = anchor if anchor is not None else 0
            elif not table.finished:
                result[(table.schema, table.table)] = None
        return result

    def merge(self, batch: pa.Table, placements: list[Placement]) -> pa.Table:
        """The batch with its placed chunks' rows (at their commit-ts) and without the changes of
        one-chunk tables before their chunk."""
        drops = self.dropped_before()
        for placement in placements:
            table = placement.pending.table
            if (table.schema, table.table) in drops and drops[(table.schema, table.table)] is None:
                drops[(table.schema, table.table)] = placement.commit_ts - 1
        if drops and batch.num_rows:
            drop = None
            for (schema, table), below in drops.items():
                match = pc.and_(pc.equal(batch["schema_name"], schema), pc.equal(batch["table_name"], table))
                if below is not None:
                    match = pc.and_(match, pc.less_equal(batch["commit_ts"], below))
                match = pc.and_(match, pc.not_equal(batch["op"], RANGE_MARKER))
                drop = match if drop is None else pc.or_(drop, match)
            batch = batch.filter(pc.invert(drop))
        if not placements:
            return batch
        chunks, next_seq = [], {}
        for placement in placements:
            rows = placement.pending.rows
            rows = rows.set_column(0, "commit_ts", pa.repeat(pa.scalar(placement.commit_ts, pa.int64()), rows.num_rows))
            # Chunks placed after the same transaction share its commit-ts: their seq go on from
            # one chunk to the next, so the batch stays in (commit_ts, seq) order and the writer
            # need not sort and copy every row (batch_sink.tables_of).
            if offset := next_seq.get(placement.commit_ts, 0):
                rows = rows.set_column(1, "seq", pc.add(rows["seq"], pa.scalar(offset, pa.int64())))
            next_seq[placement.commit_ts] = offset + rows.num_rows
            chunks.append((placement.commit_ts, rows))
        return in_commit_order(batch, chunks)

    def placed(self, placements: list[Placement]) -> bool:
        """The placed chunks are downstream (flushed): mark them done, before the batch's
        checkpoint. True when this finished the whole snapshot."""
        if not placements:
            return False
        with self._lock:
            for placement in placements:
                pending = placement.pending
                chunk, table = pending.chunk, pending.table
                if not chunk.done:
                    chunk.done, chunk.rows, chunk.position = True, pending.rows.num_rows, str(pending.position)
                    chunk.commit_ts = placement.commit_ts
                    table.done_chunks += 1
                    table.done_rows += chunk.rows
                if table.planned_all and all(c.done for c in table.chunks) and not table.finished:
                    table.finish()
                    log.info("snapshot of %s: %s copied, %d rows in %d chunks", self.name, table.name,
                             table.done_rows, table.done_chunks)
                if pending in self._pending:
                    self._pending.remove(pending)
            self._tell_waiting()
            self._persist()
            self._lock.notify_all()
            finished = self.state.finished
        if finished:
            log.info("snapshot of %s finished: %d rows of %d tables copied", self.name,
                     sum(t.done_rows for t in self.state.tables), len(self.state.tables))
        return finished

    # -- requests, progress ---------------------------------------------------------------------
    def _take_requests(self) -> None:
        """Tables asked for through the API (re-snapshot): copied again from now on, beside the stream."""
        requests = self._store.snapshot_requests(self.namespace, self.changefeed_id)
        handled = self.state.handled_request
        new = [r for r in requests if r["id"] > handled]
        if not new:
            return
        conn = connect_for_reads(self._server()[0])
        try:
            resolved = self._index.resolved_ts()
            for request in new:
                for name in request["tables"]:
                    schema, _, table = name.partition(".")
                    info = self._index.table_info_at(schema, table, resolved)
                    if info is None:
                        log.warning("snapshot of %s: asked to copy %s, which does not exist; ignored", self.name, name)
                        continue
                    check_readable(conn, info)
                    key = choose_chunk_key(info, table_indexes(conn, schema, table))
                    fresh = TableSnapshot(schema, table, key, estimated_rows=estimated_rows(conn, schema, table),
                                          incremental=True)
                    with self._lock:
                        self.state.tables = [t for t in self.state.tables if (t.schema, t.table) != (schema, table)]
                        self.state.tables.append(fresh)
                    log.info("snapshot of %s: copying %s again (request %d)", self.name, name, request["id"])
        finally:
            conn.close()
        with self._lock:
            self.state.handled_request = max(r["id"] for r in new)
            self._persist()

    def progress(self) -> dict:
        with self._lock:
            return self.state.progress(self._snapshot.chunk_size, self._clock())

    def _log_progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_log < PROGRESS_LOG_SECONDS:
            return
        self._last_log = now
        progress = self.progress()
        if progress["state"] == "done":
            return
        eta = progress["eta_seconds"]
        log.info("snapshot of %s: tables %d/%d, chunks %d/%d, rows %d, %.0f rows/s, ETA %s", self.name,
                 progress["tables_done"], progress["tables_total"], progress["chunks_done"], progress["chunks_total"],
                 progress["rows"], progress["rows_per_second"], "?" if eta is None else f"{eta:.0f}s")

    def _persist(self) -> None:
        """Under the lock."""
        self._store.put_snapshot(self.namespace, self.changefeed_id, self.state.to_json())


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value
