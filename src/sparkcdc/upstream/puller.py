"""Tails the upstream binlog and records every transaction's boundaries and commit-ts in a TxnIndex.

The puller does not decode rows: it only cuts transactions (GTID event .. Xid / COMMIT / the DDL
statement; the rows CREATE TABLE ... SELECT logs after its DDL in the same GTID group are the next
transaction, up to the group's commit), gives each a strictly increasing commit-ts, notes the ones
MariaDB flagged `skip_replication` (a BDR peer's sink wrote them), records DDLs with the table
definitions after them, and moves resolved-ts forward (also while the upstream is idle, on heartbeats).
Row decoding happens later, in parallel, on binlog ranges (`range_reader`).

Table definitions come from the schema store (`sparkcdc.schema`): information_schema is read
once, when the index is bootstrapped, and every later version is computed from the DDL text,
so a lagging or restarted puller records each version as it was at its commit-ts.

The puller survives its upstream, as a MariaDB replica's IO thread does: a lost or refused
connection (the server restarted, a KILL, a network cut; a socket silent for READ_TIMEOUT_SECONDS
despite heartbeats counts as lost) is retried every RECONNECT_BACKOFF_MAX seconds at most, for
as long as it takes, from the end of the last transaction in the index, which holds exactly the
transactions whose resolved-ts was persisted (nothing is lost or recorded twice). An error that
no retry fixes (a purged binlog, an event it cannot read, a binlog setting changed by the
restart) stops it. `health()` says which of these it is in, with the coded error a user sees:
the changefeed runner shows it on every changefeed of this capture (warning while it reconnects
or stalls, failed when it stopped) and restarts queries as soon as it is running again.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from sparkcdc.errors import ErrBinlogUnsupportedEvent, ErrPullerFailed, ErrPullerStalled, SparkCDCError
from sparkcdc.model import tso
from sparkcdc.model.events import FK_CHECKS_MIXED, FK_CHECKS_OFF, FK_CHECKS_ON, DDLEvent, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.connection import UpstreamConfig, binlog_end, upstream_error
from sparkcdc.upstream.preflight import preflight
from sparkcdc.schema.catalog import stable_table_id  # noqa: F401  (re-exported)
from sparkcdc.schema.store import DDLOutcome, SchemaStore, is_ddl
from sparkcdc.upstream.schema_reader import read_catalog
from sparkcdc.upstream.statements import classify
from sparkcdc.upstream.txn_index import DEFAULT_PIECE_BYTES, PieceStart, TableVersion, TxnIndex, TxnRecord

_ROWS_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
PULLER_EVENTS = [
    MariadbGtidEvent,
    GtidEvent,
    QueryEvent,
    XidEvent,
    RotateEvent,
    HeartbeatLogEvent,
    XAPrepareEvent,
    NotImplementedEvent,
    # Only their positions (rows are decoded lazily, never here): where a large transaction is cut.
    TableMapEvent,
    *_ROWS_EVENTS,
]
_STMT_END_F = 0x0001  # a ROWS event's flag: the last event of its statement
# A ROWS event's flag: its statement ran with foreign_key_checks=0, so InnoDB cascaded nothing
# (with checks on, the rows it cascaded are not in the binlog either: a MySQL sink re-runs them).
_NO_FOREIGN_KEY_CHECKS_F = 0x0002
# An event header's flag (MariaDB's LOG_EVENT_SKIP_REPLICATION_F): written by a session with
# @@skip_replication, as a bdr-mode MySQL sink writes (every event of the transaction has it).
_SKIP_REPLICATION_F = 0x8000

COMPRESSION_FIX = (
    "binlog compression is not supported: set log_bin_compress=OFF (MariaDB) or "
    "binlog_transaction_compression=OFF (MySQL) globally, and make sure no session turns it on"
)


def unsupported_event(event, at: Optional[BinlogPosition] = None) -> ErrBinlogUnsupportedEvent:
    event_type = getattr(event, "event_type", None)
    if event_type is None and hasattr(event, "packet"):
        event_type = getattr(event.packet, "event_type", None)
    kind = f"0x{event_type:02X}" if isinstance(event_type, int) else type(event).__name__
    where = f" at {at}" if at is not None else ""
    return ErrBinlogUnsupportedEvent(
        f"binlog event type {kind} ({type(event).__name__}){where} cannot be decoded; refusing to skip it. "
        f"If it is a compressed event: {COMPRESSION_FIX}"
    )


def event_start(stream: BinLogStreamReader, event) -> BinlogPosition:
    """The position where `event` begins (its header's log_pos is where the next one begins)."""
    return BinlogPosition(stream.log_file, event.packet.log_pos - event.packet.event_size)


# A MariaDB GTID event's flag: the group is one statement (DDL) with no BEGIN/COMMIT around it.
# Without it, the GTID event itself opens the group (MariaDB writes no BEGIN event), which ends
# at its XID, or at a COMMIT/ROLLBACK query when a non-transactional table changed in it (MyISAM,
# Aria, a sequence's NEXT VALUE/SETVAL).
_FL_STANDALONE = 0x01


@dataclass
class _OpenTxn:
    gtid: Optional[str]
    start: BinlogPosition
    in_begin: bool = False  # inside BEGIN..COMMIT: a statement in it does not end it
    opened_by_gtid: bool = False  # MariaDB: the GTID event opened the group (see _FL_STANDALONE)
    skip_replication: bool = False  # its GTID event carries _SKIP_REPLICATION_F
    continues_group: bool = False  # the rest of a group after its DDL (TxnRecord.continues_group)
    pieces: list[PieceStart] = field(default_factory=list)
    # The TABLE_MAP events of the statement whose ROWS events are being read: table_id -> position.
    statement_maps: dict[int, int] = field(default_factory=dict)
    # Per ROWS event so far, whether it ran without foreign key checks.
    unchecked_rows_events: set[bool] = field(default_factory=set)

    @property
    def foreign_key_checks(self) -> str:
        if True not in self.unchecked_rows_events:
            return FK_CHECKS_ON
        return FK_CHECKS_MIXED if False in self.unchecked_rows_events else FK_CHECKS_OFF

    def see_table_map(self, table_id: int, pos: int) -> None:
        self.statement_maps[table_id] = pos

    def see_rows(self, table_id: int, flags: int, start: BinlogPosition, piece_bytes: int) -> None:
        """Cut a new piece at this ROWS event once the current one holds `piece_bytes`; count
        how it ran foreign key checks."""
        self.unchecked_rows_events.add(bool(flags & _NO_FOREIGN_KEY_CHECKS_F))
        piece_start = self.pieces[-1].pos if self.pieces else self.start.pos
        if (start.file == self.start.file and start.pos - piece_start >= piece_bytes
                and table_id in self.statement_maps):
            self.pieces.append(PieceStart(start.pos, tuple(sorted(self.statement_maps.values()))))
        if flags & _STMT_END_F:
            self.statement_maps = {}


# How long the upstream may stay silent before it sends a heartbeat, which moves resolved-ts to the
# local clock. An idle changefeed's checkpoint lag is up to this plus the micro-batch trigger
# interval (1 s) plus an empty batch; at 1 s it reached 2.5-3.7 s on 2 busy cores
# (bench/latency_bench.py), above issue 11's 2 s. Four heartbeats a second cost nothing measurable.
DEFAULT_HEARTBEAT_SECONDS = 0.25
# A replication socket silent this long despite heartbeats is dead (a half-open TCP connection
# would otherwise block the read forever): reconnect. Data waiting in the socket is read at once
# however busy this process is, so load does not trip it.
READ_TIMEOUT_SECONDS = 10.0
# Waits between reconnection attempts: a refused connection costs nothing, and the changefeeds
# go on within about this much after the upstream is back.
RECONNECT_BACKOFF_INITIAL = 0.5
RECONNECT_BACKOFF_MAX = 2.0
# A running puller that has read no event (not even a heartbeat) for this long is stalled.
STALL_SECONDS = 30.0
# While it reconnects, the puller logs the error at most this often.
RECONNECT_LOG_SECONDS = 60.0
# An event the puller cannot read is in the binlog for good.
PULLER_CANNOT_PASS_FIX = ("No changefeed of this server can replicate past it: recreate them at a position after "
                          "it, after stopping the server, moving txn-index.sqlite out of its data dir and starting "
                          "it again (it indexes from the upstream's current position)")
# The puller's own position was purged: its index cannot go on.
PULLER_PURGED_FIX = ("This server's transaction index ends there and cannot skip the gap: stop the server, move "
                     "txn-index.sqlite out of its data dir and start it again (it indexes from the upstream's "
                     "current position), then recreate the changefeeds with a newer --start-ts.")

log = logging.getLogger(__name__)

STARTING, RUNNING, RECONNECTING, STALLED, FAILED, STOPPED = (
    "starting", "running", "reconnecting", "stalled", "failed", "stopped")


@dataclass(frozen=True)
class PullerHealth:
    """What the puller is doing, for the changefeed runner and `changefeed query`."""

    state: str  # starting | running | reconnecting | stalled | failed | stopped
    upstream: str  # the masked upstream URI
    since: float  # wall-clock time the state began
    connects: int = 0  # successful (re)connections so far: a new one means the upstream came back
    error: Optional[SparkCDCError] = None  # why it is reconnecting, stalled or failed

    @property
    def problem(self) -> Optional[SparkCDCError]:
        """The error every changefeed of this capture shows, None while the puller is fine."""
        return self.error if self.state in (RECONNECTING, STALLED, FAILED) else None

    def to_json(self) -> dict:
        return {"state": self.state, "upstream": self.upstream,
                "since": _dt.datetime.fromtimestamp(self.since, _dt.timezone.utc).isoformat(),
                "error": None if self.error is None else {"code": self.error.code, "message": self.error.message}}


class Puller:
    """Background thread that keeps a TxnIndex in step with the upstream binlog."""

    def __init__(
        self,
        cfg: UpstreamConfig,
        index: TxnIndex,
        server_id: int,
        heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
        flush_interval: float = 0.2,
        flush_max_txns: int = 5000,
        clock: Callable[[], float] = time.time,
        piece_bytes: int = DEFAULT_PIECE_BYTES,
    ):
        self.cfg = cfg
        self.index = index
        self.server_id = server_id
        self.heartbeat_seconds = heartbeat_seconds
        self.flush_interval = flush_interval
        self.flush_max_txns = flush_max_txns
        self.clock = clock
        self.piece_bytes = piece_bytes
        self.error: Optional[SparkCDCError] = None  # set when it stopped for good (state failed)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._state_lock = threading.Lock()
        self._health = PullerHealth(STARTING, cfg.masked_uri(), time.time())
        self._last_event = time.monotonic()
        self._stream: Optional[BinLogStreamReader] = None
        # The binlog position up to which everything is persisted (for wait_caught_up).
        self._flushed_position: Optional[BinlogPosition] = None
        # What this puller has indexed since it was made, counted per index write (the metrics read them).
        self.indexed_transactions = 0
        self.indexed_binlog_bytes = 0
        self._progress = threading.Condition()

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> "Puller":
        self._thread = threading.Thread(target=self._run, name=f"puller-{self.server_id}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop after the current event; the blocking read returns at the latest on the next heartbeat."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else 3 * self.heartbeat_seconds + 10)

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Block until everything the upstream binlog holds now is in the index (tests, demos)."""
        conn = self.cfg.connect()
        try:
            target = binlog_end(conn)
        finally:
            conn.close()
        deadline = time.monotonic() + timeout
        with self._progress:
            while True:
                if self.error is not None:
                    raise self.error
                flushed = self._flushed_position
                if flushed is not None and flushed.key() >= target.key():
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"puller at {flushed}, binlog end {target}")
                self._progress.wait(min(remaining, 0.1))

    # ---- the loop ------------------------------------------------------------------------------

    def health(self) -> PullerHealth:
        """The puller's state; a running puller that read nothing for STALL_SECONDS is `stalled`,
        and one whose thread ended without saying why is `failed`."""
        with self._state_lock:
            health = self._health
        if health.state == RUNNING:
            silent = time.monotonic() - self._last_event
            if silent > STALL_SECONDS:
                return PullerHealth(STALLED, health.upstream, time.time() - silent, health.connects, ErrPullerStalled(
                    f"the binlog puller has read nothing from upstream {health.upstream} for {silent:.0f}s (the "
                    f"upstream sends a heartbeat every {self.heartbeat_seconds}s); the server log may say why"))
        thread = self._thread
        if thread is not None and not thread.is_alive() and health.state not in (FAILED, STOPPED):
            return PullerHealth(FAILED, health.upstream, health.since, health.connects, ErrPullerFailed(
                "the binlog puller thread ended without an error; resume the changefeeds to restart it"))
        return health

    def _set_state(self, state: str, error: Optional[SparkCDCError] = None, connected: bool = False) -> None:
        with self._state_lock:
            previous = self._health
            since = previous.since if previous.state == state else time.time()
            self._health = PullerHealth(state, previous.upstream, since, previous.connects + connected, error)
        if state == FAILED:
            self.error = error

    def _run(self) -> None:
        """Pull until stopped; reconnect after a lost connection, stop for good on anything else."""
        backoff = RECONNECT_BACKOFF_INITIAL
        down_since = last_logged = None
        try:
            while not self._stop.is_set():
                try:
                    self._pull()
                    return
                except BaseException as exc:
                    if self._stop.is_set():
                        return
                    error = self._user_error(exc)
                    if error.retryable is not True:
                        log.error("binlog puller stopped: %s", error, exc_info=not isinstance(exc, SparkCDCError))
                        self._set_state(FAILED, error)
                        return
                    now = time.monotonic()
                    if self._health.state == RUNNING:  # it had recovered: a new outage
                        backoff, down_since, last_logged = RECONNECT_BACKOFF_INITIAL, now, None
                    down_since = down_since or now
                    self._set_state(RECONNECTING, error)
                    if last_logged is None or now - last_logged >= RECONNECT_LOG_SECONDS:
                        log.warning("binlog puller: %s (reconnecting for %.0fs, retrying every %.1fs at most)",
                                    error, now - down_since, RECONNECT_BACKOFF_MAX)
                        last_logged = now
                    self._stop.wait(backoff)
                    backoff = min(RECONNECT_BACKOFF_MAX, backoff * 2)
        finally:
            if self._health.state != FAILED:
                self._set_state(STOPPED)
            with self._progress:
                self._progress.notify_all()

    def _user_error(self, exc: BaseException) -> SparkCDCError:
        """The coded error a user sees for what stopped `_pull`."""
        position = self._flushed_position
        doing = f"the binlog puller reading from {position}" if position else "the binlog puller"
        if isinstance(exc, ErrBinlogUnsupportedEvent):  # in the binlog for good: the puller cannot pass it
            return ErrBinlogUnsupportedEvent(f"{doing}: {exc.message}. {PULLER_CANNOT_PASS_FIX}")
        error = upstream_error(self.cfg, exc, doing, position, PULLER_PURGED_FIX)
        if error is not None:
            return error
        return ErrPullerFailed(
            f"{doing} stopped on an unexpected error: {type(exc).__name__}: {exc}; the server log has its trace. "
            "Resume the changefeeds (`sparkcdc cli changefeed resume`) to restart it, and report it if it repeats")

    def _connected(self) -> None:
        """The stream delivered its first event: the upstream is there."""
        if self._health.state != RUNNING:
            down = time.time() - self._health.since
            if self._health.state == RECONNECTING:
                log.info("binlog puller reconnected to upstream %s after %.1fs", self.cfg.masked_uri(), down)
            self._set_state(RUNNING, connected=True)

    def _bootstrap(self, ctl, attempts: int = 20) -> None:
        """Snapshot the schema at a binlog position. Two equal reads around the position prove no
        DDL ran in between, so the snapshot is the schema at exactly that position."""
        before = read_catalog(ctl)
        for _ in range(attempts):
            start = binlog_end(ctl)
            after = read_catalog(ctl)
            if after == before:
                break
            before = after
        else:
            raise SparkCDCError(f"the upstream schema kept changing during {attempts} bootstrap reads; retry when DDL is quiet")
        now_ts = tso.compose(int(self.clock() * 1000))
        tables = list(after.tables.values())
        self.index.bootstrap(
            start, now_ts, [t.info(now_ts) for t in tables], [t.to_json() for t in tables],
            after.databases, after.server_charset,
        )

    def _pull(self) -> None:
        """Connect, check the upstream's settings, and follow the binlog from the index's end."""
        preflight(self.cfg)  # also after a restart: the upstream may come back with other settings
        ctl = self.cfg.connect()
        try:
            if self.index.is_empty():
                self._bootstrap(ctl)
        finally:
            ctl.close()
        last = self.index.last_txn()
        position = last.end if last else self.index.start_position()
        self._last_ts = self.index.resolved_ts()
        self.store = SchemaStore.from_index(self.index, self._last_ts)
        self._flushed_position = position
        self._stream = BinLogStreamReader(
            connection_settings={**self.cfg.connection_settings(), "read_timeout": READ_TIMEOUT_SECONDS},
            server_id=self.server_id,
            log_file=position.file,
            log_pos=position.pos,
            resume_stream=True,
            blocking=True,
            slave_heartbeat=self.heartbeat_seconds,
            only_events=PULLER_EVENTS,
            filter_non_implemented_events=False,
            is_mariadb=False,
            enable_logging=False,
        )
        try:
            self._loop(self._stream)
        finally:
            self._stream.close()

    def _loop(self, stream: BinLogStreamReader) -> None:
        pending_txns: list[TxnRecord] = []
        pending_ddls: list[DDLEvent] = []
        pending_versions: list[TableVersion] = []
        pending_databases: list[tuple[str, int, Optional[str]]] = []
        open_txn: Optional[_OpenTxn] = None
        last_flush = time.monotonic()

        def flush() -> None:
            # Only called between transactions, so resolved-ts covers exactly the persisted txns.
            nonlocal pending_txns, pending_ddls, pending_versions, pending_databases, last_flush
            position = BinlogPosition(stream.log_file, stream.log_pos)
            self.index.append(pending_txns, pending_ddls, pending_versions, self._last_ts, pending_databases,
                              position)
            self.indexed_transactions += len(pending_txns)
            self.indexed_binlog_bytes += sum(txn.size for txn in pending_txns)
            pending_txns, pending_ddls, pending_versions, pending_databases = [], [], [], []
            last_flush = time.monotonic()
            with self._progress:
                self._flushed_position = position
                self._progress.notify_all()

        while not self._stop.is_set():
            event = stream.fetchone()
            self._last_event = time.monotonic()
            if event is None:
                continue
            self._connected()
            if isinstance(event, (MariadbGtidEvent, GtidEvent)):
                if open_txn is not None:
                    raise ErrBinlogUnsupportedEvent(
                        f"transaction {open_txn.gtid} at {open_txn.start} has no commit event before the next GTID"
                    )
                gtid = event.gtid if isinstance(event, MariadbGtidEvent) else str(event.gtid).lower()
                open_txn = _OpenTxn(gtid, event_start(stream, event),
                                    skip_replication=bool(event.packet.flags & _SKIP_REPLICATION_F))
                if isinstance(event, MariadbGtidEvent) and not event.flags & _FL_STANDALONE:
                    open_txn.in_begin = open_txn.opened_by_gtid = True
            elif isinstance(event, XidEvent):
                if open_txn is not None:
                    pending_txns.append(self._close(open_txn, stream, event, False))
                    open_txn = None
            elif isinstance(event, QueryEvent) and open_txn is not None:
                kind = classify(event.query)
                if kind == "begin":
                    open_txn.in_begin = True
                elif kind in ("commit", "rollback") and open_txn.in_begin:
                    pending_txns.append(self._close(open_txn, stream, event, False))
                    open_txn = None
                elif kind == "xa":
                    raise ErrBinlogUnsupportedEvent(
                        f"XA transaction at {open_txn.start} is not supported yet; avoid XA on replicated tables"
                    )
                elif kind == "statement" and (not open_txn.in_begin
                                              or open_txn.opened_by_gtid and is_ddl(event.query)):
                    # A DDL is a transaction of its own. In a group the GTID event opened, it is
                    # CREATE TABLE ... SELECT's: the rows and the group's XID/COMMIT follow it, and
                    # become the next transaction (a later commit-ts, after the DDL's barrier).
                    schema = event.schema.decode("utf-8") if isinstance(event.schema, bytes) else (event.schema or "")
                    ddl = is_ddl(event.query)
                    record = self._close(open_txn, stream, event, ddl)
                    open_txn = (_OpenTxn(record.gtid, record.end, in_begin=True, opened_by_gtid=True,
                                         skip_replication=open_txn.skip_replication, continues_group=True)
                                if open_txn.opened_by_gtid else None)
                    pending_txns.append(record)
                    if ddl:
                        outcome = self.store.apply(event.query, schema, record.commit_ts, str(open_position(record)))
                        self._record(outcome, record.commit_ts, pending_ddls, pending_versions, pending_databases)
            elif isinstance(event, TableMapEvent):
                if open_txn is not None:
                    open_txn.see_table_map(event.table_id, event_start(stream, event).pos)
            elif isinstance(event, _ROWS_EVENTS):
                if open_txn is not None:
                    open_txn.see_rows(event.table_id, event.flags, event_start(stream, event), self.piece_bytes)
            elif isinstance(event, XAPrepareEvent):
                raise ErrBinlogUnsupportedEvent(f"XA PREPARE at {event_start(stream, event)} is not supported yet; "
                                                "avoid XA on replicated tables")
            elif isinstance(event, NotImplementedEvent):
                raise unsupported_event(event, event_start(stream, event))

            if open_txn is not None:
                continue
            if isinstance(event, HeartbeatLogEvent):
                # Caught up and between transactions: an idle upstream still makes progress.
                self._last_ts = max(self._last_ts + 1, tso.compose(int(self.clock() * 1000)))
                flush()
            elif isinstance(event, RotateEvent) or (
                pending_txns
                and (len(pending_txns) >= self.flush_max_txns or time.monotonic() - last_flush >= self.flush_interval)
            ):
                flush()

        if open_txn is None and pending_txns:
            self.index.append(pending_txns, pending_ddls, pending_versions, self._last_ts, pending_databases)

    def _close(self, txn: _OpenTxn, stream: BinLogStreamReader, event, is_ddl: bool) -> TxnRecord:
        end = BinlogPosition(stream.log_file, event.packet.log_pos)
        commit_ts = tso.next_after(self._last_ts, event.timestamp)
        self._last_ts = commit_ts
        return TxnRecord(commit_ts, txn.gtid, txn.start, end, end.pos - txn.start.pos, is_ddl, tuple(txn.pieces),
                         txn.foreign_key_checks, txn.skip_replication, txn.continues_group)

    @staticmethod
    def _record(outcome: DDLOutcome, commit_ts: int, ddls: list, versions: list, databases: list) -> None:
        """Queue a DDL's event and the table and database versions it created."""
        ddls.append(outcome.event)
        for (schema, table), definition in outcome.tables.items():
            info = definition.info(commit_ts) if definition is not None else None
            versions.append(
                TableVersion(schema, table, commit_ts, info, definition.to_json() if definition is not None else None)
            )
        for name, charset in outcome.databases.items():
            databases.append((name, commit_ts, charset))


def open_position(record: TxnRecord) -> BinlogPosition:
    """Where a DDL's transaction begins in the binlog (reported with DDLs the store cannot follow)."""
    return record.start
