"""Syncpoints for MySQL-sink changefeeds (`enable-sync-point`), in TiCDC's `tidb_cdc.syncpoint_v1`.

After a batch (start, end] is fully applied downstream, and before its checkpoint is persisted,
the batch writer asks `due(start, end)`: whether the batch crossed a multiple of
`sync-point-interval` (in the commit-ts's physical time). If so it records a row: the downstream
is then exactly the upstream as of `primary_ts` = end, a consistent cut (every batch is whole
transactions up to a resolved-ts). TiCDC cuts a batch at the interval boundary itself; sparkcdc's
primary_ts is the first batch end at or after the boundary.

Columns are TiCDC's plus one:
- `secondary_ts`: on TiDB `@@tidb_current_ts` (and `tidb_external_ts` is set to it, as TiCDC
  does); on MySQL/MariaDB, which have no snapshot ts, the downstream's clock as a TSO
  (`UNIX_TIMESTAMP(NOW(3))` ms << 18).
- `upstream_position` (sparkcdc's): the upstream binlog `FILE:POS` after the last transaction
  at or before primary_ts, so a MariaDB/MySQL user can tie the snapshot to the binlog.
Rows older than `sync-point-retention` are deleted (checked at each syncpoint, as TiCDC does).
The `tidb_cdc` schema is a system schema for filters and `sparkcdc diff`.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

import pymysql

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.errors import ErrMySQLConnectionError, ErrMySQLTxnError
from sparkcdc.model.tso import compose, physical_ms
from sparkcdc.sink.mysql.config import MySQLSinkConfig, parse_mysql_sink_uri
from sparkcdc.sink.mysql.connection import DownstreamFlavor, connect, detect_flavor, is_retryable
from sparkcdc.upstream.connection import close_quietly

log = logging.getLogger(__name__)

SYNCPOINT_SCHEMA = "tidb_cdc"
SYNCPOINT_TABLE = "syncpoint_v1"
CREATE_SCHEMA = f"CREATE DATABASE IF NOT EXISTS {SYNCPOINT_SCHEMA}"
CREATE_TABLE = f"""CREATE TABLE IF NOT EXISTS {SYNCPOINT_SCHEMA}.{SYNCPOINT_TABLE} (
    ticdc_cluster_id varchar(255),
    changefeed varchar(255),
    primary_ts varchar(18),
    secondary_ts varchar(18),
    created_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    upstream_position varchar(255) NULL,
    INDEX (created_at),
    PRIMARY KEY (changefeed, primary_ts)
)"""
ADD_POSITION_COLUMN = (f"ALTER TABLE {SYNCPOINT_SCHEMA}.{SYNCPOINT_TABLE} "
                       "ADD COLUMN upstream_position varchar(255) NULL")


def crosses_interval(start: int, end: int, interval_seconds: float) -> bool:
    """Whether (start, end] contains a multiple of the interval (physical time of the TSOs)."""
    interval_ms = max(1, int(interval_seconds * 1000))
    return physical_ms(start) // interval_ms < physical_ms(end) // interval_ms


class SyncpointWriter:
    def __init__(self, sink_uri: str | MySQLSinkConfig, config: ReplicaConfig, cluster_id: str, changefeed_id: str,
                 interval_seconds: float, retention_seconds: float,
                 clock: Callable[[], float] = time.monotonic):
        self._config = sink_uri if isinstance(sink_uri, MySQLSinkConfig) else parse_mysql_sink_uri(sink_uri, config)
        self._cluster_id, self._changefeed = cluster_id, changefeed_id
        self.interval_seconds, self._retention = interval_seconds, retention_seconds
        self._clock = clock
        self._last_cleanup = clock()
        self._connection = None
        self._flavor: Optional[DownstreamFlavor] = None
        self._run(self._create_table)

    def due(self, start: int, end: int) -> bool:
        return crosses_interval(start, end, self.interval_seconds)

    def record(self, primary_ts: int, upstream_position: Optional[str]) -> None:
        """Write the syncpoint row (INSERT IGNORE: a replayed batch records nothing twice)."""
        self._run(lambda cursor: self._insert(cursor, primary_ts, upstream_position))
        log.info("syncpoint of changefeed %s at primary_ts %d (upstream %s)", self._changefeed, primary_ts,
                 upstream_position)

    # -- statements ----------------------------------------------------------------------
    def _create_table(self, cursor) -> None:
        cursor.execute(CREATE_SCHEMA)
        cursor.execute(CREATE_TABLE)
        cursor.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                       "AND TABLE_NAME = %s AND COLUMN_NAME = 'upstream_position'",
                       (SYNCPOINT_SCHEMA, SYNCPOINT_TABLE))
        if cursor.fetchone()[0] == 0:  # a table TiCDC created
            cursor.execute(ADD_POSITION_COLUMN)

    def _insert(self, cursor, primary_ts: int, upstream_position: Optional[str]) -> None:
        tidb = self._flavor is DownstreamFlavor.TIDB
        if tidb:
            cursor.execute("SELECT @@tidb_current_ts")
            secondary_ts = str(cursor.fetchone()[0])
        else:
            cursor.execute("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)")
            secondary_ts = str(compose(int(cursor.fetchone()[0])))
        cursor.execute(
            f"INSERT IGNORE INTO {SYNCPOINT_SCHEMA}.{SYNCPOINT_TABLE} "
            "(ticdc_cluster_id, changefeed, primary_ts, secondary_ts, upstream_position) VALUES (%s, %s, %s, %s, %s)",
            (self._cluster_id, self._changefeed, str(primary_ts), secondary_ts, upstream_position))
        if tidb:
            try:
                cursor.execute(f"SET GLOBAL tidb_external_ts = {int(secondary_ts)}")
            except pymysql.err.MySQLError as exc:  # TiDB before v6.4 or no privilege: TiCDC ignores it too
                log.warning("setting tidb_external_ts failed (ignored): %s", exc)
        if self._clock() - self._last_cleanup >= self._retention:
            cursor.execute(
                f"DELETE FROM {SYNCPOINT_SCHEMA}.{SYNCPOINT_TABLE} WHERE ticdc_cluster_id = %s AND changefeed = %s "
                "AND created_at < NOW() - INTERVAL %s SECOND",
                (self._cluster_id, self._changefeed, int(self._retention)))
            self._last_cleanup = self._clock()

    # -- connection ----------------------------------------------------------------------
    def _run(self, action: Callable) -> None:
        for attempt in range(2):  # one reconnect; the changefeed's restart retries beyond that
            try:
                if self._connection is None:
                    self._connection = connect(self._config, "+00:00")
                    self._flavor = detect_flavor(self._connection)
                with self._connection.cursor() as cursor:
                    action(cursor)
                return
            except (pymysql.err.MySQLError, OSError) as exc:
                self.close()
                if attempt == 0 and (isinstance(exc, OSError) or is_retryable(exc)):
                    continue
                if isinstance(exc, OSError) or is_retryable(exc):
                    raise ErrMySQLConnectionError(
                        f"writing a syncpoint to {self._config.uri} failed: {exc}; check that the downstream is up") from exc
                raise ErrMySQLTxnError(
                    f"writing a syncpoint to {self._config.uri} failed: {exc}; the user needs CREATE, INSERT and "
                    f"DELETE on {SYNCPOINT_SCHEMA}.*") from exc

    def close(self) -> None:
        close_quietly(self._connection)
        self._connection = None
