"""The persisted map between commit-ts and binlog transactions, plus the table versions over time.

One SQLite file in WAL mode: the puller (one writer thread) appends, the Spark source in another
process reads. Connections are opened per call, so nothing is shared across threads or processes.
Every append is one SQLite transaction that also stores the new resolved-ts, so a reader never sees
a resolved-ts covering a transaction that is not there. Transactions past resolved-ts may be
persisted (the puller holds resolved-ts until a failover candidate has them, upstream/puller.py):
nothing reads them before resolved-ts passes them, and a failover may drop them.

A transaction's GTID is its identity; its FILE:POS range is a cache of where it lies in one
server's binlog (docs/architecture.md "Positions"). `sources` lists the servers the index has
followed, one epoch each (the highest is the current upstream); each transaction's positions
belong to the server of its `epoch`. A failover (upstream/switchover.py) re-maps the
transactions changefeeds still need onto the new server, and `backfill` extends the index
backwards from a position still on the server (upstream/backfill.py). `breaks` marks a
transaction that a binlog range may not reach from the one before it (its positions are not the
continuation of the previous transaction's: another epoch, or another order on that server).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional, Sequence

from sparkcdc.errors import ErrBinlogPositionInvalid, ErrStartTsInvalid
from sparkcdc.model import tso
from sparkcdc.model.events import FK_CHECKS_ON, DDLEvent, TableInfo
from sparkcdc.model.gtid import GtidState, MariaDBGtid, MariaDBPosition, parse_start, parse_state, state_flavor
from sparkcdc.model.position import BinlogPosition

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS txns (
    commit_ts INTEGER PRIMARY KEY, gtid TEXT,
    start_file TEXT NOT NULL, start_pos INTEGER NOT NULL,
    end_file TEXT NOT NULL, end_pos INTEGER NOT NULL,
    size INTEGER NOT NULL, is_ddl INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS txns_gtid ON txns (gtid);
CREATE INDEX IF NOT EXISTS txns_end ON txns (end_file, end_pos);
CREATE INDEX IF NOT EXISTS txns_start ON txns (start_file, start_pos);
CREATE TABLE IF NOT EXISTS ddls (
    commit_ts INTEGER PRIMARY KEY, schema_name TEXT NOT NULL, table_name TEXT NOT NULL,
    query TEXT NOT NULL, ddl_type TEXT NOT NULL, default_schema TEXT NOT NULL,
    table_info TEXT, pre_table_info TEXT);
CREATE TABLE IF NOT EXISTS table_versions (
    schema_name TEXT NOT NULL, table_name TEXT NOT NULL, version INTEGER NOT NULL,
    table_info TEXT,  -- NULL is a tombstone: the table was dropped at `version`
    PRIMARY KEY (schema_name, table_name, version));
CREATE TABLE IF NOT EXISTS database_versions (
    schema_name TEXT NOT NULL, version INTEGER NOT NULL,
    charset TEXT,  -- NULL: dropped at `version`
    PRIMARY KEY (schema_name, version));
CREATE TABLE IF NOT EXISTS sources (
    epoch INTEGER PRIMARY KEY, host TEXT NOT NULL, port INTEGER NOT NULL,
    server_id INTEGER NOT NULL, server_uuid TEXT, flavor TEXT NOT NULL, since_ts INTEGER NOT NULL);
"""

# Columns added after the first release; ALTERed into older index files on open.
_ADDED_COLUMNS = {
    "table_versions": [("definition", "TEXT")],  # the schema store's TableDef (indexes, charset)
    "ddls": [("extra", "TEXT")],  # JSON: rename pairs, parse errors, binlog position
    # pieces: JSON, where a large transaction's pieces 1.. begin (PieceStart); foreign_key_checks:
    # NULL when every ROWS event ran with MariaDB's foreign_key_checks, else "off" or "mixed";
    # skip_replication: 1 when written with MariaDB's @@skip_replication (a BDR sink's mark), else NULL
    # (so rows indexed before the column existed read as unmarked); continues_group: 1 for the rows
    # of a CREATE TABLE ... SELECT (TxnRecord.continues_group), else NULL; epoch: the source whose
    # binlog its positions are in (NULL = 0); breaks: 1 when a range may not run into it from the
    # previous transaction (NULL = it may).
    "txns": [("pieces", "TEXT"), ("foreign_key_checks", "TEXT"), ("skip_replication", "INTEGER"),
             ("continues_group", "INTEGER"), ("epoch", "INTEGER"), ("breaks", "INTEGER")],
}

# The file's user_version once _SCHEMA and _ADDED_COLUMNS are in it: derived from both, so a
# column added above is ALTERed into every older file on its next open.
_LAYOUT_VERSION = zlib.crc32((_SCHEMA + repr(sorted(_ADDED_COLUMNS.items()))).encode()) & 0x7FFFFFFF

# After a back-fill, the schema GC keeps its versions this long (seconds), so that the changefeed
# that asked for it can be created before the GC counts it in.
BACKFILL_PIN_SECONDS = 600.0

# A transaction larger than this is cut into pieces of about this many binlog bytes, at ROWS
# event borders, so a micro-batch can end inside it (pipeline/planning.py). It equals the source's
# DEFAULT_MAX_BATCH_BYTES (a unit test checks): one piece is about one micro-batch.
DEFAULT_PIECE_BYTES = 8 << 20



@dataclass(frozen=True)
class PieceStart:
    """Where piece k >= 1 of a large transaction begins: at a ROWS event (`pos`), which needs the
    TABLE_MAP events at `table_maps` (earlier in the transaction) to be read. Both in the
    transaction's binlog file: a transaction never spans files."""

    pos: int
    table_maps: tuple[int, ...]


