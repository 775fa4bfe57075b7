"""Connections to the downstream with TiCDC's session settings (pkg/sink/mysql/db_helper.go),
and how the downstream's flavour is detected. Which errors are worth a retry lives in error_codes.py.

In bdr-mode every session is marked before it writes anything (`mark_bdr_session`), as TiCDC sets
tidb_cdc_write_source: MariaDB flags each binlog event of a session with @@skip_replication, and
the downstream's own capture (the changefeed of the other direction) drops the flagged
transactions, so nothing this sink writes is sent back (docs/bidirectional-replication.md).

Row sessions always use time_zone '+00:00': canonical timestamp values are UTC, so the stored
instant is exact (converting to a local zone would be ambiguous at DST changes). The URI's
`time-zone` applies to DDL sessions, where it decides how literals and defaults are read.
"""

from __future__ import annotations

import random
import ssl
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional

import pymysql
from pymysql.constants import CLIENT

from sparkcdc.sink.mysql.config import MySQLSinkConfig
from sparkcdc.errors import ErrBDRDownstreamPrivilege, ErrBDRDownstreamUnsupported
from sparkcdc.sink.mysql.error_codes import error_number, is_retryable

DUPLICATE_ENTRY = 1062
# Checks the upstream already applied; a value it stored must replay (zero dates, enum 0).
_DROPPED_SQL_MODES = frozenset({"NO_ZERO_IN_DATE", "NO_ZERO_DATE", "STRICT_TRANS_TABLES", "STRICT_ALL_TABLES",
                                "NO_AUTO_VALUE_ON_ZERO"})


def _ssl_context(config: MySQLSinkConfig) -> Optional[ssl.SSLContext]:
    if not config.tls:
        return None
    if config.ssl_ca:
        context = ssl.create_default_context(cafile=config.ssl_ca)
        context.check_hostname = False
    else:  # mysql+ssl:// without a CA: encrypt, but there is nothing to verify against
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.ssl_cert:
        context.load_cert_chain(config.ssl_cert, config.ssl_key)
    return context


def connect(config: MySQLSinkConfig, time_zone: Optional[str], multi_statements: bool = False,
            bounded_reads: bool = True):
    """A session with utf8mb4, READ-COMMITTED, foreign_key_checks=0, and `time_zone` (None keeps
    the server's). sql_mode drops the zero-date checks so values the upstream stored replay.
    `bounded_reads=False` waits for a reply without the URI's read-timeout (long DDLs)."""
    connection = pymysql.connect(
        host=config.host,
        port=config.port,
        user=config.user,
        password=config.password,
        charset="utf8mb4",
        autocommit=True,
        connect_timeout=max(1, min(int(config.dial_timeout), 31536000)),
        read_timeout=max(1, int(config.read_timeout)) if bounded_reads else None,
        write_timeout=max(1, int(config.write_timeout)),
        ssl=_ssl_context(config),
        client_flag=CLIENT.MULTI_STATEMENTS if multi_statements else 0,
    )
    try:
        with connection.cursor() as cursor:
            try:
                cursor.execute("SET SESSION transaction_isolation = 'READ-COMMITTED'")
            except pymysql.err.MySQLError:
                cursor.execute("SET SESSION tx_isolation = 'READ-COMMITTED'")
            cursor.execute("SET SESSION foreign_key_checks = 0")
            cursor.execute("SELECT @@SESSION.sql_mode")
            modes = [m for m in (cursor.fetchone()[0] or "").split(",") if m and m not in _DROPPED_SQL_MODES]
            cursor.execute("SET SESSION sql_mode = %s", (",".join(modes + ["NO_AUTO_VALUE_ON_ZERO"]),))
            if time_zone is not None:
                cursor.execute("SET SESSION time_zone = %s", (time_zone,))
            if config.bdr_mode:
                mark_bdr_session(cursor, config)
    except BaseException:
        connection.close()
        raise
    return connection


# MariaDB's session flag that sets LOG_EVENT_SKIP_REPLICATION_F on every event the session logs.
# It needs no privilege on MariaDB 10.5.2 and later (older servers ask for SUPER). Replicas apply
# flagged events as any other (replicate_events_marked_for_skip=REPLICATE, the default) and keep the
# flag when they log them (log_slave_updates); the GTID and server_id stay the server's own.
BDR_MARK = "SET SESSION skip_replication = 1"
_UNKNOWN_SYSTEM_VARIABLE = 1193
_SPECIFIC_ACCESS_DENIED = 1227


def mark_bdr_session(cursor, config: MySQLSinkConfig) -> None:
    """bdr-mode: flag everything this session writes; a downstream that cannot is a coded error."""
    try:
        cursor.execute(BDR_MARK)
    except pymysql.err.MySQLError as exc:
        number = error_number(exc)
        if number == _UNKNOWN_SYSTEM_VARIABLE:
            raise ErrBDRDownstreamUnsupported(
                f"bdr-mode marks what the sink writes with MariaDB's @@skip_replication, which the downstream "
                f"{config.uri} does not have ({exc}): bidirectional replication needs MariaDB on both sides; "
                "remove bdr-mode from the changefeed config") from exc
        if number == _SPECIFIC_ACCESS_DENIED:
            raise ErrBDRDownstreamPrivilege(
                f"the downstream user {config.user!r} of {config.uri} may not set @@skip_replication ({exc}); "
                "MariaDB before 10.5.2 asks for SUPER: grant it, or upgrade the downstream") from exc
        raise


class DownstreamFlavor(Enum):
    """What kind of server the sink writes to; decided once per sink."""

    MYSQL = "mysql"  # MySQL, MariaDB and other MySQL-compatible servers
    TIDB = "tidb"  # multi-row CASE-WHEN UPDATE, TiDB session variables, background ADD INDEX


def detect_flavor(connection) -> DownstreamFlavor:
    """TiCDC's check: only TiDB has tidb_version()."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT tidb_version()")
            cursor.fetchall()
        return DownstreamFlavor.TIDB
    except pymysql.err.MySQLError as exc:
        if is_retryable(exc):
            raise
        return DownstreamFlavor.MYSQL


def apply_tidb_session(connection, config: MySQLSinkConfig) -> None:
    with connection.cursor() as cursor:
        for statement in (
            f"SET SESSION tidb_txn_mode = '{config.tidb_txn_mode}'",
            "SET SESSION allow_auto_random_explicit_insert = 1",
            "SET SESSION tidb_placement_mode = 'ignore'",
        ):
            try:
                cursor.execute(statement)
            except pymysql.err.MySQLError as exc:
                if is_retryable(exc):
                    raise


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter (TiCDC: 500ms to 60s) for at most `max_elapsed` seconds."""

    base_delay: float = 0.5
    max_delay: float = 60.0
    max_elapsed: float = 120.0
    max_attempts: int = 0  # 0: bounded by time only

    def delays(self, clock: Callable[[], float] = time.monotonic):
        """Yield the wait before each retry; stop when the budget is spent."""
        start, attempt = clock(), 0
        while True:
            attempt += 1
            if self.max_attempts and attempt >= self.max_attempts:
                return
            delay = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
            delay = delay * (0.5 + random.random() / 2)
            if clock() - start + delay > self.max_elapsed:
                return
            yield delay
