"""The one table of MySQL/MariaDB/TiDB error numbers the sink and the changefeed runner act on.

Each number has a name and a kind that says what to do about it:
- CONNECTION: the downstream may come back or the conflict may pass; retry with backoff
  (TiCDC: dm/pkg/retry IsConnectionError, tidb dbutil.IsRetryableError).
- CONFIGURATION: retrying cannot help; the user must fix the address, user, password,
  privileges or TLS settings.
- DDL_ALREADY_APPLIED: a replayed DDL whose effect is already downstream counts as done
  (TiCDC: pkg/errorutil IsIgnorableMySQLDDLError).
- DDL_TARGET_GONE: the object is already gone; done only for a DDL that drops or empties it.

Numbers come from the server's error packet, so the classification does not depend on the
message language or wording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Optional

import pymysql

from sparkcdc.schema import ddl_types as T


class ErrorKind(Enum):
    CONNECTION = "connection"
    CONFIGURATION = "configuration"
    DDL_ALREADY_APPLIED = "ddl-already-applied"
    DDL_TARGET_GONE = "ddl-target-gone"


@dataclass(frozen=True)
class MySQLErrorCode:
    number: int
    name: str
    kind: ErrorKind


_C, _F, _A, _G = ErrorKind.CONNECTION, ErrorKind.CONFIGURATION, ErrorKind.DDL_ALREADY_APPLIED, ErrorKind.DDL_TARGET_GONE

MYSQL_ERROR_CODES: Mapping[int, MySQLErrorCode] = {code.number: code for code in (
    # Server errors: the connection or the server is going away, or a conflict that passes.
    MySQLErrorCode(1040, "ER_CON_COUNT_ERROR", _C),  # too many connections
    MySQLErrorCode(1053, "ER_SERVER_SHUTDOWN", _C),
    MySQLErrorCode(1152, "ER_ABORTING_CONNECTION", _C),
    MySQLErrorCode(1154, "ER_NET_READ_ERROR_FROM_PIPE", _C),
    MySQLErrorCode(1156, "ER_NET_PACKETS_OUT_OF_ORDER", _C),
    MySQLErrorCode(1158, "ER_NET_READ_ERROR", _C),
    MySQLErrorCode(1159, "ER_NET_READ_INTERRUPTED", _C),
    MySQLErrorCode(1160, "ER_NET_ERROR_ON_WRITE", _C),
    MySQLErrorCode(1161, "ER_NET_WRITE_INTERRUPTED", _C),
    MySQLErrorCode(1184, "ER_NEW_ABORTING_CONNECTION", _C),
    MySQLErrorCode(1205, "ER_LOCK_WAIT_TIMEOUT", _C),
    MySQLErrorCode(1213, "ER_LOCK_DEADLOCK", _C),
    MySQLErrorCode(1927, "ER_CONNECTION_KILLED", _C),  # MariaDB
    MySQLErrorCode(4031, "ER_CLIENT_INTERACTION_TIMEOUT", _C),  # MySQL 8.0.24+
    # Client errors (pymysql raises these numbers for socket failures).
    MySQLErrorCode(2002, "CR_CONNECTION_ERROR", _C),
    MySQLErrorCode(2003, "CR_CONN_HOST_ERROR", _C),
    MySQLErrorCode(2006, "CR_SERVER_GONE_ERROR", _C),
    MySQLErrorCode(2013, "CR_SERVER_LOST", _C),
    MySQLErrorCode(2014, "CR_COMMANDS_OUT_OF_SYNC", _C),  # a half-read reply: a fresh connection fixes it
    MySQLErrorCode(2027, "CR_MALFORMED_PACKET", _C),
    MySQLErrorCode(2055, "CR_SERVER_LOST_EXTENDED", _C),
    # TiDB's retryable errors (tidb pkg/util/dbutil IsRetryableError).
    MySQLErrorCode(8005, "ErrWriteConflictInTiDB", _C),
    MySQLErrorCode(8022, "ErrTxnRetryable", _C),
    MySQLErrorCode(8027, "ErrInfoSchemaExpired", _C),
    MySQLErrorCode(8028, "ErrInfoSchemaChanged", _C),
    MySQLErrorCode(8245, "ErrColumnInChange", _C),
    MySQLErrorCode(9001, "ErrPDServerTimeout", _C),
    MySQLErrorCode(9003, "ErrTiKVServerBusy", _C),
    MySQLErrorCode(9004, "ErrResolveLockTimeout", _C),
    MySQLErrorCode(9007, "ErrWriteConflict", _C),
    # Retrying cannot fix these.
    MySQLErrorCode(1044, "ER_DBACCESS_DENIED_ERROR", _F),
    MySQLErrorCode(1045, "ER_ACCESS_DENIED_ERROR", _F),
    MySQLErrorCode(1049, "ER_BAD_DB_ERROR", _F),
    MySQLErrorCode(1251, "ER_NOT_SUPPORTED_AUTH_MODE", _F),
    MySQLErrorCode(2026, "CR_SSL_CONNECTION_ERROR", _F),
    # A replayed DDL meets its own effect.
    MySQLErrorCode(1007, "ER_DB_CREATE_EXISTS", _A),
    MySQLErrorCode(1008, "ER_DB_DROP_EXISTS", _A),
    MySQLErrorCode(1050, "ER_TABLE_EXISTS_ERROR", _A),
    MySQLErrorCode(1051, "ER_BAD_TABLE_ERROR", _A),  # unknown table (DROP TABLE)
    MySQLErrorCode(1054, "ER_BAD_FIELD_ERROR", _A),  # unknown column (TiCDC: ErrColumnNotExists)
    MySQLErrorCode(1060, "ER_DUP_FIELDNAME", _A),
    MySQLErrorCode(1061, "ER_DUP_KEYNAME", _A),
    MySQLErrorCode(1068, "ER_MULTIPLE_PRI_KEY", _A),
    MySQLErrorCode(1091, "ER_CANT_DROP_FIELD_OR_KEY", _A),
    MySQLErrorCode(1176, "ER_KEY_DOES_NOT_EXITS", _A),
    MySQLErrorCode(1507, "ER_DROP_PARTITION_NON_EXISTENT", _A),
    MySQLErrorCode(1517, "ER_SAME_NAME_PARTITION", _A),
    MySQLErrorCode(1826, "ER_FK_DUP_NAME", _A),
    MySQLErrorCode(1831, "ER_DUP_INDEX", _A),
    MySQLErrorCode(1146, "ER_NO_SUCH_TABLE", _G),
)}

# DDLs for which "the table is gone" means "already done": they drop or empty it, or a part of it.
_REMOVING_DDL_TYPES = frozenset({
    T.DROP_TABLE, T.DROP_VIEW, T.DROP_INDEX, T.DROP_PRIMARY_KEY, T.DROP_COLUMN, T.DROP_PARTITION,
    T.DROP_FOREIGN_KEY, T.DROP_CHECK_CONSTRAINT, T.TRUNCATE_TABLE, T.TRUNCATE_PARTITION,
})
# pymysql renders an error as "(number, 'message')"; find the numbers again in a message text.
_NUMBER_IN_TEXT = re.compile(r"\((\d{4}),\s")


def error_number(exc: BaseException) -> Optional[int]:
    """The server's (or client library's) error number of a pymysql error, else None."""
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def kind_of(number: Optional[int]) -> Optional[ErrorKind]:
    code = MYSQL_ERROR_CODES.get(number) if number is not None else None
    return code.kind if code is not None else None


def is_retryable(exc: BaseException) -> bool:
    """Connection-class errors: the downstream may come back, so the work is retried."""
    if isinstance(exc, (pymysql.err.InterfaceError, ConnectionError, TimeoutError)):
        return True  # InterfaceError: pymysql's "the connection is already closed"
    if isinstance(exc, OSError) and not isinstance(exc, pymysql.err.MySQLError):
        return True
    return kind_of(error_number(exc)) is ErrorKind.CONNECTION


def is_ddl_already_applied(exc: BaseException, ddl_type: str) -> bool:
    """Whether a DDL failed only because its effect is already downstream (a replay)."""
    kind = kind_of(error_number(exc))
    if kind is ErrorKind.DDL_TARGET_GONE:
        return ddl_type in _REMOVING_DDL_TYPES
    return kind is ErrorKind.DDL_ALREADY_APPLIED


def error_numbers_in(message: str) -> list[int]:
    """The MySQL error numbers quoted in an error message, in order (for errors that crossed Spark as text)."""
    return [int(number) for number in _NUMBER_IN_TEXT.findall(message)]


def is_retryable_message(message: str) -> bool:
    """A failure message quotes a connection-class error and no configuration error."""
    kinds = [kind_of(number) for number in error_numbers_in(message)]
    return ErrorKind.CONNECTION in kinds and ErrorKind.CONFIGURATION not in kinds


def is_configuration_message(message: str) -> bool:
    """A failure message quotes an error that no retry can fix (access denied, unknown database, TLS)."""
    return any(kind_of(number) is ErrorKind.CONFIGURATION for number in error_numbers_in(message))