@dataclass(frozen=True)
class TxnRecord:
    """One binlog transaction: where it starts and ends, and the commit-ts we gave it."""

    commit_ts: int
    gtid: Optional[str]
    start: BinlogPosition
    end: BinlogPosition  # position after the commit event
    size: int  # bytes of binlog the transaction spans
    is_ddl: bool
    pieces: tuple[PieceStart, ...] = ()  # where pieces 1.. begin; () = one piece, the whole transaction
    foreign_key_checks: str = FK_CHECKS_ON  # how its ROWS events ran: on, off or mixed (model/events.py)
    # Written by a session with MariaDB's @@skip_replication: a bdr-mode MySQL sink marks its writes
    # so, and a bdr-mode changefeed drops them (never sends a change back where it came from).
    skip_replication: bool = False
    # The rest of a GTID group after its DDL: CREATE TABLE ... SELECT's rows and the group's commit.
    # It starts right after the DDL's record, so it has no GTID event of its own, and shares the gtid.
    continues_group: bool = False
    epoch: int = 0  # the source (server) whose binlog `start`, `end` and `pieces` are in
    breaks: bool = False  # a binlog range may not run into it from the previous transaction

    @property
    def piece_count(self) -> int:
        return len(self.pieces) + 1

    def piece_range(self, piece: int) -> tuple[BinlogPosition, BinlogPosition, tuple[BinlogPosition, ...]]:
        """(start, end, TABLE_MAP positions needed at start) of piece `piece` (0-based)."""
        start = self.start if piece == 0 else BinlogPosition(self.start.file, self.pieces[piece - 1].pos)
        end = self.end if piece == len(self.pieces) else BinlogPosition(self.start.file, self.pieces[piece].pos)
        maps = () if piece == 0 else tuple(BinlogPosition(self.start.file, p) for p in self.pieces[piece - 1].table_maps)
        return start, end, maps

    def piece_size(self, piece: int) -> int:
        start, end, _ = self.piece_range(piece)
        return end.pos - start.pos


class TxnSize(NamedTuple):
    """A transaction as batch planning sees it (TxnIndex.txn_sizes_between)."""

    commit_ts: int
    size: int  # bytes of binlog
    split: bool  # cut into pieces: its TxnRecord says where
    is_ddl: bool
    skip_replication: bool = False  # marked by a BDR sink (TxnRecord.skip_replication)
    epoch: int = 0  # whose binlog its positions are in
    breaks: bool = False  # a binlog range may not run into it from the previous transaction


def _txn_size(row: tuple) -> TxnSize:
    commit_ts, size, split, is_ddl, skip_replication, epoch, breaks = row
    return TxnSize(commit_ts, size, bool(split), bool(is_ddl), bool(skip_replication), epoch or 0, bool(breaks))


@dataclass(frozen=True)
class Source:
    """A server whose binlog the index followed from `since_ts` on (transactions of its epoch)."""

    epoch: int
    host: str
    port: int
    server_id: int
    server_uuid: Optional[str]  # MySQL's @@server_uuid; None on MariaDB
    flavor: str  # mariadb | mysql
    since_ts: int

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def same_server(self, server_id: int, server_uuid: Optional[str]) -> bool:
        return self.server_id == server_id and (self.server_uuid or None) == (server_uuid or None)


@dataclass(frozen=True)
class Remapped:
    """A transaction's positions on another server (a failover's re-map, upstream/switchover.py)."""

    commit_ts: int
    start: BinlogPosition
    end: BinlogPosition
    pieces: tuple[PieceStart, ...]
    breaks: bool


@dataclass(frozen=True)
class TableVersion:
    """A table's definition from `version` on; `info=None` marks it dropped."""

    schema: str
    table: str
    version: int
    info: Optional[TableInfo]
    definition: Optional[str] = None  # the schema store's TableDef JSON, when it has one


# meta key set to a new random token by every write to table_versions, so readers know when
# their cached copy is stale (random, not a count: an index file removed and made again at the
# same path must not match a copy of the old one).
SCHEMA_GENERATION = "schema_generation"
# Table versions cached per process and per index file (TxnIndex.tables_at).
_SCHEMA_VERSIONS: dict[str, "_SchemaVersions"] = {}
_TABLES_AT_MEMO = 8  # results kept per generation, by the newest version they include


def _bump_schema_generation(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO meta (key, value) VALUES (?, lower(hex(randomblob(16)))) ON CONFLICT(key) "
                 "DO UPDATE SET value = excluded.value", (SCHEMA_GENERATION,))


class _SchemaVersions:
    """Every row of table_versions at one generation, as sorted versions per table."""

    def __init__(self, generation: Optional[str], rows: Sequence[tuple[str, str, int, Optional[str]]]):
        self.generation = generation
        self.tables: dict[tuple[str, str], tuple[list[int], list[Optional[str]]]] = {}
        for schema, table, version, info in rows:  # ordered by schema, table, version
            versions, infos = self.tables.setdefault((schema, table), ([], []))
            versions.append(version)
            infos.append(info)
        self.versions = sorted({version for schema, table, version, info in rows})
        self._memo: dict[int, list[TableInfo]] = {}
        self._lock = threading.Lock()  # API threads and the changefeeds' ask at once

    @classmethod
    def load(cls, conn: sqlite3.Connection, generation: Optional[str]) -> "_SchemaVersions":
        return cls(generation, conn.execute(
            "SELECT schema_name, table_name, version, table_info FROM table_versions "
            "ORDER BY schema_name, table_name, version").fetchall())

    def tables_at(self, ts: int) -> list[TableInfo]:
        position = bisect.bisect_right(self.versions, ts)
        if position == 0:
            return []
        newest = self.versions[position - 1]  # the result is the same for every ts up to the next version
        with self._lock:
            tables = self._memo.get(newest)
            if tables is None:
                tables = [info for info in (_version_at(found, ts) for found in self.tables.values())
                          if info is not None]
                if len(self._memo) >= _TABLES_AT_MEMO:
                    self._memo.pop(next(iter(self._memo)))
                self._memo[newest] = tables
        return list(tables)

    def key_at(self, ts: int) -> tuple[Optional[str], int]:
        """Equal for two ts (at any time) only if tables_at gives the same tables for both."""
        position = bisect.bisect_right(self.versions, ts)
        return self.generation, self.versions[position - 1] if position else 0

    def table_at(self, schema: str, table: str, ts: int) -> Optional[TableInfo]:
        """The table's newest version <= ts; None if none, or if that version is its drop."""
        found = self.tables.get((schema, table))
        return None if found is None else _version_at(found, ts)


