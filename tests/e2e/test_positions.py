"""Positions belong to the upstream (issues 19 item 6 and 23), end to end against real MariaDB.

Back-fill: a downstream loaded from `mariadb-dump --single-transaction --master-data=2 --gtid` of
an upstream whose binlog predates the sparkcdc server (with an ALTER between the dump and the
server's start), then a changefeed created at the dump's GTID: the downstream equals the upstream
afterwards. A start whose binlog was purged is refused with its coded error, naming the oldest
position left and the fix, and the server goes on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time

import pymysql
import pytest

from sparkcdc.testing.compare import wait_tables_equal
from sparkcdc.testing.etcd import EtcdServer, etcd_binary
from sparkcdc.testing.ha import wait_until
from sparkcdc.testing.mariadb import MariaDBServer
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark"]


@pytest.fixture(scope="module")
def primary(tmp_path_factory):
    """This module's upstream: its binlog is purged, and (issue 23) it is killed."""
    server = MariaDBServer(str(tmp_path_factory.mktemp("primary"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def downstream(tmp_path_factory):
    server = MariaDBServer(str(tmp_path_factory.mktemp("downstream"))).start()
    yield server
    server.stop()


def dump_into(upstream: MariaDBServer, downstream: MariaDBServer, database: str, path) -> dict[str, str]:
    """`mariadb-dump --single-transaction --master-data=2 --gtid` of `database`, loaded into the
    downstream; returns the positions the dump names: {"gtid": ..., "position": "FILE:POS"}."""
    with open(path, "w") as out:
        subprocess.run(["mariadb-dump", "-h127.0.0.1", f"-P{upstream.port}", "-uroot", "--single-transaction",
                        "--master-data=2", "--gtid", "--databases", database], stdout=out, check=True, timeout=120)
    text = path.read_text(encoding="latin-1")  # binary column values
    gtid = re.search(r"SET GLOBAL gtid_slave_pos='([^']*)'", text).group(1)
    match = re.search(r"MASTER_LOG_FILE='([^']+)', MASTER_LOG_POS=(\d+)", text)
    with open(path) as dump:
        subprocess.run(["mariadb", "-h127.0.0.1", f"-P{downstream.port}", "-uroot"], stdin=dump, check=True,
                       timeout=120)
    return {"gtid": gtid, "position": f"{match.group(1)}:{match.group(2)}"}


def test_a_changefeed_starts_at_a_dumps_gtid_from_before_the_server_existed(primary, downstream, tmp_path):
    began = time.monotonic()
    database = "e2e_pos_dump"
    workload = Workload(primary.connect(), database, seed=19)
    workload.create_tables()
    workload.run(30)
    dumped = dump_into(primary, downstream, database, tmp_path / "dump.sql")
    workload.run(30)
    with workload.conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {database}.orders ADD COLUMN audit VARCHAR(20) NULL DEFAULT 'after-dump'")
    workload.run(20)
    server = ServerProcess(str(tmp_path / "cdc"), primary.uri).start()
    try:
        workload.run(10)  # indexed by the server itself
        server.cli("changefeed", "create", "-c", "from-dump", "--start-ts", dumped["gtid"],
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
        workload.run(20)
        workload.finish()
        wait_tables_equal(primary.connect(), downstream.connect(), database, TABLES, timeout=240)
        replicated = time.monotonic() - began

        # A start the upstream no longer has: refused with its code, the oldest position and the
        # fix; the server and its changefeed go on.
        oldest = primary.purge_binlogs()
        refused = server.cli("changefeed", "create", "-c", "too-old", "--start-ts", "0-1-1",
                             "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/", check=False)
        assert refused.returncode != 0 and "[SPARKCDC:ErrBinlogPurged]" in refused.stderr, refused.stderr
        assert f"its oldest binlog {oldest} begins after GTIDs" in refused.stderr, refused.stderr
        assert '[snapshot] mode = "initial"' in refused.stderr and "Traceback" not in refused.stderr
        listed = {cf["id"]: cf["summary"]["state"] for cf in json.loads(server.cli("changefeed", "list").stdout)}
        assert listed == {"from-dump": "normal"}, listed
        workload.run(5)
        workload.finish(2)
        wait_tables_equal(primary.connect(), downstream.connect(), database, TABLES, timeout=120)
    finally:
        print(f"dump start: replicated after {replicated if 'replicated' in dir() else -1:.0f}s, total "
              f"{time.monotonic() - began:.0f}s, load average {os.getloadavg()[0]:.1f}")
        server.stop()


# ---- issue 23: a failover of the upstream -----------------------------------------------------

FAILOVER_DB = "e2e_failover"
SNAPSHOT_DB = "e2e_failover_copy"  # copied by an initial snapshot that the failover interrupts
PAUSE_SECONDS = 10  # the failpoint's pause inside the large transaction, in which the primary dies
WAVE_PAUSE_SECONDS = 1  # before each wave of chunk reads: the copy is under way at the kill on any machine
HA = {"log_slave_updates": "ON", "gtid_strict_mode": "ON"}


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    """A primary and a GTID replica that logs what it applies (a failover candidate)."""
    old = MariaDBServer(str(tmp_path_factory.mktemp("old-primary")), extra_config=HA).start()
    new = MariaDBServer(str(tmp_path_factory.mktemp("replica")), extra_config={**HA, "server-id": "2"}).start()
    new.replicate_from(old)
    yield old, new
    old.stop()
    new.stop()


class Writer:
    """The workload's small transactions, each followed by an insert into the keyless, insert-only
    `ledger` (one row per number: a transaction applied twice downstream shows as a count of 2),
    in a thread, until stopped or until the server it writes to dies."""

    def __init__(self, server: MariaDBServer, seed: int, database: str = FAILOVER_DB):
        self.workload = Workload(server.connect(), database, seed=seed)
        self.next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on(self, server: MariaDBServer) -> "Writer":
        self.workload.conn = server.connect()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.workload.run(1)
                self.workload._exec(f"INSERT INTO `{self.workload.database}`.ledger VALUES (%s, 'w')", (self.next,))
                self.next += 1
                time.sleep(0.02)
        except pymysql.err.MySQLError:
            pass  # the server died under it: some of its last transactions may be lost upstream too

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


    def create_tables(self) -> None:
        """The workload's tables and the keyless ledger."""
        self.workload.create_tables()
        self.workload._exec(f"CREATE TABLE `{self.workload.database}`.ledger (n INT NOT NULL, note VARCHAR(8))")


def copy_states(server: ServerProcess) -> dict[str, str]:
    """The state of each table of the `copy` changefeed's snapshot (pending, copying, done)."""
    status = server.query("copy")
    tables = (status.get("snapshot") or {}).get("tables", [])  # none before the copy's bootstrap
    return {t["table"]: t["state"] for t in tables}


def copy_progress(server: ServerProcess, table: str) -> str:
    return copy_states(server).get(f"{SNAPSHOT_DB}.{table}", "")


def ledger_counts(conn, database: str = FAILOVER_DB) -> dict[int, int]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT n, COUNT(*) FROM `{database}`.ledger GROUP BY n")
        return {int(n): int(count) for n, count in cur.fetchall()}


def file_ledger_commits(root: str) -> dict[int, set[int]]:
    """The commit-ts under which each ledger number was written to file storage (a replay writes a
    row again under the same commit-ts; a transaction indexed twice would have two)."""
    from sparkcdc.consumer.storage_reader import open_storage, read_bytes, table_files

    fs, base = open_storage(root)
    commits: dict[int, set[int]] = {}
    for data_file in table_files(fs, f"{base}/{FAILOVER_DB}/ledger", "canal-json"):
        for line in read_bytes(fs, data_file.path).decode().splitlines():
            message = json.loads(line) if line.strip() else {}
            if message.get("type") == "INSERT":
                commits.setdefault(int(message["data"][0]["n"]), set()).add(int(message["_tidb"]["commitTs"]))
    return commits


def test_changefeeds_follow_a_failover_to_a_promoted_replica(topology, downstream, tmp_path, monkeypatch):
    """kill -9 of the primary mid-workload, while the MySQL changefeed is inside a large
    transaction's pieces, the file changefeed is paused behind and a third changefeed is half way
    through the initial snapshot of a database that existed before (with writes during the copy);
    the replica is promoted and the workloads go on there. All three end equal to the new primary,
    nothing twice, no checkpoint moved backwards, and the copy kept the chunks it had done."""
    from test_storage_changefeed import assert_tables_equal, wait_replicated, write_large_transaction

    began = time.monotonic()
    old, new = topology
    config = tmp_path / "cf.toml"
    config.write_text(f'force-replicate = true\n[filter]\nrules = ["{FAILOVER_DB}.*"]\n')
    copy_config = tmp_path / "copy.toml"
    copy_config.write_text(f'force-replicate = true\n[filter]\nrules = ["{SNAPSHOT_DB}.*"]\n'
                           '[snapshot]\nmode = "initial"\nchunk-size = 500\nparallelism = 1\n')
    root = str(tmp_path / "files")
    copier = Writer(old, seed=31, database=SNAPSHOT_DB)
    copier.create_tables()
    copier.workload.run(300)
    with old.connect().cursor() as cur:  # the bulk of the copy, copied last (tables go in name order)
        cur.execute(f"CREATE TABLE `{SNAPSHOT_DB}`.zbulk (id INT PRIMARY KEY, k INT NOT NULL, pad CHAR(60) NOT NULL)")
        cur.execute(f"INSERT INTO `{SNAPSHOT_DB}`.zbulk SELECT seq, seq % 97, REPEAT('p', 60)"
                    f" FROM `{SNAPSHOT_DB}`.seq_1_to_10000")
    copier.on(old)  # writes beside the copy, the keyless ledger too
    monkeypatch.setenv("SPARKCDC_FAILPOINTS", f"pause-inside-transaction=return({PAUSE_SECONDS});"
                                              f"snapshot-wave-pause=return({WAVE_PAUSE_SECONDS})")
    server = ServerProcess(str(tmp_path / "cdc"), f"mysql://root@127.0.0.1:{old.port},127.0.0.1:{new.port}/").start()
    checkpoints: dict[str, list[int]] = {"to-mysql": [], "to-files": []}
    polling = threading.Event()

    def poll_checkpoints():
        while not polling.is_set():
            for changefeed, seen in checkpoints.items():
                try:
                    seen.append(server.checkpoint(changefeed))
                except Exception:  # noqa: BLE001 - not created yet, or the API busy
                    pass
            time.sleep(0.5)

    poller = threading.Thread(target=poll_checkpoints, daemon=True)
    writer = Writer(old, seed=23)
    try:
        server.cli("changefeed", "create", "-c", "copy", "--config", str(copy_config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
        server.cli("changefeed", "create", "-c", "to-mysql", "--config", str(config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
        server.cli("changefeed", "create", "-c", "to-files", "--config", str(config),
                   "--sink-uri", f"file://{root}?protocol=canal-json&enable-tidb-extension=true")
        poller.start()
        writer.create_tables()  # replicated: after the changefeeds' start
        writer.on(old)
        time.sleep(8)
        server.cli("changefeed", "pause", "-c", "to-files")  # behind from here: it catches up on the new primary
        # The copy's keyless ledger (one chunk, whose changes are dropped up to its place) is done
        # before the failover, the bulk table after it.
        wait_until(lambda: copy_progress(server, "ledger") == "done", 120, "the copy of the ledger")
        log_path = os.path.join(server.data_dir, "server.log")
        write_large_transaction(old.connect(), FAILOVER_DB)
        wait_until(lambda: b"FAILPOINT pause-inside-transaction: pausing" in open(log_path, "rb").read(), 240,
                   "the MySQL changefeed to stop inside the large transaction")
        time.sleep(1)
        # A table done here is not read again; one copying may be (its chunks read on the old
        # primary but not yet in the stream are read again on the new one).
        done_at_kill = {table for table, state in copy_states(server).items() if state == "done"}
        assert f"{SNAPSHOT_DB}.zbulk" not in done_at_kill, "the copy ended before the failover: nothing was tested"
        log_at_kill = os.path.getsize(log_path)
        old.kill()  # kill -9 mid-workload, with the MySQL changefeed half way through the transaction
        writer.stop()
        copier.stop()
        killed = time.monotonic()
        new.promote()
        writer.on(new)
        copier.on(new)
        # Refused (the upstream unreachable) until the puller has switched to the new primary.
        wait_until(lambda: server.cli("changefeed", "resume", "-c", "to-files", check=False).returncode == 0, 120,
                   "the paused changefeed to resume on the new primary")
        time.sleep(8)
        writer.stop()
        writer.workload.finish()
        copier.stop()
        copier.workload.finish()

        wait_until(lambda: copy_progress(server, "zbulk") == "done", 240, "the copy to finish on the new primary")
        copied = TABLES + ["ledger", "zbulk"]
        wait_tables_equal(new.connect(), downstream.connect(), SNAPSHOT_DB, copied, timeout=120)
        copy_counts = ledger_counts(downstream.connect(), SNAPSHOT_DB)
        assert copy_counts == ledger_counts(new.connect(), SNAPSHOT_DB) and set(copy_counts.values()) == {1}
        read_after = re.findall(rb"snapshot of default/copy reads (.*)", open(log_path, "rb").read()[log_at_kill:])
        tables_read_after = {name.split(b"#")[0].decode() for line in read_after for name in line.split(b", ")}
        assert f"{SNAPSHOT_DB}.zbulk" in tables_read_after, tables_read_after
        assert not tables_read_after & done_at_kill, f"done tables read again: {tables_read_after & done_at_kill}"

        tables = TABLES + ["bulk"]
        wait_tables_equal(new.connect(), downstream.connect(), FAILOVER_DB, tables, timeout=300)
        wait_until(lambda: ledger_counts(downstream.connect()) == ledger_counts(new.connect()), 120,
                   "the ledger downstream to equal the new primary's")
        counts = ledger_counts(downstream.connect())
        assert set(counts.values()) == {1} and len(counts) > writer.next // 2, (len(counts), writer.next)
        rebuilt = wait_replicated(root, "canal-json", FAILOVER_DB, 1, timeout=300)
        assert_tables_equal(new.connect(), FAILOVER_DB, rebuilt, tables)
        commits = file_ledger_commits(root)
        assert set(commits) == set(ledger_counts(new.connect())), "the file ledger holds the new primary's numbers"
        twice = {n: ts for n, ts in commits.items() if len(ts) > 1}
        assert not twice, f"ledger rows written under two commit-ts (a transaction indexed twice): {twice}"
        followed = time.monotonic() - killed
        for changefeed, seen in checkpoints.items():
            assert seen and all(a <= b for a, b in zip(seen, seen[1:])), f"{changefeed} checkpoint moved back"
        cf = json.loads(server.cli("changefeed", "query", "-s", "-c", "to-mysql").stdout)
        assert cf["state"] == "normal", cf
    finally:
        polling.set()
        writer.stop()
        print(f"failover: replicated {followed if 'followed' in dir() else -1:.0f}s after the kill, total "
              f"{time.monotonic() - began:.0f}s, load average {os.getloadavg()[0]:.1f}")
        server.stop()


CLUSTER_DB = "e2e_failover_cluster"


@pytest.mark.skipif(etcd_binary() is None, reason="etcd-server is not installed (scripts/setup.sh)")
def test_every_capture_of_a_cluster_follows_the_failover(downstream, tmp_path, tmp_path_factory, monkeypatch):
    """Cluster mode: two captures on one etcd, each with its own puller and index over the
    topology. The primary is killed and a replica promoted under a workload; then the capture that
    runs the changefeed stops, and the other one, which followed the failover on its own, takes the
    changefeed over at the checkpoint the first one wrote (found in its own index by GTID)."""
    from sparkcdc.testing.ha import HACluster

    began = time.monotonic()
    # Two Spark JVMs on 2 cores: the client compiler and the serial collector halve their start.
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    old = MariaDBServer(str(tmp_path_factory.mktemp("cluster-primary")), extra_config=HA).start()
    new = MariaDBServer(str(tmp_path_factory.mktemp("cluster-replica")),
                        extra_config={**HA, "server-id": "2"}).start()
    new.replicate_from(old)
    etcd = EtcdServer(str(tmp_path / "etcd")).start()
    uri = f"mysql://root@127.0.0.1:{old.port},127.0.0.1:{new.port}/"
    servers = [ServerProcess(str(tmp_path / f"cdc{n}"), uri, extra_args=(
        "--pd", etcd.endpoint, "--spark-master", "local[1]", "--capture-session-ttl", "4")) for n in range(2)]
    cluster = HACluster(etcd, servers)
    writer = Writer(old, seed=29, database=CLUSTER_DB)
    config = tmp_path / "cf.toml"
    config.write_text(f'force-replicate = true\n[filter]\nrules = ["{CLUSTER_DB}.*"]\n')
    try:
        cluster.start_all()
        wait_until(lambda: len(cluster.live_captures()) == 2, 60, "two captures in etcd")
        servers[0].cli("changefeed", "create", "-c", "cluster-mysql", "--config", str(config),
                       "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
        writer.create_tables()
        first = wait_until(lambda: cluster.live_runner("cluster-mysql"), 60, "the owner to assign the changefeed")
        writer.on(old)
        wait_until(lambda: ledger_counts_or_none(downstream, CLUSTER_DB), 180, "the first ledger rows downstream")
        old.kill()
        writer.stop()
        new.promote()
        writer.on(new)
        time.sleep(6)
        runner = cluster.captures()[first]
        runner.stop()  # at rest: its checkpoint is the last batch it wrote, on the new primary
        cluster.killed.add(first)
        second = wait_until(lambda: cluster.live_runner("cluster-mysql"), 60, "the other capture to take over")
        assert second != first
        time.sleep(4)
        writer.stop()
        writer.workload.finish()
        wait_tables_equal(new.connect(), downstream.connect(), CLUSTER_DB, TABLES, timeout=300)
        wait_until(lambda: ledger_counts(downstream.connect(), CLUSTER_DB) == ledger_counts(new.connect(), CLUSTER_DB),
                   120, "the ledger downstream to equal the new primary's")
        counts = ledger_counts(downstream.connect(), CLUSTER_DB)
        assert set(counts.values()) == {1} and len(counts) > writer.next // 2, (len(counts), writer.next)
        status = cluster.client.get(cluster.keys.status("default", "cluster-mysql")).json()
        assert status["checkpoint_gtid"].startswith("0-2-"), status  # the new primary's GTIDs
    finally:
        writer.stop()
        print(f"cluster failover: total {time.monotonic() - began:.0f}s, load average {os.getloadavg()[0]:.1f}")
        cluster.stop_all()
        etcd.stop()
        old.stop()
        new.stop()


def ledger_counts_or_none(server: MariaDBServer, database: str):
    try:
        return ledger_counts(server.connect(), database)
    except pymysql.err.MySQLError:
        return None  # not replicated yet
