"""Checks that the upstream's binlog and grants let us capture every change, before we start."""

from __future__ import annotations

import re

import pymysql

from sparkcdc.errors import ErrUpstreamBinlogConfig, ErrUpstreamPrivilege, ErrUpstreamUnreachable
from sparkcdc.upstream.connection import Flavor, UpstreamConfig, detect_flavor

# variable -> required value (compared case-insensitively); the compression variable comes from Flavor.
REQUIRED_VARIABLES = (
    ("log_bin", "ON"),
    ("binlog_format", "ROW"),
    ("binlog_row_image", "FULL"),
    ("binlog_row_metadata", "FULL"),
)


def preflight(cfg: UpstreamConfig) -> str:
    """Raise a clear error if the upstream cannot be captured; return its flavor name."""
    conn = cfg.connect()
    try:
        flavor = detect_flavor(conn)
        variables = _global_variables(conn)
        for name, required in REQUIRED_VARIABLES + ((flavor.compression_variable, "OFF"),):
            _check_variable(variables, name, required, flavor)
        _check_grants(conn, cfg, flavor)
        return flavor.name
    except pymysql.err.MySQLError as e:
        raise ErrUpstreamUnreachable(f"preflight against {cfg.masked_uri()} failed: {e}") from e
    finally:
        conn.close()


def _global_variables(conn) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
            "('log_bin','binlog_format','binlog_row_image','binlog_row_metadata',"
            "'log_bin_compress','binlog_transaction_compression')"
        )
        return {name.lower(): str(value) for name, value in cur.fetchall()}


def _check_variable(variables: dict[str, str], name: str, required: str, flavor: Flavor) -> None:
    current = variables.get(name)
    if current is None and name == flavor.compression_variable:
        return  # older servers without binlog compression
    if current is None or current.upper() != required:
        if name == "log_bin":
            fix = "set log-bin=mysql-bin in the server config and restart"
        else:
            fix = f"set {name}={required} in the server config and restart (and SET GLOBAL {name}={required!r})"
        raise ErrUpstreamBinlogConfig(f"{name} is {current!r} on the upstream but must be {required}; {fix}")


_GRANT = re.compile(r"^GRANT (?P<privs>.+?) ON (?P<on>\S+) TO ", re.IGNORECASE)


def _check_grants(conn, cfg: UpstreamConfig, flavor: Flavor) -> None:
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        grants = [row[0] for row in cur.fetchall()]
    privileges: set[str] = set()
    for grant in grants:
        match = _GRANT.match(grant)
        if not match or match["on"].replace("`", "") != "*.*":
            continue
        privileges.update(p.strip().upper() for p in match["privs"].split(","))
    if "ALL PRIVILEGES" in privileges or "ALL" in privileges:
        return
    # MariaDB 10.5+ renamed REPLICATION CLIENT to BINLOG MONITOR (the old name is an alias).
    monitor = {flavor.monitor_privilege, "REPLICATION CLIENT", "BINLOG MONITOR"}
    missing = []
    if "REPLICATION SLAVE" not in privileges:
        missing.append("REPLICATION SLAVE")
    if not privileges & monitor:
        missing.append(flavor.monitor_privilege)
    if missing:
        raise ErrUpstreamPrivilege(
            f"upstream user {cfg.user!r} lacks {', '.join(missing)}; run "
            f"GRANT {', '.join(missing)} ON *.* TO '{cfg.user}'@'%' (plus SELECT on the replicated tables)"
        )
