"""Whether a MariaDB downstream can take part in bidirectional replication, checked at changefeed
creation and update (docs/bidirectional-replication.md).

A bdr-mode changefeed writes to the other primary, whose own changefeed sends that primary's
writes back here: its sink must mark everything it writes (connection.mark_bdr_session), and its
user must be able to write every table it replicates, or the two primaries drift apart. Both are
tried with the user's own session, so roles, wildcard grants and column grants count exactly as
the server counts them: the mark is set, then each replicated table that exists downstream gets
a DELETE, an UPDATE and an INSERT that match no row, in a transaction that is rolled back. They
change nothing and log nothing (a statement that changes no row writes no binlog event).
"""

from __future__ import annotations

import logging
from typing import Sequence

import pymysql

from sparkcdc.errors import ErrBDRDownstreamPrivilege, ErrMySQLConnectionError
from sparkcdc.model.events import TableInfo
from sparkcdc.sink.mysql.config import MySQLSinkConfig
from sparkcdc.sink.mysql.connection import connect
from sparkcdc.sink.mysql.error_codes import error_number
from sparkcdc.upstream.connection import close_quietly

log = logging.getLogger(__name__)

_NO_SUCH_TABLE = 1146
# Table- and column-level access denied: the grant the statement needs is missing.
_ACCESS_DENIED = frozenset({1142, 1143})
# The privileges a bdr-mode sink's user needs on every replicated table (REPLACE is INSERT + DELETE).
REQUIRED_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _dry_writes(info: TableInfo) -> list[str]:
    """Writes that need the sink's privileges on the table and change no row."""
    table = f"{_quote(info.schema)}.{_quote(info.table)}"
    column = _quote(next((c.name for c in info.columns if not c.generated), info.columns[0].name))
    return [f"DELETE FROM {table} WHERE FALSE",
            f"UPDATE {table} SET {column} = {column} WHERE FALSE",
            f"INSERT INTO {table} ({column}) SELECT {column} FROM {table} WHERE FALSE"]


def check_bdr_downstream(config: MySQLSinkConfig, tables: Sequence[TableInfo]) -> None:
    """Raise a coded error when the downstream cannot mark the sink's writes (not MariaDB) or its
    user lacks a privilege the sink needs on one of `tables` (those missing downstream are not
    checked: the replicated CREATE TABLE or the user makes them)."""
    try:
        connection = connect(config, "+00:00")  # marks the session: ErrBDRDownstream* if it cannot
    except pymysql.err.MySQLError as exc:
        raise ErrMySQLConnectionError(f"cannot connect to the downstream {config.uri} to check it for bdr-mode: "
                                      f"{exc}; check its address, user and password") from exc
    denied: list[tuple[TableInfo, str]] = []
    missing: list[str] = []
    try:
        with connection.cursor() as cursor:
            for info in tables:
                cursor.execute("BEGIN")
                try:
                    for statement in _dry_writes(info):
                        cursor.execute(statement)
                except pymysql.err.MySQLError as exc:
                    number = error_number(exc)
                    if number == _NO_SUCH_TABLE:
                        missing.append(f"{info.schema}.{info.table}")
                    elif number in _ACCESS_DENIED:
                        denied.append((info, str(exc.args[1])))
                    else:
                        raise
                finally:
                    cursor.execute("ROLLBACK")
    finally:
        close_quietly(connection)
    if missing:
        log.info("bdr-mode check: %d replicated table(s) are not in the downstream %s yet: %s", len(missing),
                 config.uri, ", ".join(missing[:10]))
    if denied:
        shown = ", ".join(f"{info.schema}.{info.table} ({reason})" for info, reason in denied[:5])
        schemas = sorted({info.schema for info, _ in denied})
        grants = "; ".join(f"GRANT {REQUIRED_PRIVILEGES} ON {_quote(schema)}.* TO <user>" for schema in schemas)
        raise ErrBDRDownstreamPrivilege(
            f"the downstream user {config.user!r} of {config.uri} cannot write {len(denied)} replicated table(s): "
            f"{shown}{' ...' if len(denied) > 5 else ''}. A bdr-mode MySQL sink needs "
            f"{REQUIRED_PRIVILEGES} on every replicated table (and CREATE, ALTER, DROP, INDEX for the DDLs of a "
            f"bdr-role = \"primary\" upstream): {grants}")
