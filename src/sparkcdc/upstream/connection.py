"""How to reach the upstream MySQL/MariaDB, the few places where the two flavors differ, and
what a failed conversation with it means for a user (`upstream_error`, `binlog_purged_error`)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import pymysql
from pymysql.constants import CR

from sparkcdc.errors import (ErrBinlogPurged, ErrUpstreamBinlogConfig, ErrUpstreamDiverged, ErrUpstreamUnreachable,
                             ErrUpstreamURIInvalid, SparkCDCError)
from sparkcdc.model.position import BinlogPosition

MASK = "xxxxx"


@dataclass(frozen=True)
class UpstreamConfig:
    """Host, port and credentials of the upstream. Plain data, so it pickles to Spark executors.

    A URI may name several servers of one replication topology (`mysql://u@h1:3306,h2:3306/`,
    docs/failover.md): `host`/`port` is the first, `others` the rest, all with the same
    credentials. `connect()` always talks to `host:port`; `servers()` gives one config per server
    (the puller picks the primary among them, upstream/switchover.py)."""

    host: str
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    others: tuple[tuple[str, int], ...] = ()  # the other servers named by the URI, in its order

    @classmethod
    def from_uri(cls, uri: str) -> "UpstreamConfig":
        """Parse `mysql://user:pass@host:port/` (also `mariadb://`, and several `host:port`
        separated by commas)."""
        try:
            parts = urlsplit(uri.strip())
            userinfo, at, hostlist = parts.netloc.rpartition("@")
            hosts = [_host_port(item) for item in hostlist.split(",")] if hostlist else []
        except ValueError as e:
            raise ErrUpstreamURIInvalid(f"upstream URI {_mask(uri)!r} is malformed ({e}); use mysql://user:password@host:port/")
        if parts.scheme not in ("mysql", "mariadb"):
            raise ErrUpstreamURIInvalid(
                f"upstream URI scheme {parts.scheme!r} is not supported; use mysql://user:password@host:port/"
            )
        if not hosts or any(not host for host, _ in hosts):
            raise ErrUpstreamURIInvalid(
                f"upstream URI {_mask(uri)!r} has no host; use mysql://user:password@host:port/ "
                "(or host1:port1,host2:port2 for a primary and its replicas)"
            )
        if len(set(hosts)) != len(hosts):
            raise ErrUpstreamURIInvalid(f"upstream URI {_mask(uri)!r} names a server twice")
        user, _, password = userinfo.partition(":") if at else ("", "", "")
        (host, port), others = hosts[0], tuple(hosts[1:])
        return cls(host=host, port=port, user=unquote(user) if user else "root",
                   password=unquote(password) if password else "", others=others)

    def connect(self, sock: Optional[socket.socket] = None, **kwargs: Any) -> pymysql.connections.Connection:
        """A new pymysql connection to `host:port` (utf8mb4, autocommit unless overridden), on
        `sock` (from `connected_socket`) when given, so that its file descriptor is known."""
        settings = {"charset": "utf8mb4", "autocommit": True, "connect_timeout": 10, **kwargs}
        try:
            if sock is None:
                return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                       **settings)
            conn = pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                   defer_connect=True, **settings)
            conn.connect(sock)
            return conn
        except pymysql.err.OperationalError as e:
            raise ErrUpstreamUnreachable(
                f"cannot connect to upstream {self.masked_uri()}: {e.args[-1] if e.args else e}; "
                "check the host, port and credentials and that the server is running"
            ) from e

    def connect_any(self, **kwargs: Any) -> pymysql.connections.Connection:
        """A connection to the first of `servers()` that answers (any server of the topology
        will do: e.g. to check a user's password)."""
        error: Optional[ErrUpstreamUnreachable] = None
        for server in self.servers():
            try:
                return server.connect(**kwargs)
            except ErrUpstreamUnreachable as exc:
                error = error or exc
        assert error is not None
        raise error

    def servers(self) -> list["UpstreamConfig"]:
        """One single-server config per server the URI names, in its order."""
        return [self.at(host, port) for host, port in ((self.host, self.port), *self.others)]

    def at(self, host: str, port: int) -> "UpstreamConfig":
        """The single server `host:port` with these credentials."""
        return UpstreamConfig(host, port, self.user, self.password)

    @property
    def address(self) -> str:
        return _address(self.host, self.port)

    def connection_settings(self) -> dict[str, Any]:
        """Keyword arguments for pymysqlreplication's `connection_settings`."""
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password, "charset": "utf8mb4"}

    def masked_uri(self) -> str:
        auth = self.user + (f":{MASK}" if self.password else "")
        hosts = ",".join(_address(host, port) for host, port in ((self.host, self.port), *self.others))
        return f"mysql://{auth}@{hosts}/"


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _host_port(item: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` -> (host, port); port 3306 by default."""
    item = item.strip()
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest
    else:
        host, _, port = item.partition(":")
    if port and not port.isdigit():
        raise ValueError(f"port {port!r} of {item!r} is not a number")
    number = int(port) if port else 3306
    if not 0 < number < 65536:
        raise ValueError(f"port {number} is out of range")
    return unquote(host).lower(), number


# The server's answer to a binlog dump from a position it no longer has (ER_MASTER_FATAL_ERROR_READING_BINLOG).
ER_BINLOG_FATAL = 1236
# MariaDB's answers to a GTID dump from a GTID its binlog never had (as opposed to a purged one).
_DIVERGED_ANSWERS = ("which is not in the master's binlog", "is missing the GTID")
# Another replication connection registered with this one's server_id, and the server dropped this one.
ER_SLAVE_SAME_ID = 4052
# What a lost or refused connection looks like from pymysql, mysql-replication and the native framer.
_CONNECTION_ERRORS = (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError)


def lost_connection(exc: BaseException) -> bool:
    """A refused or lost connection, which a restarted upstream fixes (not a server's answer to
    the request, such as a purged binlog)."""
    return isinstance(exc, _CONNECTION_ERRORS) and _error_number(exc) != ER_BINLOG_FATAL


def _error_number(exc: BaseException) -> Optional[int]:
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def upstream_error(cfg: UpstreamConfig, exc: BaseException, doing: str,
                   needed: Optional[BinlogPosition] = None, purged_fix: str = "") -> Optional[SparkCDCError]:
    """The error a user sees for `exc`, met while `doing` (e.g. "reading the binlog at X") against
    the upstream: ErrBinlogPurged for a dump from a purged position (`needed`, with `purged_fix`),
    ErrUpstreamUnreachable for a refused or lost connection. None when `exc` is neither."""
    if isinstance(exc, SparkCDCError):
        return exc
    if _error_number(exc) == ER_BINLOG_FATAL and any(text in str(exc.args[-1]) for text in _DIVERGED_ANSWERS):
        return ErrUpstreamDiverged(
            f"{doing}: upstream {cfg.masked_uri()} does not have the GTID the dump started from (the server says: "
            f"{exc.args[-1]}): its history diverged from the one this server's index followed. Recreate the "
            "changefeeds from a snapshot of it (`[snapshot] mode = \"initial\"`), or bring back the server that has "
            "those transactions (docs/failover.md)")
    if _error_number(exc) == ER_BINLOG_FATAL:
        return binlog_purged_error(cfg, needed, doing, str(exc.args[-1]), purged_fix)
    if not lost_connection(exc):
        return None
    # A MySQL error keeps its number in the text: the failure policy reads it (access denied is no outage).
    detail = str(exc) if isinstance(exc, pymysql.err.MySQLError) else f"{type(exc).__name__}: {exc}"
    if _error_number(exc) == ER_SLAVE_SAME_ID:
        return ErrUpstreamUnreachable(
            f"{doing}: upstream {cfg.masked_uri()} dropped the connection because another replication client "
            f"registered with the same server_id ({detail}); two sparkcdc servers on one upstream need "
            "different data dirs (their server ids derive from it), and no replica may use a sparkcdc id")
    return ErrUpstreamUnreachable(
        f"{doing}: the connection to upstream {cfg.masked_uri()} failed ({detail}); check that the upstream "
        "server is running and reachable: the changefeed goes on by itself once it is back")


