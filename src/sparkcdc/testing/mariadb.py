"""A private MariaDB server for tests and demos: own datadir, socket and port, binlog in ROW/FULL.

`MariaDBServer(dir).start()` takes a few seconds; `stop()` (or `kill()`) and `start()` again restart it
on the same datadir and port, as an upstream restart or crash. `python -m sparkcdc.testing.mariadb
start --dir D` leaves one running for a demo and prints its URI, `stop --dir D` ends it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Optional

import pymysql

from sparkcdc.testing.ports import free_port

DEFAULT_CONFIG: dict[str, str] = {
    "server-id": "1",
    "log-bin": "mysql-bin",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "innodb_flush_log_at_trx_commit": "2",
    "sync_binlog": "0",
    "skip-name-resolve": "",
    "innodb_buffer_pool_size": "64M",
    "innodb_log_file_size": "16M",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_general_ci",
}


def _find_binary(name: str) -> str:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and os.path.exists(candidate):
            return candidate
    raise RuntimeError(f"{name} not found; install the Debian mariadb-server package")


class MariaDBServer:
    """One mariadbd process under `base_dir` (datadir, socket, pid file, config, log)."""

    def __init__(self, base_dir: str, port: Optional[int] = None, extra_config: Optional[dict[str, str]] = None):
        self.base_dir = os.path.abspath(base_dir)
        self._port = port
        self.extra_config = dict(extra_config or {})
        self._process: Optional[subprocess.Popen] = None

    # paths
    @property
    def datadir(self) -> str:
        return os.path.join(self.base_dir, "data")

    @property
    def socket_path(self) -> str:
        return os.path.join(self.base_dir, "mysqld.sock")

    @property
    def pid_file(self) -> str:
        return os.path.join(self.base_dir, "mysqld.pid")

    @property
    def pid(self) -> Optional[int]:
        """The mariadbd process's id (None when it is not running)."""
        return self._process.pid if self._process is not None else _read_pid(self.pid_file)

    @property
    def config_file(self) -> str:
        return os.path.join(self.base_dir, "my.cnf")

    @property
    def log_file(self) -> str:
        return os.path.join(self.base_dir, "mysqld.log")

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("server not started")
        return self._port

    @property
    def uri(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/"

    def _write_config(self) -> None:
        settings = dict(DEFAULT_CONFIG)
        settings.update(
            {
                "datadir": self.datadir,
                "socket": self.socket_path,
                "pid-file": self.pid_file,
                "port": str(self._port),
                "bind-address": "127.0.0.1",
                "log-error": self.log_file,
                "tmpdir": self.base_dir,
            }
        )
        if os.geteuid() == 0:
            settings["user"] = "root"
        settings.update(self.extra_config)
        lines = ["[mariadbd]"]
        for key, value in settings.items():
            lines.append(key if value == "" else f"{key}={value}")
        with open(self.config_file, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self, timeout: float = 60.0) -> "MariaDBServer":
        os.makedirs(self.base_dir, exist_ok=True)
        if self._port is None:
            self._port = free_port()
        self._write_config()
        if not os.path.isdir(os.path.join(self.datadir, "mysql")):
            subprocess.run(
                [
                    _find_binary("mariadb-install-db"),
                    f"--defaults-file={self.config_file}",
                    "--user=root",
                    f"--datadir={self.datadir}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        log = open(os.path.join(self.base_dir, "mysqld.stdout"), "ab")
        self._process = subprocess.Popen(
            [_find_binary("mariadbd"), f"--defaults-file={self.config_file}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self._process.returncode}; see {self.log_file}")
            try:
                conn = self.connect()
                with conn.cursor() as cur:
                    cur.execute("select 1")
                conn.close()
                return self
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"mariadbd did not answer within {timeout}s; see {self.log_file}")
                time.sleep(0.05)

    def connect(self, database: Optional[str] = None, autocommit: bool = True) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            password="",
            database=database,
            autocommit=autocommit,
            charset="utf8mb4",
        )

    def purge_binlogs(self, timeout: float = 30.0) -> str:
        """Start a new binlog file and purge every older one, as a server whose binlog retention
        expired; returns the file left. Retried: MariaDB keeps a file until InnoDB has
        checkpointed the transactions in it, a moment after the flush."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("FLUSH BINARY LOGS")
                cur.execute("SHOW MASTER STATUS")
                current = cur.fetchone()[0]
                deadline = time.monotonic() + timeout
                while True:
                    cur.execute(f"PURGE BINARY LOGS TO '{current}'")
                    cur.execute("SHOW BINARY LOGS")
                    if cur.fetchone()[0] == current:
                        cur.fetchall()
                        return current
                    cur.fetchall()
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"binlogs before {current} were not purged within {timeout}s")
                    time.sleep(0.2)
        finally:
            conn.close()

    # ---- replication (a primary and its replicas, for failover tests) -----------------------------

    def gtid_binlog_pos(self) -> str:
        return self._query_one("SELECT @@gtid_binlog_pos")

    def replicate_from(self, primary: "MariaDBServer", gtid_pos: Optional[str] = None, read_only: bool = True) -> None:
        """Make this server a GTID replica of `primary` from `gtid_pos` (default: the primary's
        current position, for a replica that starts with the primary's data), read-only. Its
        config needs its own server-id (and log_slave_updates=ON to be a failover candidate)."""
        position = primary.gtid_binlog_pos() if gtid_pos is None else gtid_pos
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("STOP SLAVE")
                cur.execute("SET GLOBAL gtid_slave_pos = %s", (position,))
                cur.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
                            "MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, "
                            "MASTER_CONNECT_RETRY=1")
                cur.execute("START SLAVE")
                cur.execute(f"SET GLOBAL read_only = {1 if read_only else 0}")
        finally:
            conn.close()

    def wait_replicated(self, primary: "MariaDBServer", timeout: float = 60.0) -> None:
        """Wait until this replica has applied everything the (live) primary's binlog holds."""
        target = primary.gtid_binlog_pos()
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (target, timeout))
                if cur.fetchone()[0] != 0:
                    raise TimeoutError(f"replica did not reach {target} in {timeout}s")
        finally:
            conn.close()

    def promote(self, timeout: float = 60.0) -> str:
        """Make this replica the primary after its primary died: apply what it received (its SQL
        thread catches up with its relay log), stop replicating, forget the old primary and take
        writes. Returns its GTID position."""
        conn = self.connect()
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                deadline = time.monotonic() + timeout
                while True:
                    cur.execute("SHOW SLAVE STATUS")
                    status = cur.fetchone() or {}
                    received, applied = status.get("Gtid_IO_Pos", ""), self._query_one("SELECT @@gtid_slave_pos")
                    if not status or _covers(applied, received):
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"replica applied {applied}, received {received}")
                    time.sleep(0.1)
                cur.execute("STOP SLAVE")
                cur.execute("RESET SLAVE ALL")
                cur.execute("SET GLOBAL read_only = 0")
        finally:
            conn.close()
        return self.gtid_binlog_pos()

    def _query_one(self, sql: str):
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchone()[0]
        finally:
            conn.close()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: a clean shutdown (SIGKILL after `timeout`)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; `start()` brings it back on the same datadir and port."""
        self._end(signal.SIGKILL, 30.0)

    def _end(self, sig: int, timeout: float) -> None:
        pid = self.pid
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None:
                if self._process.poll() is not None:
                    break
            elif not _alive(pid):
                break
            time.sleep(0.05)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._process is not None:
            self._process.wait(timeout=5)
        self._process = None

    def __enter__(self) -> "MariaDBServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def binlog_gtids(conn, since) -> list[str]:
    """The GTIDs of every transaction in the server's binlog from `since` (a BinlogPosition) on,
    in order, as the server itself lists them (SHOW BINLOG EVENTS)."""
    gtids = []
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall() if int(row[0].rsplit(".", 1)[1]) >= since.sequence]
        for file in files:
            cur.execute(f"SHOW BINLOG EVENTS IN '{file}'" + (f" FROM {since.pos}" if file == since.file else ""))
            gtids += [re.search(r"\d+-\d+-\d+", row[5]).group() for row in cur.fetchall() if row[2] == "Gtid"]
    return gtids


def _covers(applied: str, received: str) -> bool:
    """Whether GTID position `applied` has every domain of `received` at least as far."""
    have = {int(g.split("-")[0]): int(g.split("-")[2]) for g in applied.split(",") if g.strip()}
    return all(have.get(int(g.split("-")[0]), -1) >= int(g.split("-")[2]) for g in received.split(",") if g.strip())


def _read_pid(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkcdc.testing.mariadb")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a server under --dir and leave it running")
    start.add_argument("--dir", required=True)
    start.add_argument("--port", type=int, default=None)
    stop = sub.add_parser("stop", help="stop the server under --dir")
    stop.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    server = MariaDBServer(args.dir, port=getattr(args, "port", None))
    if args.command == "start":
        server.start()
        print(server.uri)
        return 0
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
