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
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import pymysql
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

from sparkcdc.errors import (ErrBinlogUnsupportedEvent, ErrPullerFailed, ErrPullerStalled, ErrUpstreamUnreachable,
                             SparkCDCError)
from sparkcdc.model import tso
from sparkcdc.model.events import FK_CHECKS_MIXED, FK_CHECKS_OFF, FK_CHECKS_ON, DDLEvent
from sparkcdc.model.gtid import GtidState, parse_state
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.connection import (Flavor, UpstreamConfig, binlog_end, binlog_end_and_gtids, binlog_gtid_pos,
                                          detect_flavor, server_identity, upstream_error)
from sparkcdc.upstream.preflight import preflight
from sparkcdc.schema.store import DDLOutcome, SchemaStore, is_ddl
from sparkcdc.upstream.schema_reader import read_catalog
from sparkcdc.upstream.statements import classify
from sparkcdc.upstream.switchover import REPLICA_WAIT_SECONDS, ReplicaWatch, Switch, choose_primary, prepare_switch
from sparkcdc.upstream.txn_index import DEFAULT_PIECE_BYTES, PieceStart, Source, TableVersion, TxnIndex, TxnRecord

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


class _BinlogStream(BinLogStreamReader):
    """mysql-replication's reader, except that a dump started at a GTID state, once it has
    delivered an event, reconnects (mysql-replication does so by itself on a lost connection)
    from the binlog position it reached, not from the GTID state again, which would deliver
    every transaction since that state a second time."""

    def fetchone(self):
        event = super().fetchone()
        if event is not None and self.auto_position is not None and self.log_file:
            self.auto_position, self.is_mariadb = None, False
        return event


def binlog_stream(server: UpstreamConfig, server_id: int, heartbeat_seconds: float,
                  position: Optional[BinlogPosition] = None, gtid_state: Optional[GtidState] = None,
                  ) -> BinLogStreamReader:
    """A blocking dump of PULLER_EVENTS from `server`: from `position`, or right after
    `gtid_state` (the server finds where: a GTID dump), with a heartbeat when idle."""
    settings = dict(
        connection_settings={**server.connection_settings(), "read_timeout": READ_TIMEOUT_SECONDS},
        server_id=server_id, resume_stream=True, blocking=True, slave_heartbeat=heartbeat_seconds,
        only_events=PULLER_EVENTS, filter_non_implemented_events=False, enable_logging=False)
    if gtid_state is not None:
        return _BinlogStream(**settings, auto_position=str(gtid_state), is_mariadb=gtid_state.flavor == "mariadb")
    assert position is not None
    return _BinlogStream(**settings, log_file=position.file, log_pos=position.pos, is_mariadb=False)


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


@dataclass(frozen=True)
class CutTxn:
    """One transaction as the binlog delimits it, before it has a commit-ts."""

    gtid: Optional[str]
    start: BinlogPosition
    end: BinlogPosition  # after its commit event
    pieces: tuple[PieceStart, ...]
    timestamp: int  # its commit event's time, whole seconds
    query: Optional[str] = None  # the statement that made it a group of its own (a DDL, ...)
    schema: str = ""  # that statement's default database
    is_ddl: bool = False
    foreign_key_checks: str = FK_CHECKS_ON  # how its ROWS events ran (_OpenTxn.foreign_key_checks)
    skip_replication: bool = False  # written by a session with MariaDB's @@skip_replication
    continues_group: bool = False  # the rest of a GTID group after its DDL (TxnRecord.continues_group)


