"""How to reach the upstream MySQL/MariaDB, and the few places where the two flavors differ."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql

from sparkcdc.errors import ErrUpstreamBinlogConfig, ErrUpstreamUnreachable, ErrUpstreamURIInvalid
from sparkcdc.model.position import BinlogPosition

MASK = "xxxxx"


@dataclass(frozen=True)
class UpstreamConfig:
    """Host, port and credentials of the upstream. Plain data, so it pickles to Spark executors."""

    host: str
    port: int = 3306
    user: str = "root"
    password: str = ""

    @classmethod
    def from_uri(cls, uri: str) -> "UpstreamConfig":
        """Parse `mysql://user:pass@host:port/` (also `mariadb://`)."""
        try:
            parts = urlsplit(uri.strip())
            port = parts.port
        except ValueError as e:
            raise ErrUpstreamURIInvalid(f"upstream URI {_mask(uri)!r} is malformed ({e}); use mysql://user:password@host:port/")
        if parts.scheme not in ("mysql", "mariadb"):
            raise ErrUpstreamURIInvalid(
                f"upstream URI scheme {parts.scheme!r} is not supported; use mysql://user:password@host:port/"
            )
        if not parts.hostname:
            raise ErrUpstreamURIInvalid(
                f"upstream URI {_mask(uri)!r} has no host; use mysql://user:password@host:port/"
            )
        return cls(
            host=parts.hostname,
            port=port or 3306,
            user=unquote(parts.username) if parts.username else "root",
            password=unquote(parts.password) if parts.password else "",
        )

    def connect(self, **kwargs: Any) -> pymysql.connections.Connection:
        """A new pymysql connection (utf8mb4, autocommit unless overridden)."""
        settings = {"charset": "utf8mb4", "autocommit": True, "connect_timeout": 10, **kwargs}
        try:
            return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password, **settings)
        except pymysql.err.OperationalError as e:
            raise ErrUpstreamUnreachable(
                f"cannot connect to upstream {self.masked_uri()}: {e.args[-1] if e.args else e}; "
                "check the host, port and credentials and that the server is running"
            ) from e

    def connection_settings(self) -> dict[str, Any]:
        """Keyword arguments for pymysqlreplication's `connection_settings`."""
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password, "charset": "utf8mb4"}

    def masked_uri(self) -> str:
        auth = self.user + (f":{MASK}" if self.password else "")
        return f"mysql://{auth}@{self.host}:{self.port}/"


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


MARIADB = Flavor("mariadb", "log_bin_compress", "BINLOG MONITOR", ("SHOW MASTER STATUS", "SHOW BINLOG STATUS"))
MYSQL = Flavor("mysql", "binlog_transaction_compression", "REPLICATION CLIENT", ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"))


def detect_flavor(conn) -> Flavor:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = cur.fetchone()[0]
    return MARIADB if "mariadb" in version.lower() else MYSQL


def binlog_end(conn, flavor: Flavor | None = None) -> BinlogPosition:
    """The current end of the binlog (where the next transaction will be written)."""
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
        return BinlogPosition(row[0], int(row[1]))
    raise ErrUpstreamUnreachable(f"cannot read the binlog position: {last_error}")
