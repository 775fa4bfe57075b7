"""The MySQL sink: row transactions through the conflict detector to `worker-count` writer
threads (each with its own connection), DDL one at a time on its own connection.

Order of work, as the batch writer drives the sink contract (sink/contract.py): `write_rows`
hands whole upstream transactions of one table in (commit_ts, seq) order and returns once they
are queued; `flush` returns when every queued transaction is committed downstream (or raises the
first failure); `write_ddl` runs after a flush (on a TiDB downstream an index DDL may keep
building in the background, see async_ddl.py). A transaction at or before `replicating_ts` may
already be downstream (a replay), so it is written idempotently: updates split, inserts as
REPLACE. If a plain INSERT still meets a duplicate key (a replay the window did not cover), the
worker rolls back and writes the same transactions idempotently.

Transactions come either as RowChanges (`write_rows`) or, from the batch writer's columnar path,
as Arrow columns (`write_arrow`, columnar.py): both give the same conflict keys and SQL text.
Tables that the downstream's foreign keys link to a cascading one come un-netted in binlog order
instead (`write_ordered`) and are written exactly once, with the upstream's cascades re-run
downstream (foreign_keys.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import pyarrow as pa
import pymysql

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.errors import ErrExecDDLFailed, ErrMySQLConnectionError, ErrMySQLTxnError, SparkCDCError
from sparkcdc.model.events import FK_CHECKS_MIXED, DDLEvent, OrderedTransaction, RowChange, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.model.tso import physical_ms
from sparkcdc.schema import ddl_types as T
from sparkcdc.sink.contract import Sink
from sparkcdc.sink.mysql.async_ddl import (
    ASYNC_DDL_GRACE_SECONDS,
    ASYNC_DDL_TYPES,
    SERVER_JOB_POLL_SECONDS,
    AsyncIndexBuilds,
)
from sparkcdc.sink.mysql.causality import ConflictDetector, KeySpace, Ticket
from sparkcdc.sink.mysql.columnar import (
    ArrowRun,
    ArrowTransaction,
    arrow_run_of,
    statement_text,
    transaction_key_sets,
    transactions_of,
)
from sparkcdc.sink.mysql.config import MySQLSinkConfig, parse_mysql_sink_uri
from sparkcdc.sink.mysql.connection import (
    DUPLICATE_ENTRY,
    DownstreamFlavor,
    RetryPolicy,
    apply_tidb_session,
    connect,
    detect_flavor,
)
from sparkcdc.sink.mysql.error_codes import error_number, is_ddl_already_applied, is_retryable
from sparkcdc.upstream.connection import close_quietly
from sparkcdc.sink.mysql.foreign_keys import (
    CREATE_PROGRESS_TABLE,
    PROGRESS_SCHEMA,
    READ_PROGRESS,
    CascadeGroups,
    OrderedWork,
    Progress,
)
from sparkcdc.sink.mysql.sql import RESET_TIMESTAMP, PlanOptions, Statement, ddl_prelude, plan_transaction
from sparkcdc.upstream.schema_reader import read_foreign_keys

log = logging.getLogger(__name__)

# One multi-statement round trip stays well under the default max_allowed_packet (16 MiB).
MULTI_STATEMENT_LIMIT = 4 * 1024 * 1024
# DDLs that scan or rewrite a whole table run without the read-timeout, as TiCDC runs its
# "reorg or partition" DDLs without one (mysql_ddl_sink.go isReorgOrPartitionDDL); MariaDB and
# MySQL rebuild tables for more of them (ALTER TABLE ... ENGINE, charset conversion).
LONG_RUNNING_DDL_TYPES = frozenset({
    T.CREATE_INDEX, T.ADD_PRIMARY_KEY, T.ADD_COLUMN, T.DROP_COLUMN, T.MODIFY_COLUMN, T.MULTI_SCHEMA_CHANGE,
    T.ADD_PARTITION, T.EXCHANGE_PARTITION, T.REORGANIZE_PARTITION, T.ALTER_PARTITIONING, T.REMOVE_PARTITIONING,
    T.ALTER_TABLE, T.MODIFY_TABLE_CHARSET,
})
# TiCDC's check for an index job it did not start (async_ddl.go, TiDB before v8.x's ADMIN SHOW DDL JOBS).
_RUNNING_INDEX_JOB_SQL = (
    "SELECT JOB_ID FROM information_schema.ddl_jobs WHERE DB_NAME = %s AND TABLE_NAME = %s "
    "AND JOB_TYPE LIKE 'add index%%' AND STATE IN ('running', 'queueing') LIMIT 1")


@dataclass(frozen=True)
class TableMeta:
    """What the downstream says about a table: unique keys beyond the handle key, collations."""

    unique_keys: tuple[tuple[str, ...], ...]
    key_space: KeySpace


@dataclass
class _Work:
    ticket: Ticket
    info: Optional[TableInfo]  # None for an OrderedWork, whose changes carry their tables
    rows: Sequence[RowChange] | ArrowTransaction | OrderedWork
    idempotent: bool  # replay window or safe mode
    unique_keys: tuple[tuple[str, ...], ...]


# The one conflict key of every ordered transaction: they run one at a time, in commit order.
_ORDERED_KEY = 0x0F0E0D0C


def _transactions(rows: Sequence[RowChange]) -> list[list[RowChange]]:
    """Consecutive rows with one commit_ts form one upstream transaction."""
    groups: list[list[RowChange]] = []
    for row in rows:
        if groups and groups[-1][0].commit_ts == row.commit_ts:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


class _Writer(threading.Thread):
    """One worker: runs its queue in order, merging small transactions into one downstream txn."""

    def __init__(self, sink: "MySQLSink", number: int):
        super().__init__(name=f"mysql-sink-writer-{number}", daemon=True)
        self.sink = sink
        self.queue: "queue.Queue[Optional[_Work]]" = queue.Queue()
        self.connection = None
        self.sent_bytes = 0  # SQL text committed downstream by this worker (read by MySQLSink.bytes_written)

    def run(self) -> None:
        stopping = False
        while not stopping:
            work = self.queue.get()
            if work is None:
                break
            batch, rows = [work], len(work.rows)
            while rows < self.sink.config.max_txn_row:
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
                rows += len(more.rows)
            try:
                if self.sink.error is None:
                    self._apply(batch)
            except BaseException as exc:  # recorded; flush() raises it in the caller's thread
                self.sink._fail(exc)
            finally:
                tickets = [item.ticket for item in batch]
                # Dropped before the release that may let flush() return: a finished run's
                # columns and SQL pieces must not wait here for this worker's next transaction.
                batch = work = more = None
                for ticket in tickets:
                    self.sink.detector.release(ticket)
        self._close()

    def _close(self) -> None:
        close_quietly(self.connection)
        self.connection = None

    def _plan(self, batch: list[_Work], force_idempotent: bool) -> list[list]:
        sink = self.sink
        chunks: list[list[Statement]] = [[]]
        rows_in_chunk = 0
        for item in batch:
            idempotent = item.idempotent or force_idempotent
            options = sink.plan_options(idempotent)
            if isinstance(item.rows, ArrowTransaction):
                statements = item.rows.plan(options, item.unique_keys)
            elif isinstance(item.rows, OrderedWork):
                statements = item.rows.plan(options)
            else:
                statements = plan_transaction(item.info, item.rows, options, item.unique_keys)
            # An ordered transaction commits whole, with its progress row.
            whole = isinstance(item.rows, OrderedWork)
            for position, statement in enumerate(statements):
                # transaction-atomicity=none may cut a large transaction at statement borders;
                # =table keeps each upstream transaction whole in one downstream transaction.
                if (sink.config.transaction_atomicity == "none" and chunks[-1] and (position == 0 or not whole)
                        and rows_in_chunk + statement.rows > sink.config.max_txn_row):
                    chunks.append([])
                    rows_in_chunk = 0
                chunks[-1].append(statement)
                rows_in_chunk += statement.rows
        return [chunk for chunk in chunks if chunk]

    def _apply(self, batch: list[_Work]) -> None:
        force_idempotent = False
        chunks = self._plan(batch, force_idempotent)
        done = 0
        delays = self.sink.retry.delays()
        while True:
            try:
                if self.connection is None:
                    self.connection = self.sink.open_row_connection()
                while done < len(chunks):
                    self._execute(chunks[done])
                    done += 1
                return
            except pymysql.err.MySQLError as exc:
                self._rollback()
                if any(isinstance(item.rows, OrderedWork) for item in batch):
                    self._close()  # the session may be left with foreign_key_checks on
                if error_number(exc) == DUPLICATE_ENTRY and not force_idempotent:
                    log.warning("duplicate key while applying %d transaction(s): writing them again "
                                "idempotently (a replay of rows already downstream): %s", len(batch), exc)
                    force_idempotent, done = True, 0
                    chunks = self._plan(batch, force_idempotent)
                    continue
                if not is_retryable(exc):
                    raise ErrMySQLTxnError(f"writing to the downstream {self.sink.config.uri} failed: {exc}") from exc
                self._retry_or_raise(delays, exc)
            except (OSError, ConnectionError) as exc:
                self._rollback()
                self._retry_or_raise(delays, exc)

    def _retry_or_raise(self, delays, exc: BaseException) -> None:
        self._close()
        delay = next(delays, None)
        if delay is None:
            raise ErrMySQLConnectionError(
                f"the downstream {self.sink.config.uri} stayed unreachable: {exc}; check that it is up") from exc
        log.warning("downstream error, retrying in %.1fs: %s", delay, exc)
        time.sleep(delay)

    def _rollback(self) -> None:
        if self.connection is None:
            return
        try:
            self.connection.rollback()
        except Exception:
            self._close()

    def _execute(self, statements: list) -> None:
        connection = self.connection
        texts = [statement_text(s, connection) for s in statements]
        with connection.cursor() as cursor:
            size = sum(map(len, texts))
            if self.sink.config.multi_stmt_enable and size < MULTI_STATEMENT_LIMIT:
                cursor.execute("BEGIN;" + ";".join(texts) + ";COMMIT")
                while cursor.nextset():
                    pass
            else:
                connection.begin()
                for text in texts:
                    cursor.execute(text)
                connection.commit()
        self.sent_bytes += size


class _DDLSession:
    """One DDL connection, opened on first use and reopened after a connection error.
    `bounded_reads=False`: no read-timeout, for DDLs that may run for hours."""

    def __init__(self, sink: "MySQLSink", bounded_reads: bool = True):
        self._sink = sink
        self._bounded_reads = bounded_reads
        self._connection = None

    def get(self):
        if self._connection is None:
            self._connection = connect(self._sink.config, self._sink.config.ddl_time_zone,
                                       bounded_reads=self._bounded_reads)
            if self._sink.flavor is DownstreamFlavor.TIDB:
                apply_tidb_session(self._connection, self._sink.config)
        return self._connection

    def close(self) -> None:
        close_quietly(self._connection)
        self._connection = None


class MySQLSink(Sink):
    """The sink for mysql://, mysql+ssl://, tidb://, tidb+ssl:// downstreams.

    `changefeed` names the changefeed whose rows this sink writes; with it, tables linked by
    cascading foreign keys are written in binlog order, exactly once (foreign_keys.py). Without
    it (the consumers, `redo apply`) they are written like any other table.

    `test_only_flavor` (TEST-ONLY) replaces the flavour tidb_version() detected, so tests can run
    the TiDB-only paths (background ADD INDEX, multi-row UPDATE) against MariaDB.
    """

    def __init__(
        self,
        sink_uri: str | MySQLSinkConfig,  # parsed (sink.registry's SinkSpec.settings) or to parse with `config`
        config: ReplicaConfig,
        replicating_ts: int = 0,
        retry: RetryPolicy = RetryPolicy(),
        ddl_retry: RetryPolicy = RetryPolicy(max_elapsed=600.0, max_attempts=20),
        sleep: Callable[[float], None] = time.sleep,
        async_ddl_grace: float = ASYNC_DDL_GRACE_SECONDS,
        index_job_poll_interval: float = SERVER_JOB_POLL_SECONDS,
        test_only_flavor: Optional[DownstreamFlavor] = None,
        changefeed: str = "",
    ):
        self.config: MySQLSinkConfig = (
            sink_uri if isinstance(sink_uri, MySQLSinkConfig) else parse_mysql_sink_uri(sink_uri, config))
        self.changefeed = changefeed
        self._cascade_groups: Optional[CascadeGroups] = None  # read when needed; dropped at each DDL
        self._progress: Optional[Progress] = None
        self._progress_read = False
        self.replicating_ts = replicating_ts
        self.retry = retry
        self.ddl_retry = ddl_retry
        self._sleep = sleep
        self.error: Optional[BaseException] = None
        self._error_lock = threading.Lock()
        self.flavor: Optional[DownstreamFlavor] = None  # set below; sessions opened before read it
        self._ddl_session = _DDLSession(self)
        self._long_ddl_session = _DDLSession(self, bounded_reads=False)
        self._meta: dict[tuple[str, str, int], TableMeta] = {}
        detected = self._detect_flavor()
        self.flavor = test_only_flavor or detected
        if self.flavor is DownstreamFlavor.TIDB:
            self._ddl_session.close()  # reopened with TiDB's session variables
        self._index_builds = AsyncIndexBuilds(
            self._run_background_ddl, grace=async_ddl_grace,
            server_job_running=self._index_job_running if self.flavor is DownstreamFlavor.TIDB else None,
            poll_interval=index_job_poll_interval, sleep=sleep)
        self._index_job_check_failed = False
        self.detector = ConflictDetector(self.config.worker_count)
        self._writers = [_Writer(self, n) for n in range(self.config.worker_count)]
        for writer in self._writers:
            writer.start()
        self._closed = False
        self._snapshot_tables: frozenset[tuple[str, str]] = frozenset()

    def __repr__(self) -> str:
        return f"MySQLSink({self.config.uri!r})"

    @property
    def bytes_written(self) -> int:
        """The SQL text of the row transactions committed downstream (each worker counts its own)."""
        return sum(writer.sent_bytes for writer in self._writers)

    # -- connections -----------------------------------------------------------------------

    def open_row_connection(self):
        connection = connect(self.config, "+00:00", multi_statements=self.config.multi_stmt_enable)
        if self.flavor is DownstreamFlavor.TIDB:
            apply_tidb_session(connection, self.config)
        return connection

    def _with_retry(self, what: str, action: Callable, policy: RetryPolicy, session: Optional[_DDLSession] = None):
        session = session or self._ddl_session
        delays = policy.delays()
        while True:
            try:
                return action(session.get())
            except (pymysql.err.MySQLError, OSError) as exc:
                if not is_retryable(exc):
                    raise
                session.close()
                delay = next(delays, None)
                if delay is None:
                    raise ErrMySQLConnectionError(
                        f"{what}: the downstream {self.config.uri} stayed unreachable: {exc}") from exc
                log.warning("%s: downstream error, retrying in %.1fs: %s", what, delay, exc)
                self._sleep(delay)

    def _detect_flavor(self) -> DownstreamFlavor:
        """The first contact with the downstream: any failure is a coded connection error."""
        try:
            return self._with_retry("connecting to the downstream", detect_flavor, self.retry)
        except pymysql.err.MySQLError as exc:  # not retryable: access denied, unknown database, ...
            raise ErrMySQLConnectionError(
                f"cannot connect to the downstream {self.config.uri}: {exc}; check its address, user, "
                "password and privileges") from exc

    # -- rows ------------------------------------------------------------------------------

    def plan_options(self, idempotent: bool) -> PlanOptions:
        return PlanOptions(
            split_updates=idempotent,
            use_replace=idempotent,
            batch_dml=self.config.batch_dml_enable,
            downstream_tidb=self.flavor is DownstreamFlavor.TIDB,
            max_txn_row=self.config.max_txn_row,
            max_multi_update_row=self.config.max_multi_update_row,
            max_multi_update_row_size=self.config.max_multi_update_row_size,
        )

    def table_meta(self, info: TableInfo) -> TableMeta:
        """Unique keys and collations of the downstream table (cached until the next DDL)."""
        cache_key = (info.schema, info.table, info.version)
        meta = self._meta.get(cache_key)
        if meta is None:
            unique_keys, collations = self._with_retry(
                f"reading {info.schema}.{info.table}", lambda c: _read_table_meta(c, info.schema, info.table),
                self.retry)
            names = set(info.column_names)
            unique_keys = tuple(k for k in unique_keys if set(k) <= names and k != info.handle_key)
            meta = TableMeta(unique_keys, KeySpace.for_table(info, unique_keys, collations))
            self._meta[cache_key] = meta
        return meta

    def write_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> None:
        """Queue whole transactions of one table; conflicting ones keep their order. Rows of a
        keyed table go the columnar way too (columnar.arrow_run_of)."""
        self._raise_if_failed()
        if not rows:
            return
        run = arrow_run_of(table, rows) if table.has_valid_index else None
        if run is not None:
            self._queue_run(table, run)
            return
        meta = self.table_meta(table)
        for transaction in _transactions(rows):
            idempotent = self._idempotent(table, transaction[0].commit_ts)
            keys = meta.key_space.transaction_keys(transaction)
            ticket = self.detector.acquire(keys)
            self._writers[ticket.worker].queue.put(
                _Work(ticket, table, transaction, idempotent, meta.unique_keys))
            self._raise_if_failed()

    accepts_arrow = True  # the batch writer's columnar path: write_arrow

    def write_arrow(self, table: TableInfo, commit_ts: pa.Array, ops: pa.Array, before: pa.Array,
                    after: pa.Array) -> None:
        """`write_rows` for whole transactions as Arrow columns (each already one change per key,
        as netting leaves them): the same keys, order and SQL, without a RowChange per row."""
        self._raise_if_failed()
        if len(ops):
            self._queue_run(table, ArrowRun(table, commit_ts, ops, before, after))

    def _queue_run(self, table: TableInfo, run: ArrowRun) -> None:
        meta = self.table_meta(table)
        for transaction, keys in zip(transactions_of(run), transaction_key_sets(meta.key_space, run)):
            idempotent = self._idempotent(table, run.commit_ts[transaction.low].as_py())
            ticket = self.detector.acquire(keys)
            self._writers[ticket.worker].queue.put(_Work(ticket, table, transaction, idempotent, meta.unique_keys))
            self._raise_if_failed()

    def keeps_binlog_order(self, table: TableInfo) -> bool:
        """Whether `table`'s rows must come through `write_ordered`: the downstream's foreign
        keys link it to a cascading one, and this sink writes a changefeed's rows."""
        return bool(self.changefeed) and self._groups().ordered(table.schema, table.table)

    def _groups(self) -> CascadeGroups:
        if self._cascade_groups is None:
            self._cascade_groups = CascadeGroups(self._with_retry(
                "reading the downstream's foreign keys", read_foreign_keys, self.retry))
        return self._cascade_groups

    def write_ordered(self, transactions: Sequence[OrderedTransaction]) -> None:
        """Queue upstream transactions of `keeps_binlog_order` tables, in commit order: each
        one's changes in binlog order, on one worker after the other, what is already
        downstream skipped (foreign_keys.py)."""
        self._raise_if_failed()
        progress = self._read_progress()
        groups = self._groups()
        for transaction in transactions:
            end = BinlogPosition.parse(transaction.end_position)
            pending = progress.pending(end, transaction.changes) if progress else list(transaction.changes)
            if not pending:
                continue
            if transaction.foreign_key_checks == FK_CHECKS_MIXED:
                log.warning("transaction at %s (commit-ts %d) ran some row events with foreign_key_checks=0 and "
                            "some with 1; applying it with the checks, so the cascades of the unchecked ones run too",
                            transaction.end_position, transaction.commit_ts)
            work = OrderedWork(self.changefeed, transaction.commit_ts, end, transaction.foreign_key_checks,
                               tuple(pending), groups)
            ticket = self.detector.acquire({_ORDERED_KEY})
            self._writers[ticket.worker].queue.put(_Work(ticket, None, work, self.config.safe_mode, ()))
            self._raise_if_failed()

    def _read_progress(self) -> Optional[Progress]:
        """This changefeed's ordered progress downstream (its table created on first use)."""
        if self._progress_read:
            return self._progress

        def read(connection) -> Optional[Progress]:
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE IF NOT EXISTS {PROGRESS_SCHEMA}")
                cursor.execute(CREATE_PROGRESS_TABLE)
                cursor.execute(READ_PROGRESS, (self.changefeed,))
                row = cursor.fetchone()
            return Progress(BinlogPosition(row[0], int(row[1])), int(row[2])) if row else None

        self._progress = self._with_retry("reading the ordered progress", read, self.retry)
        self._progress_read = True
        return self._progress

    def set_snapshot_tables(self, tables: frozenset[tuple[str, str]]) -> None:
        self._snapshot_tables = tables

    def _idempotent(self, table: TableInfo, commit_ts: int) -> bool:
        """Safe mode, a replay of what may be downstream already, or a table being copied."""
        return (self.config.safe_mode or commit_ts <= self.replicating_ts
                or (table.schema, table.table) in self._snapshot_tables)

    def flush(self) -> None:
        """Return once everything written so far is committed downstream."""
        self.detector.wait_idle()
        self._raise_if_failed()

    def write_checkpoint(self, ts: int) -> int:
        """Nothing to write: a MySQL downstream keeps no checkpoint (TiCDC's neither)."""
        return ts

    # -- DDL -------------------------------------------------------------------------------

    def write_ddl(self, ddl: DDLEvent) -> None:
        """Run one DDL after all rows before it; replays of an applied DDL count as done. On TiDB
        an index DDL may return while it still builds; a later DDL on its table waits for it."""
        self.flush()
        self._meta.clear()
        self._cascade_groups = None  # the DDL may add or drop a foreign key
        self._index_builds.wait_before(ddl)
        if self.flavor is DownstreamFlavor.TIDB and ddl.ddl_type in ASYNC_DDL_TYPES:
            self._index_builds.start(ddl)
            return
        long_running = ddl.ddl_type in LONG_RUNNING_DDL_TYPES
        self._execute_ddl(ddl, self._long_ddl_session if long_running else self._ddl_session)

    def _run_background_ddl(self, ddl: DDLEvent) -> None:
        session = _DDLSession(self, bounded_reads=False)  # its own connection; builds may take hours
        try:
            self._execute_ddl(ddl, session)
        finally:
            session.close()

    def _execute_ddl(self, ddl: DDLEvent, session: _DDLSession) -> None:
        prelude = ddl_prelude(ddl.schema, ddl.ddl_type, physical_ms(ddl.commit_ts))

        def execute(connection) -> None:
            with connection.cursor() as cursor:
                for statement in prelude:
                    cursor.execute(statement)
                try:
                    cursor.execute(ddl.query)
                finally:
                    cursor.execute(RESET_TIMESTAMP)

        try:
            self._with_retry(f"DDL at {ddl.commit_ts}", execute, self.ddl_retry, session)
        except pymysql.err.MySQLError as exc:
            if is_ddl_already_applied(exc, ddl.ddl_type):
                log.info("DDL %r already applied downstream (%s); treating it as done", ddl.query, exc)
                return
            raise ErrExecDDLFailed(
                f"DDL {ddl.query!r} at commit-ts {ddl.commit_ts} failed downstream: {exc}; fix the downstream "
                "schema or skip the DDL, then resume the changefeed") from exc
        log.info("DDL at %d applied downstream: %s", ddl.commit_ts, ddl.query)

    def _index_job_running(self, schema: str, table: str) -> bool:
        """TiDB only: whether the downstream runs an index job on the table (maybe one started
        before a restart). A failing check counts as no job, as in TiCDC."""
        try:
            with self._ddl_session.get().cursor() as cursor:
                cursor.execute(_RUNNING_INDEX_JOB_SQL, (schema, table))
                return cursor.fetchone() is not None
        except (pymysql.err.MySQLError, OSError) as exc:
            self._ddl_session.close()
            level = logging.DEBUG if self._index_job_check_failed else logging.WARNING
            self._index_job_check_failed = True
            log.log(level, "cannot check the downstream's running index jobs (%s); assuming none", exc)
            return False

    def running_index_builds(self) -> list[DDLEvent]:
        """Index DDLs this sink handed to the downstream that have not finished yet."""
        return self._index_builds.running()

    # -- lifecycle -------------------------------------------------------------------------

    def _fail(self, exc: BaseException) -> None:
        with self._error_lock:
            if self.error is None:
                self.error = exc
                log.error("MySQL sink failed: %s", exc)

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            if isinstance(self.error, SparkCDCError):
                raise self.error
            raise ErrMySQLTxnError(f"writing to the downstream {self.config.uri} failed: {self.error}") from self.error

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for writer in self._writers:
            writer.queue.put(None)
        for writer in self._writers:
            writer.join(timeout=30)
        # Background index builds are not waited for: the downstream owns them now.
        self._ddl_session.close()
        self._long_ddl_session.close()


def _read_table_meta(connection, schema: str, table: str):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema, table))
        indexes: dict[str, list[Optional[str]]] = {}
        for index_name, column_name in cursor.fetchall():
            indexes.setdefault(index_name, []).append(column_name)
        cursor.execute(
            "SELECT COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table))
        collations = {name: collation for name, collation in cursor.fetchall()}
    # PRIMARY first, then the rest by name; expression indexes (no column name) are skipped.
    ordered = sorted(indexes.items(), key=lambda item: (item[0] != "PRIMARY", item[0]))
    unique_keys = tuple(tuple(columns) for _, columns in ordered if all(columns))
    return unique_keys, collations