class TxnCutter:
    """Cuts a binlog event stream into transactions: GTID event .. XID / COMMIT / ROLLBACK, or
    the one statement of a standalone group (a DDL; CREATE TABLE ... SELECT's rows after it, up to
    its group's commit, are the next transaction), with the cut points of large ones (`piece_bytes`). Shared by the puller and the
    walks that re-map or back-fill the index (switchover.py, backfill.py), so all cut alike.
    `on_table_map(event, position)` sees every TABLE_MAP inside a transaction."""

    def __init__(self, piece_bytes: int = DEFAULT_PIECE_BYTES,
                 on_table_map: Optional[Callable[[TableMapEvent, BinlogPosition], None]] = None):
        self.piece_bytes = piece_bytes
        self.on_table_map = on_table_map
        self.open: Optional[_OpenTxn] = None

    @property
    def between_transactions(self) -> bool:
        return self.open is None

    def feed(self, stream: BinLogStreamReader, event) -> Optional[CutTxn]:
        """The transaction `event` ends, if it ends one; raises on events it cannot follow."""
        if isinstance(event, (MariadbGtidEvent, GtidEvent)):
            if self.open is not None:
                raise ErrBinlogUnsupportedEvent(
                    f"transaction {self.open.gtid} at {self.open.start} has no commit event before the next GTID"
                )
            gtid = event.gtid if isinstance(event, MariadbGtidEvent) else str(event.gtid).lower()
            self.open = _OpenTxn(gtid, event_start(stream, event),
                                 skip_replication=bool(event.packet.flags & _SKIP_REPLICATION_F))
            if isinstance(event, MariadbGtidEvent) and not event.flags & _FL_STANDALONE:
                self.open.in_begin = self.open.opened_by_gtid = True
        elif isinstance(event, XidEvent):
            if self.open is not None:
                return self._close(stream, event)
        elif isinstance(event, QueryEvent) and self.open is not None:
            kind = classify(event.query)
            if kind == "begin":
                self.open.in_begin = True
            elif kind in ("commit", "rollback") and self.open.in_begin:
                return self._close(stream, event)
            elif kind == "xa":
                raise ErrBinlogUnsupportedEvent(
                    f"XA transaction at {self.open.start} is not supported yet; avoid XA on replicated tables"
                )
            elif kind == "statement" and (not self.open.in_begin
                                          or self.open.opened_by_gtid and is_ddl(event.query)):
                # A DDL is a transaction of its own. In a group the GTID event opened, it is
                # CREATE TABLE ... SELECT's: the rows and the group's XID/COMMIT follow it, and
                # become the next transaction (a later commit-ts, after the DDL's barrier).
                schema = event.schema.decode("utf-8") if isinstance(event.schema, bytes) else (event.schema or "")
                opened = self.open
                cut = self._close(stream, event, event.query, schema, is_ddl(event.query))
                if opened.opened_by_gtid:
                    self.open = _OpenTxn(cut.gtid, cut.end, in_begin=True, opened_by_gtid=True,
                                         skip_replication=opened.skip_replication, continues_group=True)
                return cut
        elif isinstance(event, TableMapEvent):
            if self.open is not None:
                start = event_start(stream, event)
                self.open.see_table_map(event.table_id, start.pos)
                if self.on_table_map is not None:
                    self.on_table_map(event, start)
        elif isinstance(event, _ROWS_EVENTS):
            if self.open is not None:
                self.open.see_rows(event.table_id, event.flags, event_start(stream, event), self.piece_bytes)
        elif isinstance(event, XAPrepareEvent):
            raise ErrBinlogUnsupportedEvent(f"XA PREPARE at {event_start(stream, event)} is not supported yet; "
                                            "avoid XA on replicated tables")
        elif isinstance(event, NotImplementedEvent):
            raise unsupported_event(event, event_start(stream, event))
        return None

    def _close(self, stream: BinLogStreamReader, event, query: Optional[str] = None, schema: str = "",
               ddl: bool = False) -> CutTxn:
        txn, self.open = self.open, None
        assert txn is not None
        end = BinlogPosition(stream.log_file, event.packet.log_pos)
        return CutTxn(txn.gtid, txn.start, end, tuple(txn.pieces), event.timestamp, query, schema, ddl,
                      txn.foreign_key_checks, txn.skip_replication, txn.continues_group)


