"""Following the upstream across a failover: which server is the primary, how far its replicas
have the binlog, and the switch of the transaction index onto a new server (issue 23).

An upstream URI may name the servers of one replication topology (`mysql://u@h1,h2/`). The
puller follows the first that is writable and not a replica (`choose_primary`); a URI of one
server is followed whatever its role. A GTID is a transaction's identity on every server; its
FILE:POS is the server's own (txn_index.py). When the puller meets a server other than the one
its index follows (a promoted replica, or another `--upstream-uri` after a restart), it switches
(`Switch`): it checks that the new server can continue the old one's history, moves the
positions of the transactions changefeeds still need onto the new server's binlog (a re-map: one
GTID dump from the GTID state before them, the puller's own transaction cutter, each transaction
matched by GTID) and goes on indexing after them on the same dump, with commit-ts continuing.

Refused, each a coded error that stops the puller (and so every changefeed of the capture)
rather than lose or invent data (docs/failover.md):
- the new server does not log what it replicates (log_slave_updates=OFF) or has no GTIDs
  (MySQL gtid_mode=OFF), or the index holds transactions without GTIDs: ErrUpstreamFailoverConfig;
- its binlog no longer reaches back to the transactions to re-map: ErrBinlogPurged;
- it lacks a transaction the old primary had and changefeeds may have replicated (at or below
  resolved-ts), or holds one the old primary never had where the old primary's history should
  be (before the last transaction to re-map): ErrUpstreamDiverged.
Transactions past resolved-ts that the new server lacks were never read by a changefeed (a
failover loses them on the upstream too): the index forgets them.

So that a failover rarely meets the last case, the puller holds resolved-ts back until a
failover candidate has each transaction in its binlog (`ReplicaWatch`, as semi-synchronous
replication holds a commit): the other servers of the URI that replicate with
log_slave_updates=ON. A candidate that does not receive a transaction within
REPLICA_WAIT_SECONDS is waited for no longer (a warning says so).

Crash semantics: a re-map writes each transaction's new positions and epoch together (chunks of
REMAP_CHUNK), so a planner sees a transaction on the old server or on the new one, never a mix;
a puller that stops mid-way switches again on its next connection (re-mapping is idempotent).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import pymysql

from sparkcdc.errors import ErrUpstreamDiverged, ErrUpstreamFailoverConfig, ErrUpstreamUnreachable, SparkCDCError
from sparkcdc.model.gtid import GtidState, MariaDBBinlogState, parse_state
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.connection import (Flavor, UpstreamConfig, binlog_purged_error, detect_flavor, oldest_binlog,
                                          server_identity)
from sparkcdc.upstream.txn_index import Remapped, Source, TxnIndex, TxnRecord

log = logging.getLogger(__name__)

# How long a server of the topology may take to answer whether it is the primary.
PROBE_TIMEOUT_SECONDS = 5
# A failover candidate that has not received a transaction this long after the puller indexed it
# is waited for no longer: resolved-ts goes on without it (a warning says so).
REPLICA_WAIT_SECONDS = 30.0
# How often the candidates' binlog positions are read, and their roles checked again.
REPLICA_POLL_SECONDS = 0.05
REPLICA_ROLE_SECONDS = 5.0
# Re-mapped positions are written this many transactions at a time.
REMAP_CHUNK = 2000

CONFIG_FIX = ("Promote a replica that replicated with log_slave_updates=ON (MySQL: log_replica_updates=ON, "
              "gtid_mode=ON), so that its binlog holds the old primary's transactions under their GTIDs; or recreate "
              "the changefeeds from a snapshot of the new primary (`[snapshot] mode = \"initial\"`)")
PURGED_FIX = ("The changefeeds need those transactions from the new primary's binlog: recreate them from a snapshot of "
              "the new primary (`[snapshot] mode = \"initial\"`), or keep binlogs longer on the replicas")
MISSING_FIX = ("They are not on the new primary: it was promoted before it had received them (use semi-synchronous "
               "replication, and promote the most advanced replica). Apply them to the new primary (e.g. "
               "mariadb-binlog of the old primary's binlog from those GTIDs) and resume the changefeeds, or recreate "
               "them from a snapshot of the new primary (`[snapshot] mode = \"initial\"`)")
ERRANT_FIX = ("Its data differs from what the changefeeds replicated. Look at it (mariadb-binlog --start-position on "
              "the new primary); to go on, recreate the changefeeds from a snapshot of the new primary "
              "(`[snapshot] mode = \"initial\"`), or apply the transaction downstream yourself and start this server "
              "with a new index (stop it, move txn-index.sqlite out of its data dir, start it) and resume the "
              "changefeeds with --overwrite-checkpoint-ts at the new primary's GTID position")


# ---- roles ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One server's role as the puller sees it."""

    server: UpstreamConfig
    error: Optional[str] = None  # unreachable, or could not say
    writable: bool = False
    replicating: bool = False  # one of its replication connections runs (IO or SQL thread)
    logs_replica_updates: bool = False
    flavor: Optional[Flavor] = None

    def describe(self) -> str:
        if self.error is not None:
            return f"{self.server.address}: {self.error}"
        role = "a replica" if self.replicating else "not replicating"
        return f"{self.server.address}: {role}, {'writable' if self.writable else 'read_only'}"


