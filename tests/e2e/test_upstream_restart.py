"""The upstream MariaDB restarts, crashes and stays down while a workload writes (issue 20).

A MySQL-sink changefeed and a storage-sink changefeed (replayed by `sparkcdc consumer storage`),
each over its own database, on a single node and in a cluster (`--pd`). Throughout, every
changefeed is polled through the API: while the upstream is down each must show `warning` with
the upstream named; after it starts again each must be `normal` with a moved checkpoint within
RECOVERY_SECONDS, without anyone touching it; and no changefeed may stay `normal` with a frozen
checkpoint for longer than FROZEN_NORMAL_BOUND (a dead puller used to leave them exactly so).
At the end the downstream tables equal the upstream's, and the capture's transaction index holds
every transaction of the upstream's binlog exactly once.

Single node: a real KILL of the puller's replication connection (and any range reader's), two
restarts (stop 6 s, then a SIGKILL crash) and one outage of LONG_OUTAGE s, longer than a read
task waits for its upstream (30 s) and than the runner's first restart backoffs (10 s + 20 s),
which a blind backoff would still be sleeping through; then the binlog a paused changefeed needs
is purged, and `resume` says so (ErrBinlogPurged) with a fix that works; last, an event the
puller cannot read fails every changefeed with its error. Cluster: one restart.
Both share the upstream and downstream servers.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass

import pymysql
import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts
from sparkcdc.model import tso
from sparkcdc.testing.compare import wait_tables_equal
from sparkcdc.testing.etcd import EtcdServer, etcd_binary
from sparkcdc.testing.ha import ThrottledLoad, wait_until
from sparkcdc.testing.mariadb import MariaDBServer, binlog_gtids
from sparkcdc.testing.server_process import ApiError, ServerProcess, run_sparkcdc
from sparkcdc.testing.workload import Workload
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.e2e

TABLES = ["customers", "orders", "items", "finish_mark"]
# No changefeed may be `normal` with the same checkpoint for longer than this (seconds): under the
# throttled load its checkpoint moves with every batch (~1-3 s); a puller problem turns it
# `warning` within the runner's WATCH_SECONDS.
FROZEN_NORMAL_BOUND = 20.0
# From the upstream's start to `normal` with a checkpoint past the outage, on a loaded machine.
RECOVERY_SECONDS = 30.0
# From the upstream's stop to `warning` naming it.
WARNING_SECONDS = 15.0
SHORT_OUTAGE = 6.0
LONG_OUTAGE = 35.0


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """This module's own upstream: the tests stop and crash it."""
    server = MariaDBServer(str(tmp_path_factory.mktemp("upstream"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def downstream(tmp_path_factory):
    server = MariaDBServer(str(tmp_path_factory.mktemp("downstream"))).start()
    yield server
    server.stop()


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic
    state: str
    checkpoint: int
    error: str


class ChangefeedWatch:
    """Polls each changefeed's state and checkpoint through the API every `interval` s."""

    def __init__(self, servers: list[ServerProcess], changefeeds: list[str], interval: float = 0.5):
        self.servers = servers
        self.changefeeds = changefeeds
        self.interval = interval
        self.samples: dict[str, list[Sample]] = {cf: [] for cf in changefeeds}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for changefeed in self.changefeeds:
                for server in self.servers:
                    try:
                        info = server.api("GET", f"/api/v2/changefeeds/{changefeed}", timeout=10)
                    except (OSError, ApiError):
                        continue
                    error = info.get("error") or {}
                    self.samples[changefeed].append(Sample(time.monotonic(), info["state"], int(info["checkpoint_ts"]),
                                                           f"{error.get('code', '')} {error.get('message', '')}"))
                    break

    def __enter__(self) -> "ChangefeedWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def latest(self, changefeed: str) -> Sample:
        wait_until(lambda: self.samples[changefeed], 30, f"a sample of {changefeed}")
        return self.samples[changefeed][-1]

    def wait(self, changefeed: str, predicate, timeout: float, what: str) -> Sample:
        deadline = time.monotonic() + timeout
        while not predicate(sample := self.latest(changefeed)):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {changefeed} {what}; "
                                     f"last seen: {sample}")
            time.sleep(0.1)
        return sample

    def wait_running(self, timeout: float) -> float:
        """Wait until every changefeed's checkpoint has moved (its Spark query runs); returns when."""
        created = {cf: self.latest(cf).checkpoint for cf in self.changefeeds}
        for changefeed in self.changefeeds:
            self.wait(changefeed, lambda s: s.state == "normal" and s.checkpoint > created[changefeed], timeout,
                      "to run")
        return time.monotonic()

    def longest_frozen_normal(self, changefeed: str, after: float) -> tuple[float, float]:
        """The longest time the changefeed was seen `normal` with one unchanged checkpoint after
        `after` (monotonic; its first checkpoint comes once its Spark query started), and when
        that began (seconds after `after`)."""
        longest, began, at = 0.0, None, 0.0
        samples = [sample for sample in self.samples[changefeed] if sample.at >= after]
        for previous, sample in zip(samples, samples[1:]):
            if sample.state == "normal" and previous.state == "normal" and sample.checkpoint == previous.checkpoint:
                began = previous.at if began is None else began
                if sample.at - began > longest:
                    longest, at = sample.at - began, began - after
            else:
                began = None
        return round(longest, 1), round(at, 1)


class OutageTolerantLoad:
    """One workload transaction per database and step; after an outage, connect again."""

    def __init__(self, upstream: MariaDBServer, workloads: list[Workload]):
        self.upstream = upstream
        self.workloads = workloads

    def step(self) -> None:
        for workload in self.workloads:
            try:
                workload.run(1)
            except (pymysql.err.MySQLError, OSError):
                try:
                    workload.conn.close()
                except Exception:  # noqa: BLE001 - already gone
                    pass
                try:
                    workload.conn = self.upstream.connect()
                except pymysql.err.MySQLError:
                    pass  # still down: the next step tries again


def outage(upstream: MariaDBServer, watch: ChangefeedWatch, seconds: float, crash: bool = False) -> dict:
    """Stop (or SIGKILL) the upstream for `seconds`, check every changefeed warns naming it, start
    it and wait until each is normal again with a checkpoint past the outage; returns timings."""
    named = f"mysql://root@127.0.0.1:{upstream.port}/"
    stopped = time.monotonic()
    upstream.kill() if crash else upstream.stop()
    timings = {"kind": "crash" if crash else "stop", "down": seconds}
    for changefeed in watch.changefeeds:
        watch.wait(changefeed, lambda s: s.state == "warning" and "ErrUpstreamUnreachable" in s.error
                   and named in s.error, WARNING_SECONDS, f"to warn that {named} is down")
        timings[f"{changefeed} warning after"] = round(time.monotonic() - stopped, 1)
    time.sleep(max(0.0, seconds - (time.monotonic() - stopped)))
    upstream.start()
    back = time.monotonic()
    frozen = {cf: watch.latest(cf).checkpoint for cf in watch.changefeeds}
    for changefeed in watch.changefeeds:
        watch.wait(changefeed, lambda s: s.state == "normal" and s.checkpoint > frozen[changefeed],
                   RECOVERY_SECONDS, "to go on by itself")
        timings[f"{changefeed} normal after"] = round(time.monotonic() - back, 1)
    return timings


def binlog_dumps(upstream: MariaDBServer) -> set[int]:
    """Connection ids of the upstream's binlog dumps (the puller's, and range readers' while they read)."""
    conn = upstream.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
        dumps = {row[0] for row in cur.fetchall()}
    conn.close()
    return dumps


def kill_binlog_connections(upstream: MariaDBServer) -> set[int]:
    """A real KILL of every binlog dump connection, the puller's among them; returns their ids."""
    dumps = binlog_dumps(upstream)
    assert dumps, "the capture's puller has a binlog dump connection"
    conn = upstream.connect()
    with conn.cursor() as cur:
        for dump in dumps:
            try:
                cur.execute(f"KILL {dump}")
            except pymysql.err.MySQLError:  # a range reader's dump that ended meanwhile
                pass
    conn.close()
    return dumps


def create_changefeeds(server: ServerProcess, downstream: MariaDBServer, tmp_path, databases: dict[str, str],
                       storage_root: str) -> None:
    for changefeed, database in databases.items():
        config = tmp_path / f"{changefeed}.toml"
        config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
        sink = (f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2" if changefeed.endswith("mysql")
                else f"file://{storage_root}?protocol=canal-json&enable-tidb-extension=true")
        server.cli("changefeed", "create", "-c", changefeed, "--config", str(config), "--sink-uri", sink)


def start_workloads(upstream: MariaDBServer, databases: dict[str, str], seed: int) -> dict[str, Workload]:
    """A workload per changefeed's database, its tables created after the changefeed and 20
    transactions in."""
    workloads = {cf: Workload(upstream.connect(), db, seed=seed + n) for n, (cf, db) in enumerate(databases.items())}
    for workload in workloads.values():
        workload.create_tables()
        workload.run(20)
    return workloads


def finish_and_compare(upstream: MariaDBServer, downstream: MariaDBServer, workloads: dict[str, Workload],
                       databases: dict[str, str], storage_root: str) -> None:
    """Finish marks, then the MySQL sink's tables and the storage sink's tables as `sparkcdc consumer
    storage` rebuilds them into the downstream, both compared with the upstream row by row."""
    up, down = upstream.connect(), downstream.connect()
    for workload in workloads.values():
        workload.conn = upstream.connect()
        workload.finish()
    for changefeed, database in databases.items():
        if changefeed.endswith("storage"):
            # The consumer applies what the storage checkpoint covers: wait until that passes the mark.
            with up.cursor() as cur:
                cur.execute("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000")
                marked_ms = int(cur.fetchone()[0]) + 1000
            wait_until(lambda: (checkpoint_ts(storage_root) >> 18) > marked_ms, 180,
                       "the storage checkpoint to pass the finish mark")
            consumed = run_sparkcdc("consumer", "storage", "--upstream-uri", f"file://{storage_root}?protocol=canal-json",
                                    "--downstream-uri", f"mysql://root@127.0.0.1:{downstream.port}/", "--once",
                                    timeout=300)
            assert consumed.returncode == 0, consumed.stdout + consumed.stderr
        wait_tables_equal(up, down, database, TABLES, timeout=180)


def resume_past_a_purged_binlog(upstream: MariaDBServer, server: ServerProcess, workload: Workload) -> None:
    """The binlog a paused changefeed needs is purged (issue 20 item 2): `resume` answers with
    ErrBinlogPurged naming the oldest position left and the fix, and the fix works."""
    server.cli("changefeed", "pause", "-c", "up-storage")
    workload.conn = upstream.connect()
    workload.run(3)  # changes the changefeed will never see
    # The running changefeed reads past them first: its batches read whole binlog ranges, other
    # databases' transactions included, and a purge under it would fail it the same way.
    now = server.api("POST", "/api/v2/tso")
    wait_until(lambda: int(server.api("GET", "/api/v2/changefeeds/up-mysql")["checkpoint_ts"])
               >= tso.compose(now["timestamp"], now["logic_time"]), 60, "up-mysql to pass the last writes")
    oldest = upstream.purge_binlogs()
    refused = server.cli("changefeed", "resume", "-c", "up-storage", check=False)
    assert refused.returncode != 0 and "[SPARKCDC:ErrBinlogPurged]" in refused.stderr, refused.stderr
    assert f"is no longer on upstream mysql://root@127.0.0.1:{upstream.port}/" in refused.stderr
    assert f"the oldest binlog it still has begins at {oldest}:4" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and "STREAM_FAILED" not in refused.stderr
    assert server.query("up-storage")["state"] == "stopped"
    resume_at = re.search(r"--overwrite-checkpoint-ts ([^`\s]+)`", refused.stderr).group(1)
    server.cli("changefeed", "resume", "-c", "up-storage", "--overwrite-checkpoint-ts", resume_at, "--no-confirm")
    moved = int(server.api("GET", "/api/v2/changefeeds/up-storage")["checkpoint_ts"])
    workload.run(1)
    wait_until(lambda: (info := server.api("GET", "/api/v2/changefeeds/up-storage"))["state"] == "normal"
               and int(info["checkpoint_ts"]) > moved, 120, "up-storage to replicate again from the oldest binlog")


def an_unreadable_event_fails_every_changefeed(upstream: MariaDBServer, server: ServerProcess,
                                              changefeeds: list[str]) -> None:
    """An event the puller cannot read (a compressed one: log_bin_compress turned on for a moment)
    stops it for good; every changefeed of the capture, whatever its filter, is `failed` with the
    puller's error within seconds, and a resume that restarts the puller meets the event again."""
    conn = upstream.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE e2e_upr_mysql.compressed (id INT PRIMARY KEY, v TEXT)")
        cur.execute("SET GLOBAL log_bin_compress_min_len = 10")
        cur.execute("SET GLOBAL log_bin_compress = ON")
        try:
            writer = upstream.connect()  # a new session: the setting applies to it
            with writer.cursor() as write:
                write.execute("INSERT INTO e2e_upr_mysql.compressed VALUES (1, %s)", ("x" * 200,))
            writer.close()
        finally:
            cur.execute("SET GLOBAL log_bin_compress = OFF")
    conn.close()

    def shows_it(changefeed: str) -> bool:
        info = server.api("GET", f"/api/v2/changefeeds/{changefeed}")
        error = info["error"] or {}
        return (info["state"] == "failed" and error.get("code") == "SPARKCDC:ErrBinlogUnsupportedEvent"
                and "log_bin_compress=OFF" in error.get("message", "") and info["puller"]["state"] == "failed")

    for changefeed in changefeeds:
        wait_until(lambda: shows_it(changefeed), 30, f"{changefeed} to fail with the puller's error")
    server.cli("changefeed", "resume", "-c", changefeeds[0])
    wait_until(lambda: shows_it(changefeeds[0]), 30, f"{changefeeds[0]} to fail again after its resume")


def assert_index_has_every_transaction_once(upstream: MariaDBServer, data_dir: str) -> None:
    index = TxnIndex(os.path.join(data_dir, "txn-index.sqlite"))
    indexed = [txn.gtid for txn in index.txns_between(0, index.resolved_ts())]
    in_binlog = binlog_gtids(upstream.connect(), index.start_position())
    assert indexed == in_binlog, "the puller indexed every transaction of the binlog once, in order"


def test_single_node_changefeeds_ride_out_upstream_restarts_a_crash_and_a_long_outage(upstream, downstream, tmp_path):
    databases = {"up-mysql": "e2e_upr_mysql", "up-storage": "e2e_upr_storage"}
    storage_root = str(tmp_path / "storage")
    server = ServerProcess(str(tmp_path / "cdc"), upstream.uri).start()
    timings: list = []
    began = time.monotonic()
    try:
        create_changefeeds(server, downstream, tmp_path, databases, storage_root)
        workloads = start_workloads(upstream, databases, seed=31)
        load = OutageTolerantLoad(upstream, list(workloads.values()))
        with ChangefeedWatch([server], list(databases)) as watch, ThrottledLoad(load.step, interval=0.25):
            running = watch.wait_running(120)
            timings.append(("setup", round(running - began, 1)))

            # The puller's connection killed: it reconnects, and the checkpoints keep moving.
            killed = {cf: watch.latest(cf).checkpoint for cf in databases}
            killed_dumps = kill_binlog_connections(upstream)
            wait_until(lambda: binlog_dumps(upstream) - killed_dumps, 10, "the puller to dump the binlog again")
            for changefeed in databases:
                watch.wait(changefeed, lambda s: s.checkpoint > killed[changefeed] and s.state == "normal", 20,
                           "to go on after its puller's connection was killed")
            assert server.query("up-mysql")["puller"]["state"] == "running"

            timings.append(outage(upstream, watch, SHORT_OUTAGE))
            timings.append(outage(upstream, watch, SHORT_OUTAGE, crash=True))
            # While the upstream is down, `changefeed query` shows the puller reconnecting.
            named = f"127.0.0.1:{upstream.port}"
            long_down = threading.Timer(LONG_OUTAGE / 2, lambda: timings.append(
                ("puller while down", server.query("up-storage")["puller"])))
            long_down.start()
            timings.append(outage(upstream, watch, LONG_OUTAGE))
            long_down.join()
            puller = timings[-2][1]
            assert puller["state"] == "reconnecting" and named in puller["error"]["message"], puller
            for changefeed in databases:
                frozen, at = watch.longest_frozen_normal(changefeed, running)
                timings.append((f"{changefeed} longest frozen normal (s, at s)", frozen, at))
                assert frozen <= FROZEN_NORMAL_BOUND, f"{changefeed} stayed normal with a frozen checkpoint {frozen}s"
        finish_and_compare(upstream, downstream, workloads, databases, storage_root)
        assert_index_has_every_transaction_once(upstream, server.data_dir)
        resume_past_a_purged_binlog(upstream, server, workloads["up-storage"])
        an_unreadable_event_fails_every_changefeed(upstream, server, list(databases))
    finally:
        print("upstream restart (single node) timings:", timings, f"total {round(time.monotonic() - began)}s, "
              f"load average {os.getloadavg()[0]:.1f}")
        server.stop()


@pytest.mark.skipif(etcd_binary() is None, reason="etcd-server is not installed (scripts/setup.sh)")
def test_cluster_changefeeds_ride_out_an_upstream_restart(upstream, downstream, tmp_path):
    databases = {"upc-mysql": "e2e_upc_mysql", "upc-storage": "e2e_upc_storage"}
    storage_root = str(tmp_path / "storage")
    etcd = EtcdServer(str(tmp_path / "etcd")).start()
    servers = [ServerProcess(str(tmp_path / f"cdc{n}"), upstream.uri,
                             extra_args=("--pd", etcd.endpoint, "--spark-master", "local[1]")) for n in range(2)]
    timings: list = []
    began = time.monotonic()
    try:
        threads = [threading.Thread(target=s.start) for s in servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        create_changefeeds(servers[0], downstream, tmp_path, databases, storage_root)
        workloads = start_workloads(upstream, databases, seed=41)
        load = OutageTolerantLoad(upstream, list(workloads.values()))
        with ChangefeedWatch(servers, list(databases)) as watch, ThrottledLoad(load.step, interval=0.25):
            running = watch.wait_running(180)
            timings.append(("setup", round(running - began, 1)))
            timings.append(outage(upstream, watch, SHORT_OUTAGE))
            for changefeed in databases:
                frozen, at = watch.longest_frozen_normal(changefeed, running)
                timings.append((f"{changefeed} longest frozen normal (s, at s)", frozen, at))
                assert frozen <= FROZEN_NORMAL_BOUND, f"{changefeed} stayed normal with a frozen checkpoint {frozen}s"
        finish_and_compare(upstream, downstream, workloads, databases, storage_root)
        for server in servers:
            assert_index_has_every_transaction_once(upstream, server.data_dir)
    finally:
        print("upstream restart (cluster) timings:", timings, f"total {round(time.monotonic() - began)}s, "
              f"load average {os.getloadavg()[0]:.1f}")
        for server in servers:
            server.stop()
        etcd.stop()