def close_quietly(connection) -> None:
    """Close a connection (or a cursor) that may already be broken: closing is best effort, and
    after a lost connection pymysql's own close() raises, which would hide the error that broke it."""
    if connection is None:
        return
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - a dead socket raises whatever it likes
        pass


def reported(items: Iterator, cfg: UpstreamConfig, doing: str, needed: Optional[BinlogPosition] = None) -> Iterator:
    """`items`, with a lost upstream connection (or a purged binlog) raised as the coded error a
    user sees (`upstream_error`): for reads in Spark tasks, where only our own error line survives
    the trip through Spark to the changefeed's state, and a bare `OSError` of the native reader
    would read as a failure no retry fixes."""
    try:
        yield from items
    except Exception as exc:
        error = upstream_error(cfg, exc, doing, needed)
        if error is None or error is exc:
            raise
        raise error from exc


def binlog_purged_error(cfg: UpstreamConfig, needed: Optional[BinlogPosition], doing: str, server_says: str,
                        fix: str = "") -> ErrBinlogPurged:
    """ErrBinlogPurged naming what is gone, the oldest binlog position the upstream still has and
    the fix: `fix`, or for a changefeed moving its checkpoint (or its start) to that position."""
    oldest, resume_at = "", ""
    try:
        conn = cfg.connect(connect_timeout=5)
        try:
            first_file, gtids, first_txn = oldest_binlog(conn)
        finally:
            conn.close()
        oldest = f"; the oldest binlog it still has begins at {first_file}:4" + (f" (after GTIDs {gtids})" if gtids else "")
        resume_at = gtids or (str(first_txn) if first_txn else "")
    except (SparkCDCError, pymysql.err.MySQLError) as exc:
        oldest = f"; could not read its oldest binlog ({exc})"
    if not fix:
        at = resume_at or "the oldest position left (a GTID, FILE:POS or TSO)"
        fix = (f"Move the changefeed's checkpoint there with `sparkcdc cli changefeed resume --overwrite-checkpoint-ts "
               f"{at}`, or recreate it with `--start-ts {at}`, after loading the changes in between downstream "
               "(e.g. from a dump of the upstream; a snapshot is not supported yet).")
    what = f"the binlog from {needed}" if needed is not None else "the binlog"
    return ErrBinlogPurged(
        f"{doing}: {what} is no longer on upstream {cfg.masked_uri()} (the server says: {server_says}){oldest}. "
        f"The changes in between cannot be replicated. {fix} To avoid it, keep binlogs longer than changefeeds "
        "may lag or stay paused (binlog_expire_logs_seconds / expire_logs_days)")