def probe(server: UpstreamConfig) -> Probe:
    try:
        conn = server.connect(connect_timeout=PROBE_TIMEOUT_SECONDS, read_timeout=PROBE_TIMEOUT_SECONDS)
    except SparkCDCError as exc:
        cause = exc.__cause__
        return Probe(server, error=f"unreachable ({cause.args[-1] if cause is not None and cause.args else exc})")
    try:
        flavor = detect_flavor(conn)
        with conn.cursor() as cur:
            cur.execute(f"SELECT @@read_only, @@{flavor.log_replica_updates}")
            read_only, log_updates = cur.fetchone()
        return Probe(server, writable=not int(read_only), replicating=_replicating(conn, flavor),
                     logs_replica_updates=bool(int(log_updates)), flavor=flavor)
    except pymysql.err.MySQLError as exc:
        return Probe(server, error=f"cannot tell its role ({exc.args[-1] if exc.args else exc})")
    finally:
        conn.close()


def _replicating(conn, flavor: Flavor) -> bool:
    for statement in flavor.replica_status_statements:
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(statement)
                rows = cur.fetchall()
        except pymysql.err.MySQLError:
            continue
        return any(str(row.get(key, "")).lower() in ("yes", "connecting")
                   for row in rows for key in ("Slave_IO_Running", "Slave_SQL_Running", "Replica_IO_Running",
                                               "Replica_SQL_Running"))
    return False


def choose_primary(cfg: UpstreamConfig) -> UpstreamConfig:
    """The server to follow: with one server in the URI, that one; with several, the first that is
    writable and not a replica (ErrUpstreamUnreachable, retried by the puller, while none is)."""
    if not cfg.others:
        return cfg
    probes = [probe(server) for server in cfg.servers()]
    for found in probes:
        if found.error is None and found.writable and not found.replicating:
            return found.server
    raise ErrUpstreamUnreachable(
        f"no server of upstream {cfg.masked_uri()} is a primary (writable and not a replica): "
        + "; ".join(p.describe() for p in probes)
        + ". The puller looks again every few seconds: promote a replica (STOP SLAVE; RESET SLAVE ALL; "
        "SET GLOBAL read_only=0) or bring the primary back")