def _version_at(found: tuple[list[int], list[Optional[str]]], ts: int) -> Optional[TableInfo]:
    """Of one table's (versions, infos), the newest version <= ts; None if none or its drop."""
    versions, infos = found
    at = bisect.bisect_right(versions, ts)
    return TableInfo.from_json(infos[at - 1]) if at and infos[at - 1] is not None else None


class TxnIndex:
    """Reads and appends the index at `path` (created on first use)."""

    def __init__(self, path: str):
        self.path = path
        self._append_lock = threading.Lock()
        self._append_conn: Optional[sqlite3.Connection] = None
        with self._connect() as conn:
            # Made once per file: API queries open the index for every request.
            if conn.execute("PRAGMA user_version").fetchone()[0] == _LAYOUT_VERSION:
                return
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            for table, columns in _ADDED_COLUMNS.items():
                have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                for name, sql_type in columns:
                    if name not in have:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")
            conn.execute(f"PRAGMA user_version={_LAYOUT_VERSION}")

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = self._open()
        try:
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def _appending(self) -> Iterator[sqlite3.Connection]:
        """The connection `append` writes through, kept open until `close`: closing the last
        connection to a WAL database checkpoints it and syncs the file. The puller appends every
        DEFAULT_FLUSH_SECONDS: a connection per append cost 1.5 ms on an idle disk against 0.03 ms
        kept, and ~5 ms (4.4 s of 40 s profiled) while a 10M-row snapshot's sink wrote to the same
        disk (docs/benchmarks.md). WAL's own checkpoints (every 1,000 pages) still run."""
        with self._append_lock:
            if self._append_conn is None:
                self._append_conn = self._open()
            try:
                yield self._append_conn
            except BaseException:
                self._append_conn.close()  # a failed connection is not reused
                self._append_conn = None
                raise

    def close(self) -> None:
        """Close the connection appends keep open (reads open their own each time)."""
        with self._append_lock:
            if self._append_conn is not None:
                self._append_conn.close()
                self._append_conn = None

    # ---- reads -------------------------------------------------------------------------------

    def _meta(self, conn: sqlite3.Connection, key: str) -> Optional[str]:
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def resolved_ts(self) -> int:
        with self._connect() as conn:
            return int(self._meta(conn, "resolved_ts") or 0)

    def first_ts(self) -> int:
        """The resolved-ts the index started at; changefeeds cannot start before it."""
        with self._connect() as conn:
            return int(self._meta(conn, "first_ts") or 0)

    def start_position(self) -> Optional[BinlogPosition]:
        """Where the binlog stood at first_ts()."""
        with self._connect() as conn:
            text = self._meta(conn, "start_position")
        return BinlogPosition.parse(text) if text else None

    def is_empty(self) -> bool:
        with self._connect() as conn:
            return self._meta(conn, "first_ts") is None

    @staticmethod
    def _record(row) -> TxnRecord:
        (commit_ts, gtid, sf, sp, ef, ep, size, is_ddl, pieces, foreign_key_checks, skip_replication,
         continues_group, epoch, breaks) = row
        return TxnRecord(commit_ts, gtid, BinlogPosition(sf, sp), BinlogPosition(ef, ep), size, bool(is_ddl),
                         _parse_pieces(pieces), foreign_key_checks or FK_CHECKS_ON, bool(skip_replication),
                         bool(continues_group), epoch or 0, bool(breaks))

    _TXN_COLUMNS = ("commit_ts, gtid, start_file, start_pos, end_file, end_pos, size, is_ddl, pieces, foreign_key_checks,"
                    " skip_replication, continues_group, epoch, breaks")

    def txns_between(self, lo_exclusive: int, hi_inclusive: int, limit: Optional[int] = None) -> list[TxnRecord]:
        """The transactions with commit-ts in (lo_exclusive, hi_inclusive], the first `limit` of them."""
        with self._connect() as conn:
            rows = conn.execute(
                f"SELECT {self._TXN_COLUMNS} FROM txns WHERE commit_ts > ? AND commit_ts <= ? ORDER BY commit_ts"
                " LIMIT ?",
                (lo_exclusive, hi_inclusive, -1 if limit is None else limit),
            ).fetchall()
        return [self._record(r) for r in rows]

    def txns_at(self, commit_ts: Sequence[int]) -> dict[int, TxnRecord]:
        """The transactions with these commit-ts (those the index has)."""
        wanted = sorted(set(commit_ts))
        found: dict[int, TxnRecord] = {}
        with self._connect() as conn:
            for start in range(0, len(wanted), 500):  # SQLite's bound on host parameters
                chunk = wanted[start:start + 500]
                rows = conn.execute(f"SELECT {self._TXN_COLUMNS} FROM txns WHERE commit_ts IN "
                                    f"({','.join('?' * len(chunk))})", chunk).fetchall()
                found.update((row[0], self._record(row)) for row in rows)
        return found

    def txn_sizes_between(self, lo_exclusive: int, hi_inclusive: int, limit: Optional[int] = None) -> list[TxnSize]:
        """The sizes of the transactions with commit-ts in (lo_exclusive, hi_inclusive], the first
        `limit` of them: what planning a batch needs, read without a TxnRecord per transaction (a
        batch may hold tens of thousands of single-row ones)."""
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT commit_ts, size, pieces IS NOT NULL, is_ddl, skip_replication IS 1, epoch, breaks FROM txns"
                " WHERE commit_ts > ? AND commit_ts <= ? ORDER BY commit_ts LIMIT ?",
                (lo_exclusive, hi_inclusive, -1 if limit is None else limit),
            ).fetchall()
        return list(map(_txn_size, rows))

    def last_txn(self) -> Optional[TxnRecord]:
        with self._connect() as conn:
            row = conn.execute(f"SELECT {self._TXN_COLUMNS} FROM txns ORDER BY commit_ts DESC LIMIT 1").fetchone()
        return self._record(row) if row else None

    def next_ddl_after(self, ts: int) -> Optional[int]:
        with self._connect() as conn:
            row = conn.execute("SELECT MIN(commit_ts) FROM ddls WHERE commit_ts > ?", (ts,)).fetchone()
        return row[0] if row and row[0] is not None else None

    def marked_between(self, lo_exclusive: int, hi_inclusive: int) -> set[int]:
        """The commit-ts of the transactions in (lo_exclusive, hi_inclusive] marked with
        @@skip_replication (TxnRecord.skip_replication)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT commit_ts FROM txns WHERE commit_ts > ? AND commit_ts <= ? AND skip_replication = 1",
                                (lo_exclusive, hi_inclusive)).fetchall()
        return {row[0] for row in rows}

    def ddls_between(self, lo_exclusive: int, hi_inclusive: int) -> list[DDLEvent]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT commit_ts, schema_name, table_name, query, ddl_type, default_schema, table_info, pre_table_info, "
                "extra FROM ddls WHERE commit_ts > ? AND commit_ts <= ? ORDER BY commit_ts",
                (lo_exclusive, hi_inclusive),
            ).fetchall()
        return [
            DDLEvent(
                commit_ts=ts,
                schema=schema,
                table=table,
                query=query,
                ddl_type=ddl_type,
                table_info=TableInfo.from_json(info) if info else None,
                pre_table_info=TableInfo.from_json(pre) if pre else None,
                extra={**(json.loads(extra) if extra else {}), "default_schema": default_schema},
            )
            for ts, schema, table, query, ddl_type, default_schema, info, pre, extra in rows
        ]

    def table_info_at(self, schema: str, table: str, ts: int) -> Optional[TableInfo]:
        """The newest version with version <= ts (None if none or dropped), from the same
        per-process copy as tables_at (a batch asks for all its tables at once: table_infos_at)."""
        return self._schema_versions().table_at(schema, table, ts)

    def table_infos_at(self, tables: Sequence[tuple[str, str]], ts: int) -> list[Optional[TableInfo]]:
        """table_info_at for each (schema, table), the store's generation checked once: a batch
        over 1,000 tables asking per table spent most of its writer's time opening connections."""
        versions = self._schema_versions()
        return [versions.table_at(schema, table, ts) for schema, table in tables]

    def tables_at(self, ts: int) -> list[TableInfo]:
        """Every table existing at ts, in its newest version <= ts, ordered by (schema, table).

        Read from a per-process copy of the schema store's versions that is reloaded only when
        the store's generation (bumped by every write to table_versions) moves: the planner asks
        for every batch and the API for every changefeed query, and with 10,000 tables reading
        and parsing them each time was most of a changefeed's CPU."""
        return self._schema_versions().tables_at(ts)

    def tables_key_at(self, ts: int) -> tuple[Optional[str], int]:
        """A key of tables_at(ts): equal keys, equal tables (for memos of what they give)."""
        return self._schema_versions().key_at(ts)

    def _schema_versions(self) -> "_SchemaVersions":
        """The per-process copy of table_versions, reloaded when the store's generation moved."""
        with self._connect() as conn:
            conn.execute("BEGIN")  # the generation and the rows from one snapshot
            try:
                generation = self._meta(conn, SCHEMA_GENERATION)
                versions = _SCHEMA_VERSIONS.get(self.path)
                if versions is None or versions.generation != generation:
                    versions = _SchemaVersions.load(conn, generation)
                    _SCHEMA_VERSIONS[self.path] = versions
            finally:
                conn.execute("COMMIT")
        return versions

    def position_at(self, ts: int) -> Optional[BinlogPosition]:
        """Where the binlog stands after every txn with commit_ts <= ts (None before first_ts)."""
        with self._connect() as conn:
            first = self._meta(conn, "first_ts")
            if first is None or ts < int(first):
                return None
            row = conn.execute(
                "SELECT end_file, end_pos FROM txns WHERE commit_ts <= ? ORDER BY commit_ts DESC LIMIT 1", (ts,)
            ).fetchone()
            if row:
                return BinlogPosition(row[0], row[1])
            return BinlogPosition.parse(self._meta(conn, "start_position"))

    def last_txn_ending_at_or_before(self, position: BinlogPosition) -> Optional[int]:
        """For a position that is not a transaction end here (e.g. another index's start after a
        rotation): the commit-ts of the last indexed transaction that ends at or before it, if
        this index reaches past it (else None); first_ts when none of the last 5000 of its file
        and before do."""
        start, last = self.start_position(), self.last_txn()
        if start is None or last is None or not start.key() <= position.key() < last.end.key():
            return None
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT commit_ts, end_file, end_pos FROM txns WHERE end_file <= ? ORDER BY commit_ts DESC LIMIT 5000",
                (position.file,),
            ).fetchall()
        for commit_ts, end_file, end_pos in rows:
            if BinlogPosition(end_file, end_pos).key() <= position.key():
                return commit_ts
        return self.first_ts()

    def covers(self, position: BinlogPosition, epoch: Optional[int] = None) -> bool:
        """Whether every transaction that ends at or before `position` is in the index: the puller
        has read the binlog up to it (a transaction ends there or later, or the puller said so).
        `position` is in the binlog of source `epoch` (None: the current one); a position of a
        server the index no longer follows is never covered (its transactions may be re-mapped)."""
        with self._connect() as conn:
            current = self._current_epoch(conn)
            if epoch is not None and epoch != current:
                return False
            row = conn.execute("SELECT end_file, end_pos, coalesce(epoch, 0) FROM txns ORDER BY commit_ts DESC"
                               " LIMIT 1").fetchone()
            if row is not None and row[2] == current and BinlogPosition(row[0], row[1]).key() >= position.key():
                return True
            # read_position is the current source's (a new epoch clears it); start_position epoch 0's.
            text = self._meta(conn, "read_position") or (self._meta(conn, "start_position") if current == 0 else None)
        return text is not None and BinlogPosition.parse(text).key() >= position.key()

    def ts_at_position(self, position: BinlogPosition, epoch: Optional[int] = None) -> Optional[int]:
        """The commit-ts of the last transaction ending at or before `position` (first_ts when none
        does), for a position the index `covers`; None before the index's start. `position` is in
        the binlog of source `epoch` (None: the current one): only that server's transactions are
        compared with it, since each server numbers its binlog on its own."""
        with self._connect() as conn:
            if epoch is None:
                epoch = self._current_epoch(conn)
            if epoch == 0:
                start = self._meta(conn, "start_position")
                if start is None or position.key() < BinlogPosition.parse(start).key():
                    return None
            row = conn.execute(
                "SELECT commit_ts FROM txns WHERE coalesce(epoch, 0)=? AND (end_file < ? OR (end_file = ? AND"
                " end_pos <= ?)) ORDER BY commit_ts DESC LIMIT 1",
                (epoch, position.file, position.file, position.pos)).fetchone()
            if row is not None:
                return row[0]
            if epoch != 0:
                # Before the epoch's first transaction on that server: after every older one.
                row = conn.execute(
                    "SELECT max(commit_ts) FROM txns WHERE commit_ts < coalesce((SELECT min(commit_ts) FROM txns"
                    " WHERE coalesce(epoch, 0)=?), 9223372036854775807)", (epoch,)).fetchone()
                if row[0] is not None:
                    return row[0]
            return int(self._meta(conn, "first_ts") or 0)

    def schema_gc_ts(self) -> int:
        """Schema versions before this ts were garbage-collected; nothing may start before it."""
        with self._connect() as conn:
            return int(self._meta(conn, "schema_gc_ts") or 0)

    def resolve_start(self, text: str) -> int:
        """A TSO, GTID (set) or FILE:POS -> the commit-ts after which replication starts exactly there."""
        ts = self._resolve_start(text)
        gc_ts = self.schema_gc_ts()
        if ts < gc_ts:
            raise ErrStartTsInvalid(
                f"start {text!r} (ts {ts}) is before {gc_ts} ({tso.format_time(gc_ts)}), below which schema "
                f"versions were garbage-collected at the minimum changefeed checkpoint; choose a start >= {gc_ts}"
            )
        return ts

    def _resolve_start(self, text: str) -> int:
        text = (text or "").strip()
        first, resolved = self.first_ts(), self.resolved_ts()
        if first == 0 and resolved == 0:
            raise ErrStartTsInvalid("the binlog index is empty; wait for the puller to start, then retry")
        if text in ("", "0"):
            return resolved
        if text.isdigit():
            ts = int(text)
            if ts < first:
                raise StartBeforeIndex(
                    f"start-ts {ts} ({tso.format_time(ts)}) is before the first indexed ts {first} "
                    f"({tso.format_time(first)}); choose a start-ts >= {first}", ts=ts)
            return ts
        try:
            position = BinlogPosition.parse(text)
        except ErrBinlogPositionInvalid:
            return self.ts_of_gtid_state(parse_start(text), text)
        return self._resolve_position(position)

    def _resolve_position(self, position: BinlogPosition) -> int:
        """A FILE:POS of the current source's binlog (older epochs' positions are another server's)."""
        with self._connect() as conn:
            epoch = self._current_epoch(conn)
            if epoch == 0 and self._meta(conn, "start_position") == str(position):
                return int(self._meta(conn, "first_ts"))
            row = conn.execute(
                "SELECT commit_ts FROM txns WHERE end_file=? AND end_pos=? AND coalesce(epoch, 0)=?",
                (position.file, position.pos, epoch)).fetchone()
            if row:
                return row[0]
            row = conn.execute(
                "SELECT commit_ts FROM txns WHERE start_file=? AND start_pos=? AND coalesce(epoch, 0)=?",
                (position.file, position.pos, epoch)).fetchone()
            if row:
                return row[0] - 1
            start = self._meta(conn, "start_position")
            if epoch == 0 and start and position.key() < BinlogPosition.parse(start).key():
                raise StartBeforeIndex(
                    f"binlog position {position} is before the index's start {start}", position=position)
        raise ErrStartTsInvalid(
            f"binlog position {position} is not a transaction boundary known to the index "
            f"(it starts at {self.start_position()}); give the position after a commit, a GTID or a TSO"
        )

    def ts_of_gtid_state(self, state: GtidState, text: str = "") -> int:
        """The commit-ts after which the upstream stands exactly at GTID state `state` (a
        position or set: every transaction up to it is done): the newest commit-ts among the
        GTIDs it names, or first_ts for those the index's start state ends with. A state
        before the index's start raises StartBeforeIndex; one naming a GTID the index does not
        have yet, ErrStartTsInvalid."""
        named = state.named()
        text = text or str(state)
        if not named:
            raise ErrStartTsInvalid(f"start {text!r} names no GTID")
        start = self.start_gtid()
        best = 0
        with self._connect() as conn:
            first = int(self._meta(conn, "first_ts") or 0)
            for gtid in named:
                # After the GTID's whole group: a CREATE TABLE ... SELECT's group is two records.
                row = conn.execute("SELECT MAX(commit_ts) FROM txns WHERE gtid=?", (gtid,)).fetchone()
                if row[0] is not None:
                    best = max(best, row[0])
                elif start is not None and gtid in start.named():
                    best = max(best, first)  # the index starts right after it
                elif start is not None and start.contains(gtid):
                    raise StartBeforeIndex(f"GTID {gtid} of {text!r} is before the index's start (GTID state "
                                           f"{start})", gtid_state=state)
                else:
                    raise ErrStartTsInvalid(
                        f"GTID {gtid} is not in the binlog index (it starts at ts {first}"
                        + (f", GTID state {start}" if start is not None else "")
                        + "); it is older than the index or not executed yet; give a later GTID or a TSO")
        return best

    def start_gtid(self) -> Optional[GtidState]:
        """The upstream's GTID state at the index's start (None for an index that does not know it)."""
        with self._connect() as conn:
            return self._state(conn, "start_gtid")

    def gtid_executed(self) -> Optional[GtidState]:
        """The GTID state after the index's last transaction (None when unknown)."""
        with self._connect() as conn:
            return self._state(conn, "gtid_executed")

    def _state(self, conn: sqlite3.Connection, key: str) -> Optional[GtidState]:
        text = self._meta(conn, key)
        if text is None:
            return None
        return parse_state(text, self._flavor(conn))

    def _flavor(self, conn: sqlite3.Connection) -> str:
        row = conn.execute("SELECT flavor FROM sources ORDER BY epoch DESC LIMIT 1").fetchone()
        if row:
            return row[0]
        row = conn.execute("SELECT gtid FROM txns WHERE gtid IS NOT NULL LIMIT 1").fetchone()
        return state_flavor(row[0]) if row else "mariadb"

    def gtid_state_at(self, ts: int) -> Optional[GtidState]:
        """The GTID state after every transaction with commit-ts <= ts (and before the next):
        where a changefeed with checkpoint `ts` stands on any server of the topology. None when
        the index does not know its start state, or ts is before the index."""
        with self._connect() as conn:
            state = self._state(conn, "gtid_executed")
            start = self._state(conn, "start_gtid")
            first = int(self._meta(conn, "first_ts") or 0)
            if state is None or start is None or ts < first:
                return None
            if isinstance(state, MariaDBPosition):
                for domain in state.domains:
                    row = conn.execute(
                        "SELECT gtid FROM txns WHERE commit_ts <= ? AND gtid LIKE ? ORDER BY commit_ts DESC LIMIT 1",
                        (ts, f"{domain}-%")).fetchone()
                    assert isinstance(start, MariaDBPosition)
                    state.set_domain(domain, MariaDBGtid.parse(row[0]) if row else start.last(domain))
                return state
            for (gtid,) in conn.execute("SELECT gtid FROM txns WHERE commit_ts > ? AND gtid IS NOT NULL", (ts,)):
                state.discard(gtid)
            return state

    # ---- the servers followed ------------------------------------------------------------------

    def _current_epoch(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT MAX(epoch) FROM sources").fetchone()
        return row[0] if row and row[0] is not None else 0

    def current_epoch(self) -> int:
        """The epoch of the server the index follows now (0 before one is recorded)."""
        with self._connect() as conn:
            return self._current_epoch(conn)

    def current_source(self) -> Optional[Source]:
        """The server the index follows now (None for an index that has not recorded one yet)."""
        with self._connect() as conn:
            row = conn.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources ORDER BY epoch DESC LIMIT 1").fetchone()
        return Source(*row) if row else None

    def source(self, epoch: int) -> Optional[Source]:
        with self._connect() as conn:
            row = conn.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources WHERE epoch=?", (epoch,)).fetchone()
        return Source(*row) if row else None

    def record_source(self, host: str, port: int, server_id: int, server_uuid: Optional[str], flavor: str,
                      new_epoch: bool) -> Source:
        """Record the server the index follows from now on: a new epoch after a failover
        (`new_epoch`), else epoch 0 (an index that had none recorded yet) or the current epoch
        (the same server under another address)."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            current = self._current_epoch(conn)
            has_any = conn.execute("SELECT 1 FROM sources LIMIT 1").fetchone() is not None
            epoch = current + 1 if new_epoch and has_any else current
            since = int(self._meta(conn, "resolved_ts") or 0)
            if epoch != current:  # the old server's read position means nothing in the new one's binlog
                conn.execute("DELETE FROM meta WHERE key='read_position'")
            conn.execute("INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, ?, ?, coalesce("
                         "(SELECT since_ts FROM sources WHERE epoch=?), ?))",
                         (epoch, host, port, server_id, server_uuid, flavor, epoch, since))
            row = conn.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources WHERE epoch=?", (epoch,)).fetchone()
            conn.execute("COMMIT")
        return Source(*row)

    def set_start_gtid(self, state: GtidState) -> None:
        """The GTID state at the index's start, for an index made before it was kept: the
        executed state is derived from it and the transactions since."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            if self._meta(conn, "start_gtid") is None:
                executed = state.copy()
                for (gtid,) in conn.execute("SELECT gtid FROM txns WHERE gtid IS NOT NULL ORDER BY commit_ts"):
                    executed.add(gtid)
                self._set_meta(conn, "start_gtid", str(state))
                self._set_meta(conn, "gtid_executed", str(executed))
            conn.execute("COMMIT")

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                     (key, value))

    def _grow_gtid_executed(self, conn: sqlite3.Connection, txns: Sequence[TxnRecord]) -> None:
        gtids = [t.gtid for t in txns if t.gtid]
        text = self._meta(conn, "gtid_executed")
        if not gtids or text is None:
            return
        state = parse_state(text, state_flavor(gtids[0]))
        for gtid in gtids:
            state.add(gtid)
        self._set_meta(conn, "gtid_executed", str(state))

    # ---- a failover: positions re-mapped onto the new server ----------------------------------

    def txns_after(self, ts: int) -> list[TxnRecord]:
        """Every persisted transaction after ts, resolved or not, in commit-ts order."""
        with self._connect() as conn:
            rows = conn.execute(f"SELECT {self._TXN_COLUMNS} FROM txns WHERE commit_ts > ? ORDER BY commit_ts",
                                (ts,)).fetchall()
        return [self._record(r) for r in rows]

    def remap(self, epoch: int, moved: Sequence[Remapped]) -> None:
        """Give transactions their positions in the binlog of source `epoch` (one SQLite
        transaction: each row changes whole, so a planner sees old or new positions, never a mix)."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "UPDATE txns SET start_file=?, start_pos=?, end_file=?, end_pos=?, size=?, pieces=?, epoch=?, breaks=?"
                " WHERE commit_ts=?",
                [(m.start.file, m.start.pos, m.end.file, m.end.pos, _span(m.start, m.end), _format_pieces(m.pieces),
                  epoch, 1 if m.breaks else None, m.commit_ts) for m in moved])
            conn.execute("COMMIT")

    def drop_unresolved(self, commit_ts: Sequence[int]) -> None:
        """Forget transactions past resolved-ts that the new primary of a failover does not have:
        no changefeed ever read them (and their DDLs' schema versions with them)."""
        if not commit_ts:
            return
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            resolved = int(self._meta(conn, "resolved_ts") or 0)
            if min(commit_ts) <= resolved:
                conn.execute("ROLLBACK")
                raise ValueError(f"transactions at or below resolved-ts {resolved} may have been replicated")
            lowest = min(commit_ts)
            conn.executemany("DELETE FROM txns WHERE commit_ts=?", [(ts,) for ts in commit_ts])
            for table in ("ddls",):
                conn.execute(f"DELETE FROM {table} WHERE commit_ts >= ?", (lowest,))
            if conn.execute("DELETE FROM table_versions WHERE version >= ?", (lowest,)).rowcount:
                _bump_schema_generation(conn)
            conn.execute("DELETE FROM database_versions WHERE version >= ?", (lowest,))
            start = self._state(conn, "start_gtid")
            if start is not None:
                executed = start
                for (gtid,) in conn.execute("SELECT gtid FROM txns WHERE gtid IS NOT NULL ORDER BY commit_ts"):
                    executed.add(gtid)
                self._set_meta(conn, "gtid_executed", str(executed))
            conn.execute("COMMIT")

    # ---- writes (the puller) -----------------------------------------------------------------

    def bootstrap(
        self,
        start: BinlogPosition,
        ts: int,
        tables: Sequence[TableInfo],
        definitions: Sequence[Optional[str]] = (),
        databases: Optional[dict[str, str]] = None,
        server_charset: Optional[str] = None,
        gtid_state: Optional[GtidState] = None,
    ) -> None:
        """Start an empty index at `start`/`ts` with the tables (and their store definitions) as they are now,
        and the upstream's GTID state at `start`."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            if self._meta(conn, "first_ts") is not None:
                conn.execute("ROLLBACK")
                raise RuntimeError(f"binlog index {self.path} is already bootstrapped")
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [("first_ts", str(ts)), ("resolved_ts", str(ts)), ("start_position", str(start))]
                + ([("server_charset", server_charset)] if server_charset else [])
                + ([("start_gtid", str(gtid_state)), ("gtid_executed", str(gtid_state))] if gtid_state is not None
                   else []),
            )
            definitions = list(definitions) or [None] * len(tables)
            self._insert_versions(
                conn, [TableVersion(t.schema, t.table, ts, t, d) for t, d in zip(tables, definitions)]
            )
            conn.executemany(
                "INSERT OR REPLACE INTO database_versions VALUES (?, ?, ?)",
                [(name, ts, charset) for name, charset in (databases or {}).items()],
            )
            conn.execute("COMMIT")

    def append(
        self,
        txns: Sequence[TxnRecord],
        ddls: Sequence[DDLEvent],
        versions: Sequence[TableVersion],
        resolved_ts: int,
        databases: Sequence[tuple[str, int, Optional[str]]] = (),
        position: Optional[BinlogPosition] = None,
    ) -> None:
        """Persist a batch of transactions and move resolved-ts, atomically; `position`: where the
        puller has read the binlog up to (`covers`)."""
        with self._appending() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    f"INSERT INTO txns ({self._TXN_COLUMNS}) VALUES ({_TXN_PLACEHOLDERS})",
                    [_txn_row(t) for t in txns],
                )
                self._grow_gtid_executed(conn, txns)
                self._insert_ddls(conn, ddls)
                self._insert_versions(conn, versions)
                conn.executemany("INSERT OR REPLACE INTO database_versions VALUES (?, ?, ?)", list(databases))
                conn.execute(
                    "UPDATE meta SET value=? WHERE key='resolved_ts' AND CAST(value AS INTEGER) < ?",
                    (str(resolved_ts), resolved_ts),
                )
                if position is not None:
                    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('read_position', ?)",
                                 (str(position),))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def backfill(
        self,
        txns: Sequence[TxnRecord],
        ddls: Sequence[DDLEvent],
        versions: Sequence[TableVersion],
        databases: Sequence[tuple[str, int, Optional[str]]],
        first_ts: int,
        start: BinlogPosition,
        gtid_state: Optional[GtidState],
        expected_first_ts: int,
        now: float,
    ) -> None:
        """Extend the index backwards (upstream/backfill.py): transactions, DDLs and versions
        below its first ts, which becomes `first_ts` at binlog position `start` (GTID state
        `gtid_state`, None when unknown), atomically. Fails when the index's start moved since
        the back-fill read it (`expected_first_ts`), e.g. another back-fill ran meanwhile. The
        schema GC stays at or below `first_ts` for BACKFILL_PIN_SECONDS after `now`."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if int(self._meta(conn, "first_ts") or 0) != expected_first_ts:
                    raise ErrStartTsInvalid("the transaction index's start moved during the back-fill; retry")
                if txns and txns[-1].commit_ts >= expected_first_ts:
                    raise ValueError("back-filled transactions must be below the index's first ts")
                conn.executemany(f"INSERT INTO txns ({self._TXN_COLUMNS}) VALUES ({_TXN_PLACEHOLDERS})",
                                 [_txn_row(t) for t in txns])
                self._insert_ddls(conn, ddls)
                self._insert_versions(conn, versions)
                conn.executemany("INSERT OR REPLACE INTO database_versions VALUES (?, ?, ?)", list(databases))
                self._set_meta(conn, "first_ts", str(first_ts))
                self._set_meta(conn, "start_position", str(start))
                if gtid_state is None:
                    conn.execute("DELETE FROM meta WHERE key IN ('start_gtid', 'gtid_executed')")
                else:
                    self._set_meta(conn, "start_gtid", str(gtid_state))
                # Versions below the old start are new: starts from first_ts on are valid again (the
                # back-fill refuses when GC removed versions after the old start it would need).
                conn.execute("UPDATE meta SET value=? WHERE key='schema_gc_ts' AND CAST(value AS INTEGER) > ?",
                             (str(first_ts), first_ts))
                self._set_meta(conn, "backfill_pin", json.dumps([first_ts, now + BACKFILL_PIN_SECONDS]))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _insert_ddls(conn: sqlite3.Connection, ddls: Sequence[DDLEvent]) -> None:
        conn.executemany(
            "INSERT INTO ddls (commit_ts, schema_name, table_name, query, ddl_type, default_schema, "
            "table_info, pre_table_info, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    d.commit_ts,
                    d.schema,
                    d.table,
                    d.query,
                    d.ddl_type,
                    d.extra.get("default_schema", ""),
                    d.table_info.to_json() if d.table_info else None,
                    d.pre_table_info.to_json() if d.pre_table_info else None,
                    json.dumps({k: v for k, v in d.extra.items() if k != "default_schema"}) or None,
                )
                for d in ddls
            ],
        )

    @staticmethod
    def _insert_versions(conn: sqlite3.Connection, versions: Sequence[TableVersion]) -> None:
        if versions:
            _bump_schema_generation(conn)
        conn.executemany(
            "INSERT OR REPLACE INTO table_versions (schema_name, table_name, version, table_info, definition) "
            "VALUES (?, ?, ?, ?, ?)",
            [(v.schema, v.table, v.version, v.info.to_json() if v.info else None, v.definition) for v in versions],
        )

    # ---- the schema store's persisted state ------------------------------------------------------

    def schema_at(self, ts: int) -> tuple[Optional[str], dict[str, str], list[tuple[TableInfo, Optional[str]]]]:
        """(server charset, databases -> charset, [(table info, store definition JSON)]) as of ts."""
        with self._connect() as conn:
            server_charset = self._meta(conn, "server_charset")
            databases = {
                name: charset
                for name, charset in conn.execute(
                    "SELECT d.schema_name, d.charset FROM database_versions d JOIN ("
                    "  SELECT schema_name, MAX(version) AS version FROM database_versions WHERE version <= ?"
                    "  GROUP BY schema_name) newest USING (schema_name, version)",
                    (ts,),
                )
                if charset is not None
            }
            rows = conn.execute(
                "SELECT v.table_info, v.definition FROM table_versions v JOIN ("
                "  SELECT schema_name, table_name, MAX(version) AS version FROM table_versions"
                "  WHERE version <= ? GROUP BY schema_name, table_name) newest"
                " USING (schema_name, table_name, version)"
                " WHERE v.table_info IS NOT NULL ORDER BY v.schema_name, v.table_name",
                (ts,),
            ).fetchall()
        return server_charset, databases, [(TableInfo.from_json(info), definition) for info, definition in rows]

    def gc_schema_versions(self, safe_ts: int, now: Optional[float] = None) -> int:
        """Drop table versions nobody can read any more: those superseded at or before `safe_ts`
        (the minimum checkpoint), and tombstones at or before it; never below a back-fill's
        start in the BACKFILL_PIN_SECONDS after it (`now`: wall-clock seconds). Returns how many
        rows went."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            pin = self._meta(conn, "backfill_pin")
            if pin is not None:
                pinned_ts, until = json.loads(pin)
                if (now if now is not None else time.time()) < until:
                    safe_ts = min(safe_ts, pinned_ts)
            before = conn.total_changes
            conn.execute(
                "DELETE FROM table_versions WHERE version < ("
                "  SELECT MAX(n.version) FROM table_versions n WHERE n.schema_name = table_versions.schema_name"
                "  AND n.table_name = table_versions.table_name AND n.version <= ?)",
                (safe_ts,),
            )
            conn.execute("DELETE FROM table_versions WHERE table_info IS NULL AND version <= ?", (safe_ts,))
            if conn.total_changes != before:
                _bump_schema_generation(conn)
                before += 1  # the bump is not a version that went
            conn.execute(
                "DELETE FROM database_versions WHERE version < ("
                "  SELECT MAX(n.version) FROM database_versions n WHERE n.schema_name = database_versions.schema_name"
                "  AND n.version <= ?)",
                (safe_ts,),
            )
            conn.execute("DELETE FROM database_versions WHERE charset IS NULL AND version <= ?", (safe_ts,))
            removed = conn.total_changes - before
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_gc_ts', ?) ON CONFLICT(key) DO UPDATE SET "
                "value = excluded.value WHERE CAST(value AS INTEGER) < CAST(excluded.value AS INTEGER)",
                (str(safe_ts),),
            )
            conn.execute("COMMIT")
        return removed


_SOURCE_COLUMNS = "epoch, host, port, server_id, server_uuid, flavor, since_ts"


class StartBeforeIndex(ErrStartTsInvalid):
    """A start point older than the index: `ts`, `position` or `gtid_state` says which. The
    capture back-fills the index from there when the upstream still has it (upstream/backfill.py);
    anyone else sees ErrStartTsInvalid with the message."""

    def __init__(self, message: str, ts: Optional[int] = None, position: Optional[BinlogPosition] = None,
                 gtid_state: Optional[GtidState] = None):
        super().__init__(message)
        self.ts, self.position, self.gtid_state = ts, position, gtid_state


def _span(start: BinlogPosition, end: BinlogPosition) -> int:
    """Bytes of binlog from start to end (a transaction never spans files)."""
    return end.pos - start.pos if start.file == end.file else end.pos


_TXN_PLACEHOLDERS = ", ".join("?" * 14)


def _txn_row(t: TxnRecord) -> tuple:
    return (t.commit_ts, t.gtid, t.start.file, t.start.pos, t.end.file, t.end.pos, t.size, int(t.is_ddl),
            _format_pieces(t.pieces), None if t.foreign_key_checks == FK_CHECKS_ON else t.foreign_key_checks,
            1 if t.skip_replication else None, 1 if t.continues_group else None, t.epoch or None,
            1 if t.breaks else None)


def _format_pieces(pieces: Sequence[PieceStart]) -> Optional[str]:
    return json.dumps([[p.pos, list(p.table_maps)] for p in pieces]) if pieces else None


def _parse_pieces(text: Optional[str]) -> tuple[PieceStart, ...]:
    return tuple(PieceStart(pos, tuple(maps)) for pos, maps in json.loads(text)) if text else ()
