"""Connections to the downstream with TiCDC's session settings (pkg/sink/mysql/db_helper.go),
and which errors are worth a retry.

Row sessions always use time_zone '+00:00': canonical timestamp values are UTC, so the stored
instant is exact (converting to a local zone would be ambiguous at DST changes). The URI's
`time-zone` applies to DDL sessions, where it decides how literals and defaults are read.
"""

from __future__ import annotations

import random
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Optional

import pymysql
from pymysql.constants import CLIENT

from sparkcdc.sink.mysql.config import MySQLSinkConfig

# Server errors that mean "try again": connection lost/refused, server shutting down, too many
# connections, lock wait timeout, deadlock, connection killed.
RETRYABLE_ERROR_CODES = frozenset({
    1040, 1053, 1205, 1213, 1927, 2002, 2003, 2006, 2013, 2014, 2027, 2055, 4031,
})
DUPLICATE_ENTRY = 1062
# Checks the upstream already applied; a value it stored must replay (zero dates, enum 0).
_DROPPED_SQL_MODES = frozenset({"NO_ZERO_IN_DATE", "NO_ZERO_DATE", "STRICT_TRANS_TABLES", "STRICT_ALL_TABLES",
                                "NO_AUTO_VALUE_ON_ZERO"})

# TiCDC's pkg/errorutil IsIgnorableMySQLDDLError, as MySQL/MariaDB error numbers: the DDL's
# effect is already there, so a replayed DDL counts as done.
IGNORABLE_DDL_ERROR_CODES = frozenset({
    1007,  # database exists
    1008,  # database doesn't exist (drop)
    1050,  # table exists
    1051,  # unknown table (drop)
    1060,  # duplicate column name
    1061,  # duplicate key name
    1054,  # unknown column
    1091,  # can't drop field or key; check that it exists
    1176,  # key doesn't exist in table
    1068,  # multiple primary key defined
    1517,  # duplicate partition name
    1507,  # error in list of partitions to drop
    1831,  # duplicate index (MariaDB/MySQL warning-as-error form)
})


def error_code(exc: BaseException) -> Optional[int]:
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def is_retryable(exc: BaseException) -> bool:
    """Connection-class errors: the downstream may come back, so the work is retried."""
    if isinstance(exc, (pymysql.err.InterfaceError, ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError) and not isinstance(exc, pymysql.err.MySQLError):
        return True
    return error_code(exc) in RETRYABLE_ERROR_CODES


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


def connect(config: MySQLSinkConfig, time_zone: Optional[str], multi_statements: bool = False):
    """A session with utf8mb4, READ-COMMITTED, foreign_key_checks=0, and `time_zone` (None keeps
    the server's). sql_mode drops the zero-date checks so values the upstream stored replay."""
    connection = pymysql.connect(
        host=config.host,
        port=config.port,
        user=config.user,
        password=config.password,
        charset="utf8mb4",
        autocommit=True,
        connect_timeout=max(1, min(int(config.dial_timeout), 31536000)),
        read_timeout=max(1, int(config.read_timeout)),
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
    except BaseException:
        connection.close()
        raise
    return connection


def is_tidb(connection) -> bool:
    """TiCDC's check: only TiDB has tidb_version()."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT tidb_version()")
            cursor.fetchall()
        return True
    except pymysql.err.MySQLError as exc:
        if is_retryable(exc):
            raise
        return False


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
