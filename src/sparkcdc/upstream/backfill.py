"""Back-filling the transaction index from a binlog position still on the upstream (issue 19).

The puller indexes the binlog from the server's first start. A changefeed may start earlier: at
the GTID or FILE:POS of a `mariadb-dump --single-transaction --master-data=2 --gtid` or a
mariabackup of its downstream, or at a TSO, as long as the upstream still has the binlog from
there. `resolve_start` then raises StartBeforeIndex, and the capture runs `Backfill`: it walks
the binlog from that point to the index's start (one replication connection, the puller's
transaction cutter, so transactions and large-transaction pieces are cut as the puller cuts
them), gives each transaction a commit-ts from its event time below the index's first one, and
writes them, their DDLs and the schema versions before the index's start, all at once.

The schema at the start point comes from two sources (docs/architecture.md "Back-filled
positions"):
- a table no DDL between the start point and the index's start names: the index's own first
  version (read from information_schema when the index was made), exact;
- a table such a DDL names (alters, renames, drops, creates, or whose database it drops): its
  first TABLE_MAP event in the walk before that DDL (binlog_row_metadata=FULL; what it lacks is
  listed in upstream/table_map.py: unique keys, defaults, comments, JSON-ness), then every DDL
  applied to it by the schema store as the puller does. A table such a DDL names with no row
  before that DDL has no version before it: its DDL fails the changefeeds that reach it (the
  schema store cannot follow it), unless the DDL creates the table.
Not possible, each a coded error: a start whose binlog is purged (ErrBinlogPurged, naming the
oldest position left and the fix, a snapshot), a start before the index after a failover (the
index's oldest transactions are another server's), and a start before the index once schema
versions of a table with a DDL since the index's start were garbage-collected.

Crash semantics: the walk keeps what it found in memory (~0.3 KB per transaction) and writes it
in one SQLite transaction (TxnIndex.backfill); a failure or crash before that leaves the index
as it was, and the next start retries. The schema GC does not go below a back-fill's start for
BACKFILL_PIN_SECONDS, so the changefeed that asked for it can be created meanwhile.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import TableMapEvent

from sparkcdc.errors import ErrStartTsInvalid, SparkCDCError
from sparkcdc.model import tso
from sparkcdc.model.gtid import GtidState, MySQLGtidSet, parse_state
from sparkcdc.model.position import BinlogPosition
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.catalog import Catalog, TableDef
from sparkcdc.schema.parser import DDLParseError, guess_target, parse
from sparkcdc.schema.store import SchemaStore
from sparkcdc.upstream.connection import (UpstreamConfig, binlog_gtid_pos, binlog_purged_error, check_binlog_retained,
                                          detect_flavor, oldest_binlog, upstream_error)
from sparkcdc.upstream.puller import CutTxn, TxnCutter, binlog_stream, event_start, open_position, record_outcome
from sparkcdc.upstream.range_reader import binlog_changed
from sparkcdc.upstream.table_map import table_def_from_table_map
from sparkcdc.upstream.txn_index import DEFAULT_PIECE_BYTES, StartBeforeIndex, TableVersion, TxnIndex, TxnRecord

log = logging.getLogger(__name__)

# What to do when the binlog from a start point is gone: copy the tables instead.
SNAPSHOT_FIX = ("Start from a copy of the tables instead: a changefeed with `[snapshot] mode = \"initial\"` copies "
                "them and then follows the binlog, or load a fresh dump downstream (mariadb-dump --single-transaction "
                "--master-data=2 --gtid) and start at its position.")
# Heartbeats of the walk's dump: how soon it notices that it reached the end of the binlog.
_WALK_HEARTBEAT_SECONDS = 1.0
# Back-filled commit-ts stay this far below the index's first one (2^18 transactions per ms fit
# in it), whatever the upstream's clock says about the events' time.
_BELOW_FIRST_MS = 1000


@dataclass(frozen=True)
class _FirstMap:
    position: BinlogPosition
    definition: TableDef


class Backfill:
    """One back-fill of `index` from `start` on the upstream `upstream` (the URI's config: the
    walk reads the server the index's start was read from)."""

    def __init__(self, upstream: UpstreamConfig, index: TxnIndex, server_id: int,
                 piece_bytes: int = DEFAULT_PIECE_BYTES, clock: Callable[[], float] = time.time):
        self.upstream = upstream
        self.index = index
        self.server_id = server_id
        self.piece_bytes = piece_bytes
        self.clock = clock
        self._first_maps: dict[tuple[str, str], _FirstMap] = {}

    def run(self, start: StartBeforeIndex) -> int:
        """Back-fill from `start`; returns how many transactions were added."""
        source = self.index.current_source()
        if source is not None and source.epoch != 0:
            raise ErrStartTsInvalid(
                f"{start.message}; this server's index was made on {self.index.source(0).address}, which is no "
                f"longer its upstream ({source.address} since a failover), so it cannot be extended back. Start at "
                "or after the index's start, or give this server a new index: stop it, move txn-index.sqlite out of "
                "its data dir and start it again")
        server = self.upstream.at(source.host, source.port) if source is not None else self.upstream
        stop = self.index.start_position()
        first_ts = self.index.first_ts()
        self._check_schema_kept(start, first_ts)
        doing = f"starting at {start.message.split(';')[0]}"
        conn = server.connect()
        try:
            flavor = detect_flavor(conn).name
            walk_from, gtid_state = self._walk_start(server, conn, start, flavor, doing)
        finally:
            conn.close()
        cuts = self._walk(server, walk_from, gtid_state, stop, doing)
        if not cuts:
            raise ErrStartTsInvalid(f"{start.message}, but no transaction lies between it and the index's start {stop}")
        records = self._commit_ts(cuts, first_ts)
        new_first = records[0].commit_ts - 1
        start_position = walk_from if isinstance(walk_from, BinlogPosition) else cuts[0].start
        if gtid_state is None:
            gtid_state = self._gtid_state_before(server, start_position, records)
        ddls, versions, databases = self._schema(cuts, records, new_first, first_ts)
        self.index.backfill(records, ddls, versions, databases, new_first, start_position, gtid_state,
                            expected_first_ts=first_ts, now=self.clock())
        log.info("back-filled the transaction index with %d transactions from %s (commit-ts %d..%d) for a start "
                 "before the server's first start", len(records), start_position, records[0].commit_ts,
                 records[-1].commit_ts)
        return len(records)

    # ---- where to start -------------------------------------------------------------------------

    def _check_schema_kept(self, start: StartBeforeIndex, first_ts: int) -> None:
        gc_ts = self.index.schema_gc_ts()
        if gc_ts > first_ts and self.index.ddls_between(first_ts, gc_ts):
            raise ErrStartTsInvalid(
                f"{start.message}; the schema versions of the tables a DDL changed since the index's start were "
                f"garbage-collected up to ts {gc_ts} (the oldest changefeed checkpoint), so the schema before the "
                "index cannot be rebuilt. Start at or after the index's start, or take a snapshot "
                "(`[snapshot] mode = \"initial\"`)")

    def _walk_start(self, server: UpstreamConfig, conn, start: StartBeforeIndex, flavor: str, doing: str
                    ) -> tuple["BinlogPosition | GtidState", Optional[GtidState]]:
        """(a FILE:POS or a GTID state to dump from, the GTID state there when known); raises
        ErrBinlogPurged when the upstream no longer has the binlog from there."""
        if start.position is not None:
            check_binlog_retained(server, start.position, doing, SNAPSHOT_FIX)
            at = binlog_gtid_pos(conn, start.position)
            return start.position, parse_state(at, flavor) if at is not None else None
        if start.gtid_state is not None:
            first_file, gtids, _ = oldest_binlog(conn)
            oldest = parse_state(gtids, flavor)
            purged = oldest.past(start.gtid_state)
            if purged:
                raise binlog_purged_error(server, None, doing, f"its oldest binlog {first_file} begins after GTIDs "
                                          f"{oldest}, past {', '.join(purged)}", SNAPSHOT_FIX)
            return start.gtid_state, start.gtid_state
        assert start.ts is not None
        position = self._file_before(server, conn, start.ts, doing)
        at = binlog_gtid_pos(conn, position)
        return position, parse_state(at, flavor) if at is not None else None

    def _file_before(self, server: UpstreamConfig, conn, ts: int, doing: str) -> BinlogPosition:
        """The start of the newest binlog file whose first transaction is at or before the TSO,
        or of the oldest one when it is the binlog's very beginning (no GTID before it)."""
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [row[0] for row in cur.fetchall()]
        wanted_seconds = tso.physical_ms(ts) // 1000
        # A TSO before the oldest file's first transaction needs no look at the others (each look
        # is a replication connection).
        oldest_first = self._first_event_time(server, BinlogPosition(files[0], 4)) if files else None
        if oldest_first is None or oldest_first <= wanted_seconds:
            for name in reversed(files[1:]):
                first = self._first_event_time(server, BinlogPosition(name, 4))
                if first is not None and first <= wanted_seconds:
                    return BinlogPosition(name, 4)
            if oldest_first is not None:
                return BinlogPosition(files[0], 4)
        if files and not oldest_binlog(conn)[1]:
            return BinlogPosition(files[0], 4)
        raise binlog_purged_error(server, None, doing, f"its oldest binlog {files[0] if files else '?'} begins after "
                                  f"{tso.format_time(ts)}", SNAPSHOT_FIX)

    def _first_event_time(self, server: UpstreamConfig, position: BinlogPosition) -> Optional[int]:
        stream = binlog_stream(server, self.server_id, _WALK_HEARTBEAT_SECONDS, position)
        try:
            while True:
                event = stream.fetchone()
                if event is None or isinstance(event, HeartbeatLogEvent):
                    return None
                if isinstance(event, (MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent)):
                    return event.timestamp
        finally:
            stream.close()

    # ---- the walk ------------------------------------------------------------------------------

    def _walk(self, server: UpstreamConfig, walk_from, gtid_state: Optional[GtidState], stop: BinlogPosition,
              doing: str) -> list[CutTxn]:
        """Every transaction from the start point up to `stop` (the index's start)."""
        if isinstance(walk_from, BinlogPosition):
            stream = binlog_stream(server, self.server_id, _WALK_HEARTBEAT_SECONDS, position=walk_from)
        else:
            stream = binlog_stream(server, self.server_id, _WALK_HEARTBEAT_SECONDS, gtid_state=walk_from)
        cutter = TxnCutter(self.piece_bytes, on_table_map=self._see_table_map)
        cuts: list[CutTxn] = []
        try:
            while True:
                event = stream.fetchone()
                if event is None:
                    raise binlog_changed(f"the binlog dump for a back-fill ended at {stream.log_file}:{stream.log_pos}"
                                         f" before the index's start {stop}")
                if cutter.between_transactions:
                    if isinstance(event, (MariadbGtidEvent, GtidEvent)) and event_start(stream, event).key() >= stop.key():
                        return cuts
                    if isinstance(event, HeartbeatLogEvent):
                        at = BinlogPosition(stream.log_file, stream.log_pos)
                        if at.key() >= stop.key():
                            return cuts
                        raise binlog_changed(f"the binlog ends at {at}, before the index's start {stop}")
                cut = cutter.feed(stream, event)
                if cut is not None:
                    if cut.end.key() > stop.key():
                        raise binlog_changed(f"transaction {cut.gtid} at {cut.start}..{cut.end} crosses the index's "
                                             f"start {stop}")
                    cuts.append(cut)
        except SparkCDCError:
            raise
        except Exception as exc:
            error = upstream_error(server, exc, f"{doing}: back-filling the index", stop, SNAPSHOT_FIX)
            if error is None:
                raise
            raise error from exc
        finally:
            stream.close()

    def _see_table_map(self, event: TableMapEvent, position: BinlogPosition) -> None:
        key = (event.schema, event.table)
        if key not in self._first_maps:
            try:
                self._first_maps[key] = _FirstMap(position, table_def_from_table_map(event))
            except ValueError as exc:
                log.warning("back-fill: TABLE_MAP of %s.%s at %s: %s", *key, position, exc)

    # ---- commit-ts and schema -----------------------------------------------------------------

    @staticmethod
    def _commit_ts(cuts: list[CutTxn], first_ts: int) -> list[TxnRecord]:
        """Commit-ts from each transaction's event time, strictly increasing with a free commit-ts
        after each (as the puller's), and below first_ts."""
        ceiling_seconds = max(0, tso.physical_ms(first_ts) - _BELOW_FIRST_MS) // 1000
        records, previous = [], 0
        for cut in cuts:
            # As the puller's (tso.next_after): a free commit-ts after each transaction.
            previous = tso.next_after(previous, min(cut.timestamp, ceiling_seconds))
            records.append(TxnRecord(previous, cut.gtid, cut.start, cut.end, cut.end.pos - cut.start.pos, cut.is_ddl,
                                     cut.pieces))
        if previous + 1 >= first_ts:
            raise ErrStartTsInvalid(f"{len(cuts)} transactions do not fit below the index's first commit-ts {first_ts}")
        return records

    def _gtid_state_before(self, server: UpstreamConfig, position: BinlogPosition,
                           records: list[TxnRecord]) -> Optional[GtidState]:
        """The GTID state at the start position when the server cannot say (MySQL): the index's
        start state without the back-filled transactions."""
        state = self.index.start_gtid()
        if not isinstance(state, MySQLGtidSet):
            return None
        for record in records:
            if record.gtid:
                state.discard(record.gtid)
        return state

    def _schema(self, cuts: list[CutTxn], records: list[TxnRecord], new_first: int, first_ts: int):
        """(DDL events, table versions, database versions) of the back-filled stretch: the seed
        catalog at `new_first` and what each DDL made of it."""
        ddl_cuts = [(cut, record) for cut, record in zip(cuts, records) if cut.is_ddl]
        first_ddl: dict[tuple[str, str], BinlogPosition] = {}
        created_databases: set[str] = set()
        for cut, _ in ddl_cuts:
            tables, databases, creates_database = _named_by(cut.query or "", cut.schema)
            for key in tables:
                first_ddl.setdefault(key, cut.start)
            for database in databases:
                first_ddl.setdefault((database, "*"), cut.start)
            if creates_database:
                created_databases.add(creates_database)
        server_charset, databases, tables = self.index.schema_at(first_ts)
        catalog = Catalog(server_charset or "utf8mb4", dict(databases), {})

        def changed(key: tuple[str, str]) -> Optional[BinlogPosition]:
            positions = [p for p in (first_ddl.get(key), first_ddl.get((key[0], "*"))) if p is not None]
            return min(positions, key=BinlogPosition.key) if positions else None

        for info, definition in tables:
            key = (info.schema, info.table)
            if changed(key) is None:
                catalog.tables[key] = (TableDef.from_json(definition) if definition
                                       else TableDef.from_table_info(info, catalog.database_charset(info.schema)))
        for key, first_map in self._first_maps.items():
            ddl_at = changed(key)
            if ddl_at is not None and first_map.position.key() < ddl_at.key():
                catalog.tables[key] = first_map.definition
        for schema, _ in catalog.tables:
            catalog.databases.setdefault(schema, catalog.server_charset)
        for database in created_databases:
            if not any(schema == database for schema, _ in catalog.tables):
                catalog.databases.pop(database, None)

        versions = [TableVersion(t.schema, t.table, new_first, t.info(new_first), t.to_json())
                    for t in catalog.tables.values()]
        database_versions: list[tuple[str, int, Optional[str]]] = [
            (name, new_first, charset) for name, charset in catalog.databases.items()]
        store = SchemaStore(catalog)
        ddls: list = []
        for cut, record in ddl_cuts:
            outcome = store.apply(cut.query or "", cut.schema, record.commit_ts, str(open_position(record)))
            record_outcome(outcome, record.commit_ts, ddls, versions, database_versions)
        return ddls, versions, database_versions


def _named_by(query: str, default_schema: str) -> tuple[list[tuple[str, str]], list[str], Optional[str]]:
    """(tables a DDL names, databases it is about, the database it creates if it is CREATE DATABASE)."""
    try:
        parsed = parse(query, default_schema)
    except DDLParseError:
        target = guess_target(query, default_schema)
        if target is None:
            return [], [], None
        return ([(target.schema, target.table)], [], None) if target.table else ([], [target.schema], None)
    except Exception:  # noqa: BLE001 - a parser gap: the store reports the DDL when it applies it
        return [], [], None
    tables = [(t.schema, t.table) for t in parsed.tables]
    moves = parsed.moves_rows
    if moves is not None:
        tables.append((moves.table.schema, moves.table.table))
    if parsed.ddl_type in T.DATABASE_DDLS:
        return tables, [parsed.schema], parsed.schema if parsed.ddl_type == T.CREATE_DATABASE else None
    return tables, [], None