def read_binlog_state(conn, flavor: Flavor) -> "MariaDBBinlogState | GtidState":
    """Every GTID in the server's binlog, for membership: MariaDB's @@gtid_binlog_state (the last
    per domain and server), MySQL's @@gtid_executed."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT @@{flavor.gtid_state_variable}")
        text = str(cur.fetchone()[0] or "").replace("\n", "")
    return MariaDBBinlogState(text) if flavor.name == "mariadb" else parse_state(text, flavor.name)


def source_server(index: TxnIndex, epoch: int, upstream: UpstreamConfig) -> UpstreamConfig:
    """The server whose binlog holds the transactions of `epoch`, with the upstream URI's
    credentials (the URI's first server for an index that has recorded none)."""
    source = index.source(epoch)
    return upstream.at(source.host, source.port) if source is not None else upstream.servers()[0]


def followed_server(index: TxnIndex, upstream: UpstreamConfig) -> tuple[UpstreamConfig, int]:
    """The server the index follows now and its epoch: where a read whose binlog position must
    map into the index (a snapshot chunk's) has to run, and the epoch to map that position in."""
    epoch = index.current_epoch()
    return source_server(index, epoch, upstream), epoch


# ---- the candidates' reach ----------------------------------------------------------------------


@dataclass
class _Candidate:
    server: UpstreamConfig
    conn: object = None
    flavor: Optional[Flavor] = None
    state: Optional[GtidState] = None
    checked: float = float("-inf")  # when its role was last checked (monotonic)
    usable: bool = False


class ReplicaWatch:
    """How far the failover candidates among the URI's other servers have the primary's binlog:
    a transaction is safe once one of them has its GTID in its own binlog."""

    def __init__(self, cfg: UpstreamConfig, primary: UpstreamConfig,
                 clock: Callable[[], float] = time.monotonic):
        self._candidates = [_Candidate(server) for server in cfg.servers() if server.address != primary.address]
        self._clock = clock
        self._polled = float("-inf")
        self._warned: set[str] = set()

    def close(self) -> None:
        for candidate in self._candidates:
            _close(candidate)

    def states(self) -> Optional[list[GtidState]]:
        """The binlog reach of each usable candidate, read at most every REPLICA_POLL_SECONDS;
        None when there is no usable candidate (nothing to wait for)."""
        now = self._clock()
        if now - self._polled >= REPLICA_POLL_SECONDS:
            self._polled = now
            for candidate in self._candidates:
                self._poll(candidate, now)
        states = [c.state for c in self._candidates if c.usable and c.state is not None]
        return states or None

    def _poll(self, candidate: _Candidate, now: float) -> None:
        try:
            if candidate.conn is None:
                if now - candidate.checked < REPLICA_ROLE_SECONDS:
                    return  # unreachable a moment ago: not every poll
                candidate.checked = now
                candidate.conn = candidate.server.connect(connect_timeout=PROBE_TIMEOUT_SECONDS,
                                                          read_timeout=PROBE_TIMEOUT_SECONDS)
                candidate.flavor = detect_flavor(candidate.conn)
                candidate.checked = float("-inf")
            assert candidate.flavor is not None
            if now - candidate.checked >= REPLICA_ROLE_SECONDS:
                candidate.checked = now
                with candidate.conn.cursor() as cur:
                    cur.execute(f"SELECT @@{candidate.flavor.log_replica_updates}")
                    logs = bool(int(cur.fetchone()[0]))
                candidate.usable = logs and _replicating(candidate.conn, candidate.flavor)
                if not logs and candidate.server.address not in self._warned:
                    self._warned.add(candidate.server.address)
                    log.warning("replica %s has %s=OFF: its binlog lacks the primary's transactions, so sparkcdc "
                                "cannot follow a failover to it and does not wait for it",
                                candidate.server.address, candidate.flavor.log_replica_updates)
            if candidate.usable:
                candidate.state = read_gtid_state_position(candidate.conn, candidate.flavor)
        except (SparkCDCError, pymysql.err.MySQLError, OSError):
            candidate.usable = False
            _close(candidate)


def read_gtid_state_position(conn, flavor: Flavor) -> GtidState:
    """What the server's binlog has: MariaDB's @@gtid_binlog_pos, MySQL's @@gtid_executed."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos" if flavor.name == "mariadb" else "SELECT @@gtid_executed")
        text = cur.fetchone()[0]
    return parse_state(str(text or "").replace("\n", ""), flavor.name)


def _close(candidate: _Candidate) -> None:
    if candidate.conn is not None:
        try:
            candidate.conn.close()
        except Exception:  # noqa: BLE001 - already gone
            pass
        candidate.conn = None


# ---- the switch ---------------------------------------------------------------------------------


@dataclass
class Switch:
    """The re-map of the index onto a new server: `resume_state` is where its GTID dump starts,
    `pending` the transactions whose positions move (the puller feeds it every transaction it cuts
    until `done`)."""

    index: TxnIndex
    server: UpstreamConfig
    source: Source
    resume_state: GtidState
    pending: dict[tuple[str, bool], TxnRecord]
    previous_in_order: dict[int, Optional[int]]  # commit-ts -> the commit-ts before it (among the pending)
    last_matched: Optional[int] = None  # commit-ts of the last transaction matched, in the new binlog's order
    newest_matched: Optional[int] = None
    moved: list[Remapped] = field(default_factory=list)
    count: int = 0

    @property
    def done(self) -> bool:
        return not self.pending

    def match(self, gtid: Optional[str], continues_group: bool, start: BinlogPosition, end: BinlogPosition,
              pieces) -> None:
        """A transaction of the new server's binlog, before `done`: one of `pending`, else errant."""
        txn = self.pending.pop((gtid or "", continues_group), None)
        if txn is None:
            waiting = min(self.pending.values(), key=lambda t: t.commit_ts)
            raise ErrUpstreamDiverged(
                f"failover to {self.server.address}: its binlog has transaction {gtid} at {start}, which the old "
                f"primary never had, before the old primary's transaction {waiting.gtid} (commit-ts "
                f"{waiting.commit_ts}): the new primary's history diverged (an errant transaction). {ERRANT_FIX}")
        breaks = self.last_matched is None or self.previous_in_order[txn.commit_ts] != self.last_matched
        self.moved.append(Remapped(txn.commit_ts, start, end, tuple(pieces), breaks))
        self.last_matched = txn.commit_ts
        self.newest_matched = max(self.newest_matched or 0, txn.commit_ts)
        self.count += 1
        if len(self.moved) >= REMAP_CHUNK or self.done:
            self.index.remap(self.source.epoch, self.moved)
            self.moved = []

    def next_breaks(self) -> bool:
        """Whether the first transaction after the re-map must start a range of its own: the last
        one matched in the new binlog's order is not the newest by commit-ts."""
        return self.last_matched != self.newest_matched

    def ended_early(self, at: BinlogPosition) -> ErrUpstreamDiverged:
        """The new server's binlog ends (the dump is idle) with transactions still to re-map."""
        missing = sorted(self.pending.values(), key=lambda t: t.commit_ts)
        return ErrUpstreamDiverged(
            f"failover to {self.server.address}: its binlog ends at {at} without the old primary's transactions "
            f"{', '.join(t.gtid or '?' for t in missing[:5])}{' ...' if len(missing) > 5 else ''}, which changefeeds may "
            f"have replicated (a missing transaction). {MISSING_FIX}")


def prepare_switch(index: TxnIndex, server: UpstreamConfig, ctl, flavor: Flavor, needed_from: Optional[int],
                   new_epoch: bool) -> Switch:
    """Check that `server` can continue the index's history and plan the re-map of every
    transaction after `needed_from` (the oldest changefeed checkpoint; None: only the last
    transaction); forgets the unresolved transactions the server lacks; records the server as
    the index's source (a new epoch with `new_epoch`)."""
    doing = f"failover to {server.address}"
    with ctl.cursor() as cur:
        cur.execute(f"SELECT @@{flavor.log_replica_updates}")
        logs_updates = bool(int(cur.fetchone()[0]))
        gtid_mode = "ON"
        if flavor.name == "mysql":
            cur.execute("SELECT @@gtid_mode")
            gtid_mode = str(cur.fetchone()[0]).upper()
    if not logs_updates:
        raise ErrUpstreamFailoverConfig(
            f"{doing}: it has {flavor.log_replica_updates}=OFF, so its binlog does not hold the transactions it "
            f"replicated from the old primary, and the changefeeds cannot continue there. {CONFIG_FIX}")
    if gtid_mode != "ON":
        raise ErrUpstreamFailoverConfig(f"{doing}: its gtid_mode is {gtid_mode}, not ON: transactions cannot be found "
                                        f"on it by GTID. {CONFIG_FIX}")
    has = read_binlog_state(ctl, flavor)
    remap_from, pending = _to_remap(index, needed_from)
    resolved = index.resolved_ts()
    unresolved = index.txns_after(resolved)
    lacks = [txn for txn in {t.commit_ts: t for t in pending + unresolved}.values()
             if txn.gtid is not None and not has.contains(txn.gtid)]
    replicated = [txn for txn in lacks if txn.commit_ts <= resolved]
    if replicated:
        raise ErrUpstreamDiverged(
            f"{doing}: it lacks transactions the old primary had and changefeeds may have replicated: "
            f"{', '.join(t.gtid or '?' for t in replicated[:5])}{' ...' if len(replicated) > 5 else ''} (it has "
            f"{has or 'no GTID'}); a missing transaction. {MISSING_FIX}")
    if lacks:
        log.warning("%s: it lacks %d transaction(s) the old primary had after resolved-ts %d (%s): no changefeed read "
                    "them, and the index forgets them", doing, len(lacks), resolved,
                    ", ".join(t.gtid or "?" for t in lacks[:5]))
        index.drop_unresolved([t.commit_ts for t in lacks])
        remap_from, pending = _to_remap(index, needed_from)
    resume_state = index.gtid_state_at(remap_from)
    if resume_state is None:
        raise ErrUpstreamFailoverConfig(
            f"{doing}: this server's index does not know the GTID state at commit-ts {remap_from} (an index made "
            "before sparkcdc kept GTID states, whose start file is gone), so it cannot find its place on another "
            f"server. Recreate the changefeeds from a snapshot (`[snapshot] mode = \"initial\"`), or start this "
            "server with a new index (stop it, move txn-index.sqlite out of its data dir, start it)")
    _check_retained(server, ctl, flavor, resume_state, doing)
    server_id, server_uuid = server_identity(ctl)
    source = index.record_source(server.host, server.port, server_id, server_uuid, flavor.name, new_epoch)
    ordered = sorted(pending, key=lambda t: t.commit_ts)
    previous = {t.commit_ts: (ordered[i - 1].commit_ts if i else None) for i, t in enumerate(ordered)}
    log.info("%s: re-mapping %d transaction(s) from GTID state %s onto its binlog (epoch %d)", doing, len(pending),
             resume_state, source.epoch)
    return Switch(index, server, source, resume_state, {(t.gtid or "", t.continues_group): t for t in pending},
                  previous)


def _to_remap(index: TxnIndex, needed_from: Optional[int]) -> tuple[int, list[TxnRecord]]:
    """(the commit-ts after which positions move, the transactions after it): at least the last
    one, and everything after the oldest checkpoint `needed_from`."""
    last = index.last_txn()
    remap_from = index.first_ts() if last is None else last.commit_ts - 1
    if needed_from is not None and last is not None:
        remap_from = max(min(remap_from, needed_from), index.first_ts())
    pending = index.txns_after(remap_from)
    if any(txn.gtid is None for txn in pending):
        raise ErrUpstreamFailoverConfig(
            "the index holds transactions without a GTID (the old primary had gtid_mode=OFF), which cannot be found "
            f"on another server. {CONFIG_FIX}")
    return remap_from, pending


def _check_retained(server: UpstreamConfig, ctl, flavor: Flavor, state: GtidState, doing: str) -> None:
    first_file, gtids, _ = oldest_binlog(ctl)
    oldest = parse_state(gtids, flavor.name)
    purged = oldest.past(state)
    if purged:
        raise binlog_purged_error(server, None, doing, f"its oldest binlog {first_file} begins after GTIDs {oldest}, "
                                  f"past {', '.join(purged)} (the changefeeds need it from GTID state {state})",
                                  PURGED_FIX)