# How long the upstream may stay silent before it sends a heartbeat, which moves resolved-ts to the
# local clock. An idle changefeed's checkpoint lag is up to this plus the micro-batch trigger
# interval (1 s) plus an empty batch; at 1 s it reached 2.5-3.7 s on 2 busy cores
# (bench/latency_bench.py), above issue 11's 2 s. Four heartbeats a second cost nothing measurable.
DEFAULT_HEARTBEAT_SECONDS = 0.25
# A busy upstream's transactions reach the index (and the changefeeds) at most this long after the
# puller read them: every changefeed's latency waits for it. At 0.2 s it was ~0.1 s of a caught-up
# changefeed's 0.3 s median at 5,000 rows/s (bench/latency_bench.py); an index append of five
# transactions (WAL, synchronous=NORMAL) takes 2.7 ms, 1.6 ms of CPU: twenty a second, ~0.03 cores.
DEFAULT_FLUSH_SECONDS = 0.05
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

STARTING, RUNNING, RECONNECTING, SWITCHING, STALLED, FAILED, STOPPED = (
    "starting", "running", "reconnecting", "switching", "stalled", "failed", "stopped")


@dataclass(frozen=True)
class PullerHealth:
    """What the puller is doing, for the changefeed runner and `changefeed query`."""

    state: str  # starting | running | reconnecting | switching | stalled | failed | stopped
    upstream: str  # the masked upstream URI
    since: float  # wall-clock time the state began
    connects: int = 0  # successful (re)connections so far: a new one means the upstream came back
    error: Optional[SparkCDCError] = None  # why it is reconnecting, switching, stalled or failed
    server: str = ""  # host:port of the server it follows (one of the URI's)
    epoch: int = 0  # the index's source epoch: a new one means a failover moved the positions

    @property
    def problem(self) -> Optional[SparkCDCError]:
        """The error every changefeed of this capture shows, None while the puller is fine."""
        return self.error if self.state in (RECONNECTING, SWITCHING, STALLED, FAILED) else None

    def to_json(self) -> dict:
        return {"state": self.state, "upstream": self.upstream, "server": self.server, "epoch": self.epoch,
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
        flush_interval: float = DEFAULT_FLUSH_SECONDS,
        flush_max_txns: int = 5000,
        clock: Callable[[], float] = time.time,
        piece_bytes: int = DEFAULT_PIECE_BYTES,
        needed_from: Callable[[], Optional[int]] = lambda: None,
    ):
        """`needed_from`: the oldest commit-ts a changefeed still needs (its checkpoint; None when
        there is none): a failover re-maps the transactions after it onto the new server."""
        self.cfg = cfg
        self.index = index
        self.server_id = server_id
        self.heartbeat_seconds = heartbeat_seconds
        self.flush_interval = flush_interval
        self.flush_max_txns = flush_max_txns
        self.clock = clock
        self.piece_bytes = piece_bytes
        self.needed_from = needed_from
        self.error: Optional[SparkCDCError] = None  # set when it stopped for good (state failed)
        self._server = cfg.servers()[0]  # the server followed now (the primary among the URI's)
        # Indexed transactions no failover candidate has yet: (commit-ts, gtid, when indexed).
        self._unacknowledged: deque[tuple[int, str, float]] = deque()
        self._replicas: Optional[ReplicaWatch] = None
        self._epoch = 0  # the index's source epoch of the server followed now
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
        conn = self._server.connect()
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

    def tso(self, timeout: float = 10.0) -> int:
        """A TSO as PD's: every transaction the upstream committed before the call has a commit-ts
        at or below it, every later one above: the resolved-ts once the index holds the binlog up
        to its end at the call (the next transaction's commit-ts is above the resolved-ts). While
        the upstream is unreachable or the puller lags more than `timeout`: the resolved-ts alone
        (nothing after it is lost, but transactions just before the call may lie above it)."""
        try:
            self.wait_caught_up(timeout)
        except (SparkCDCError, TimeoutError, pymysql.err.MySQLError) as exc:
            log.warning("TSO: the binlog puller has not indexed the upstream's binlog end (%s); "
                        "answering its resolved-ts", exc)
            return self.index.resolved_ts()
        # Indexed transactions past resolved-ts (held until a failover candidate has them) are
        # before the call too.
        last = self.index.last_txn()
        return max(self.index.resolved_ts(), last.commit_ts if last is not None else 0)

    # ---- the loop ------------------------------------------------------------------------------

    def health(self) -> PullerHealth:
        """The puller's state; a running puller that read nothing for STALL_SECONDS is `stalled`,
        and one whose thread ended without saying why is `failed`."""
        with self._state_lock:
            health = self._health
        if health.state == RUNNING:
            silent = time.monotonic() - self._last_event
            if silent > STALL_SECONDS:
                return replace(health, state=STALLED, since=time.time() - silent, error=ErrPullerStalled(
                    f"the binlog puller has read nothing from upstream {health.upstream} for {silent:.0f}s (the "
                    f"upstream sends a heartbeat every {self.heartbeat_seconds}s); the server log may say why"))
        thread = self._thread
        if thread is not None and not thread.is_alive() and health.state not in (FAILED, STOPPED):
            return replace(health, state=FAILED, error=ErrPullerFailed(
                "the binlog puller thread ended without an error; resume the changefeeds to restart it"))
        return health

    def _set_state(self, state: str, error: Optional[SparkCDCError] = None, connected: bool = False,
                   source: Optional[Source] = None) -> None:
        with self._state_lock:
            previous = self._health
            since = previous.since if previous.state == state else time.time()
            self._health = replace(previous, state=state, since=since, connects=previous.connects + connected,
                                   error=error)
            if source is not None:
                self._health = replace(self._health, server=source.address, epoch=source.epoch)
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
            self.index.close()  # last: whatever it raises, the puller has said it stopped

    def _user_error(self, exc: BaseException) -> SparkCDCError:
        """The coded error a user sees for what stopped `_pull`."""
        position = self._flushed_position
        doing = f"the binlog puller reading from {position}" if position else "the binlog puller"
        if isinstance(exc, ErrBinlogUnsupportedEvent):  # in the binlog for good: the puller cannot pass it
            return ErrBinlogUnsupportedEvent(f"{doing}: {exc.message}. {PULLER_CANNOT_PASS_FIX}")
        error = upstream_error(self._server, exc, doing, position, PULLER_PURGED_FIX)
        if error is not None:
            return error
        return ErrPullerFailed(
            f"{doing} stopped on an unexpected error: {type(exc).__name__}: {exc}; the server log has its trace. "
            "Resume the changefeeds (`sparkcdc cli changefeed resume`) to restart it, and report it if it repeats")

    def _connected(self) -> None:
        """The stream delivered its first event (after a switch: the re-map is done): the upstream is there."""
        if self._health.state != RUNNING:
            down = time.time() - self._health.since
            if self._health.state in (RECONNECTING, SWITCHING):
                log.info("binlog puller reconnected to upstream %s (%s) after %.1fs", self.cfg.masked_uri(),
                         self._server.address, down)
            self._set_state(RUNNING, connected=True, source=self.index.current_source())

    def _bootstrap(self, ctl, flavor: Flavor, attempts: int = 20) -> None:
        """Snapshot the schema at a binlog position. Two equal reads around the position prove no
        DDL ran in between, so the snapshot is the schema at exactly that position."""
        before = read_catalog(ctl)
        for _ in range(attempts):
            start, gtids = binlog_end_and_gtids(ctl, flavor)
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
            after.databases, after.server_charset, parse_state(gtids, flavor.name) if gtids is not None else None,
        )

    def _know_source(self, ctl, server: UpstreamConfig, flavor: Flavor) -> Optional[Switch]:
        """Record the server this index follows (for an index made before sources and GTID states
        were kept, also its start GTID state, from the server that made it); a Switch when the
        index's transactions are another server's (a failover) or a switch was left half done."""
        server_id, server_uuid = server_identity(ctl)
        source = self.index.current_source()
        if source is None or source.same_server(server_id, server_uuid):
            # the first source, or the same server under the address it answers at now
            source = self.index.record_source(server.host, server.port, server_id, server_uuid, flavor.name,
                                              new_epoch=False)
            if self.index.start_gtid() is None and source.epoch == 0:
                start = self.index.start_position()
                gtids = binlog_gtid_pos(ctl, start) if start is not None and flavor.name == "mariadb" else None
                if gtids is not None:
                    self.index.set_start_gtid(parse_state(gtids, flavor.name))
            last = self.index.last_txn()
            if last is None or last.epoch == source.epoch:
                return None
            new_epoch = False  # the last switch to it stopped before it re-mapped everything
        else:
            new_epoch = True
            log.warning("the binlog puller's index follows %s (server_id %d) and upstream %s now answers as %s "
                        "(server_id %d): switching to it by GTID", source.address, source.server_id,
                        self.cfg.masked_uri(), server.address, server_id)
        self._set_state(SWITCHING, ErrUpstreamUnreachable(
            f"upstream failover: the binlog puller is switching from {source.address} to {server.address} of "
            f"upstream {self.cfg.masked_uri()} (re-mapping the transactions the changefeeds still need by GTID)"))
        return prepare_switch(self.index, server, ctl, flavor, self.needed_from(), new_epoch)

    def _pull(self) -> None:
        """Find the primary, check its settings, and follow its binlog from the index's end (after
        a failover: from the GTID state before what the changefeeds still need, re-mapped first)."""
        server = choose_primary(self.cfg)
        preflight(server)  # also after a restart: the upstream may come back with other settings
        self._server = server
        ctl = server.connect()
        try:
            flavor = detect_flavor(ctl)
            if self.index.is_empty():
                self._bootstrap(ctl, flavor)
            switch = self._know_source(ctl, server, flavor)
        finally:
            ctl.close()
        self._epoch = self.index.current_source().epoch
        last = self.index.last_txn()
        # Transactions past resolved-ts may be persisted (held for a failover candidate).
        self._last_ts = max(self.index.resolved_ts(), last.commit_ts if last is not None else 0)
        resolved = self.index.resolved_ts()
        self._unacknowledged = deque((t.commit_ts, t.gtid, time.monotonic())
                                     for t in self.index.txns_after(resolved) if t.gtid)
        if self._replicas is not None:
            self._replicas.close()
        self._replicas = ReplicaWatch(self.cfg, server) if self.cfg.others else None
        self.store = SchemaStore.from_index(self.index, self._last_ts)
        if switch is None:
            position = last.end if last else self.index.start_position()
            self._flushed_position = position
            self._stream = binlog_stream(server, self.server_id, self.heartbeat_seconds, position)
        else:
            self._stream = binlog_stream(server, self.server_id, self.heartbeat_seconds,
                                         gtid_state=switch.resume_state)
        try:
            self._loop(self._stream, switch)
        finally:
            self._stream.close()

    def _resolved(self) -> int:
        """The resolved-ts to persist: the last commit-ts (or heartbeat ts), held below the first
        transaction no failover candidate has yet (switchover.py), for REPLICA_WAIT_SECONDS at most."""
        if self._replicas is None or not self._unacknowledged:
            self._unacknowledged.clear()
            return self._last_ts
        states = self._replicas.states()
        if states is None:  # no candidate to wait for
            self._unacknowledged.clear()
            return self._last_ts
        now = time.monotonic()
        while self._unacknowledged:
            commit_ts, gtid, indexed = self._unacknowledged[0]
            if not any(state.contains(gtid) for state in states):
                if now - indexed < REPLICA_WAIT_SECONDS:
                    return commit_ts - 1
                log.warning("no failover candidate among upstream %s has transaction %s %.0fs after the primary "
                            "logged it: changefeeds go on without waiting (a failover now may find it missing)",
                            self.cfg.masked_uri(), gtid, now - indexed)
            self._unacknowledged.popleft()
        return self._last_ts

    def _loop(self, stream: BinLogStreamReader, switch: Optional[Switch] = None) -> None:
        """Index the stream's transactions; with `switch`, first re-map its pending transactions
        (every transaction the stream delivers until it is done must be one of them)."""
        pending_txns: list[TxnRecord] = []
        pending_ddls: list[DDLEvent] = []
        pending_versions: list[TableVersion] = []
        pending_databases: list[tuple[str, int, Optional[str]]] = []
        cutter = TxnCutter(self.piece_bytes)
        last_flush = time.monotonic()
        breaks_next = False  # the first transaction after a re-map may not continue its last range

        def flush() -> None:
            # Only called between transactions, so resolved-ts covers exactly the persisted txns.
            nonlocal pending_txns, pending_ddls, pending_versions, pending_databases, last_flush
            position = BinlogPosition(stream.log_file, stream.log_pos)
            self.index.append(pending_txns, pending_ddls, pending_versions, self._resolved(), pending_databases,
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
            if switch is not None and not switch.done:
                cut = cutter.feed(stream, event)
                if cut is not None:
                    switch.match(cut.gtid, cut.continues_group, cut.start, cut.end, cut.pieces)
                    if switch.done:
                        log.info("failover to %s: re-mapped %d transaction(s) onto its binlog", switch.server.address,
                                 switch.count)
                        breaks_next = switch.next_breaks()
                        with self._progress:
                            self._flushed_position = cut.end
                            self._progress.notify_all()
                elif isinstance(event, HeartbeatLogEvent) and cutter.between_transactions:
                    raise switch.ended_early(BinlogPosition(stream.log_file, stream.log_pos))
                continue
            self._connected()
            cut = cutter.feed(stream, event)
            if cut is not None:
                record = self._close(cut, breaks_next)
                breaks_next = False
                pending_txns.append(record)
                if cut.is_ddl:
                    outcome = self.store.apply(cut.query, cut.schema, record.commit_ts, str(open_position(record)))
                    record_outcome(outcome, record.commit_ts, pending_ddls, pending_versions, pending_databases)

            if not cutter.between_transactions:
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

        if cutter.between_transactions and pending_txns:
            self.index.append(pending_txns, pending_ddls, pending_versions, self._resolved(), pending_databases)

    def _close(self, cut: CutTxn, breaks: bool = False) -> TxnRecord:
        commit_ts = tso.next_after(self._last_ts, cut.timestamp)
        self._last_ts = commit_ts
        if self._replicas is not None and cut.gtid:
            self._unacknowledged.append((commit_ts, cut.gtid, time.monotonic()))
        return TxnRecord(commit_ts, cut.gtid, cut.start, cut.end, cut.end.pos - cut.start.pos, cut.is_ddl, cut.pieces,
                         cut.foreign_key_checks, cut.skip_replication, cut.continues_group,
                         epoch=self._epoch, breaks=breaks)


def open_position(record: TxnRecord) -> BinlogPosition:
    """Where a DDL's transaction begins in the binlog (reported with DDLs the store cannot follow)."""
    return record.start


def record_outcome(outcome: DDLOutcome, commit_ts: int, ddls: list, versions: list, databases: list) -> None:
    """Queue a DDL's event and the table and database versions it created."""
    ddls.append(outcome.event)
    for (schema, table), definition in outcome.tables.items():
        info = definition.info(commit_ts) if definition is not None else None
        versions.append(
            TableVersion(schema, table, commit_ts, info, definition.to_json() if definition is not None else None)
        )
    for name, charset in outcome.databases.items():
        databases.append((name, commit_ts, charset))