def oldest_binlog(conn) -> tuple[str, str, Optional[BinlogPosition]]:
    """(the oldest binlog file the server has, the GTID list at its start ("" if none), where its
    first transaction begins (None if it has none yet))."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        rows = cur.fetchall()
        if not rows:
            raise ErrUpstreamBinlogConfig("the upstream lists no binary logs (log_bin=OFF?); set log-bin and restart")
        first_file = rows[0][0]
        cur.execute(f"SHOW BINLOG EVENTS IN '{first_file}' LIMIT 8")
        gtids, first_txn = "", None
        for row in cur.fetchall():  # Log_name, Pos, Event_type, Server_id, End_log_pos, Info
            if row[2] in ("Gtid_list", "Previous_gtids"):
                gtids = str(row[5]).strip("[] ")
            elif row[2] == "Gtid" and first_txn is None:
                first_txn = BinlogPosition(first_file, int(row[1]))
    return first_file, gtids, first_txn


def check_binlog_retained(cfg: UpstreamConfig, needed: BinlogPosition, doing: str, fix: str = "") -> None:
    """Raise ErrBinlogPurged when the upstream no longer has the binlog file of `needed`."""
    conn = cfg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [row[0] for row in cur.fetchall()]
    except pymysql.err.MySQLError as exc:
        raise upstream_error(cfg, exc, doing) or ErrUpstreamUnreachable(
            f"{doing}: SHOW BINARY LOGS failed on upstream {cfg.masked_uri()}: {exc}") from exc
    finally:
        conn.close()
    if files and needed.file not in files and needed.sequence < BinlogPosition(files[0], 4).sequence:
        raise binlog_purged_error(cfg, needed, doing, f"{needed.file} is not in SHOW BINARY LOGS", fix)


def with_password(uri: str, password: str) -> str:
    """`uri` with `password` (percent-encoded) in its user info, in place of any it had."""
    parts = urlsplit(uri.strip())
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0] if at else quote("root", safe="")
    netloc = f"{user}:{quote(password, safe='')}@{hostport}" if password else f"{user}@{hostport}"
    return urlunsplit(parts._replace(netloc=netloc))


def split_password(uri: str) -> tuple[str, str]:
    """(`uri` without the password in its user info, that password), e.g. to pass the two apart."""
    parts = urlsplit(uri.strip())
    return (with_password(uri, "") if parts.password else uri), unquote(parts.password or "")


def _mask(uri: str) -> str:
    try:
        parts = urlsplit(uri)
        if parts.password:
            return uri.replace(f":{parts.password}@", f":{MASK}@", 1)
    except ValueError:
        pass
    return uri


@dataclass(frozen=True)
class Flavor:
    """What differs between MariaDB and MySQL for us. Add a difference here, not at call sites."""

    name: str  # "mariadb" | "mysql"
    compression_variable: str  # binlog compression that mysql-replication cannot decode
    monitor_privilege: str  # the privilege that allows SHOW MASTER/BINARY LOG STATUS
    status_statements: tuple[str, ...]  # tried in order to read the binlog end
    replica_status_statements: tuple[str, ...]  # tried in order to list its replication connections
    log_replica_updates: str  # the variable that makes a replica log what it applies in its own binlog
    gtid_state_variable: str  # every GTID in the server's binlog (MariaDB: the last per domain and server)


MARIADB = Flavor("mariadb", "log_bin_compress", "BINLOG MONITOR", ("SHOW MASTER STATUS", "SHOW BINLOG STATUS"),
                 ("SHOW ALL SLAVES STATUS",), "log_slave_updates", "gtid_binlog_state")
MYSQL = Flavor("mysql", "binlog_transaction_compression", "REPLICATION CLIENT", ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"),
               ("SHOW REPLICA STATUS", "SHOW SLAVE STATUS"), "log_replica_updates", "gtid_executed")


def detect_flavor(conn) -> Flavor:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = cur.fetchone()[0]
    return MARIADB if "mariadb" in version.lower() else MYSQL


def binlog_end(conn, flavor: Flavor | None = None) -> BinlogPosition:
    """The current end of the binlog (where the next transaction will be written)."""
    return binlog_end_and_gtids(conn, flavor)[0]


def binlog_end_and_gtids(conn, flavor: Flavor | None = None) -> tuple[BinlogPosition, Optional[str]]:
    """The current end of the binlog and the GTID state there (MariaDB: BINLOG_GTID_POS of it;
    MySQL: the status' Executed_Gtid_Set, read with it); None when the server cannot say."""
    flavor = flavor or detect_flavor(conn)
    last_error: Exception | None = None
    for statement in flavor.status_statements:
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                row = cur.fetchone()
        except pymysql.err.MySQLError as e:
            last_error = e
            continue
        if row is None:
            raise ErrUpstreamBinlogConfig("binary log is disabled (log_bin=OFF); set log-bin in the server config and restart")
        position = BinlogPosition(row[0], int(row[1]))
        if flavor.name == "mysql":
            return position, (str(row[4]).replace("\n", "") if len(row) > 4 and row[4] is not None else None)
        return position, binlog_gtid_pos(conn, position)
    raise ErrUpstreamUnreachable(f"cannot read the binlog position: {last_error}")


def binlog_gtid_pos(conn, position: BinlogPosition) -> Optional[str]:
    """MariaDB's GTID position at a binlog coordinate of this server (BINLOG_GTID_POS): the last
    GTID of each domain before it. None where the server cannot say (MySQL, a purged file)."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
            row = cur.fetchone()
    except pymysql.err.MySQLError:
        return None
    return None if row is None or row[0] is None else str(row[0])


def server_identity(conn) -> tuple[int, Optional[str]]:
    """(@@server_id, @@server_uuid or None): which server of a topology this is (MariaDB has no uuid)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@server_id")
        server_id = int(cur.fetchone()[0])
        try:
            cur.execute("SELECT @@server_uuid")
            uuid = cur.fetchone()[0]
        except pymysql.err.MySQLError:
            uuid = None
    return server_id, (str(uuid).lower() if uuid else None)


CONNECT_TIMEOUT_SECONDS = 10  # pymysql's default connect_timeout


def connected_socket(upstream: UpstreamConfig) -> socket.socket:
    """A TCP connection to the upstream set up as pymysql sets up its own, with its error (2003,
    a connection error the changefeed retries) when the upstream cannot be reached."""
    try:
        sock = socket.create_connection((upstream.host, upstream.port), CONNECT_TIMEOUT_SECONDS)
    except OSError as exc:
        raise pymysql.err.OperationalError(
            CR.CR_CONN_HOST_ERROR, f"Can't connect to MySQL server on {upstream.host!r} ({exc})") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock
