"""A stopped etcd (SIGSTOP, longer than the capture session TTL) under load: captures self-fence.

Two `sparkcdc server --pd` captures, one changefeed into a MariaDB. While etcd is stopped no
capture can renew its lease, so the one running the changefeed must stop it by its own clock
(`session lost`): from then until etcd returns the downstream must not change, although the
upstream keeps changing. After SIGCONT the captures register again, the changefeed runs again,
and at the end `sparkcdc diff` and a row compare find nothing lost; the servers' logs show no
two captures writing the changefeed's batches at the same time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sparkcdc.testing.compare import diff_tables, read_upstream_table, wait_for_row
from sparkcdc.testing.etcd import EtcdServer, etcd_binary
from sparkcdc.testing.ha import (HACluster, ThrottledLoad, concurrent_writes, upstream_position, wait_until,
                                 write_windows)
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(etcd_binary() is None, reason="etcd-server is not installed (scripts/setup.sh)")]

DATABASE = "e2e_etcd_stop"
TABLES = ["customers", "orders", "items", "finish_mark"]
SESSION_TTL = 10  # the default capture-session-ttl
PAUSE_SECONDS = SESSION_TTL + 8


def downstream_state(conn) -> dict:
    return {table: read_upstream_table(conn, DATABASE, table) for table in TABLES[:-1]}


def test_captures_stop_writing_while_etcd_is_stopped_and_resume_after_it_returns(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    etcd = EtcdServer(str(tmp_path / "etcd")).start()
    servers = [ServerProcess(str(tmp_path / f"cdc{n}"), mariadb.uri,
                             extra_args=("--pd", etcd.endpoint, "--spark-master", "local[1]",
                                         "--capture-session-ttl", str(SESSION_TTL)))
               for n in range(2)]
    cluster = HACluster(etcd, servers)
    began = time.monotonic()
    try:
        cluster.start_all()
        wait_until(lambda: len(cluster.live_captures()) == 2, 30, "two captures in etcd")
        up = mariadb.connect()  # read by this thread while the load thread writes through its own
        workload = Workload(mariadb.connect(), DATABASE, seed=5)
        config = tmp_path / "cf.toml"
        config.write_text(f'[filter]\nrules = ["{DATABASE}.*"]\n')
        servers[0].cli("changefeed", "create", "-c", "stop-feed", "--config", str(config),
                       "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
        workload.create_tables()
        workload.run(20)
        runner = wait_until(lambda: cluster.live_runner("stop-feed"), 30, "the owner to assign the changefeed")
        runner_server = cluster.live_captures()[runner]
        down = downstream.connect()
        wait_for_row(down, DATABASE, "customers", timeout=150)

        with ThrottledLoad(lambda: workload.run(1), interval=0.2) as load_thread:
            time.sleep(3)
            before_pause = cluster.checkpoint_position("stop-feed")
            paused_at = time.monotonic()
            etcd.pause()
            try:
                # The session counts as lost 1 s before the TTL by the capture's own clock; give the
                # in-flight batch (whose checkpoint write cannot succeed) 3 s more to end.
                time.sleep(SESSION_TTL + 2)
                fenced = downstream_state(down)
                upstream_during = read_upstream_table(up, DATABASE, "customers")
                time.sleep(PAUSE_SECONDS - (time.monotonic() - paused_at))
                still = downstream_state(down)
                assert read_upstream_table(up, DATABASE, "customers") != upstream_during, "the load stopped"
            finally:
                etcd.resume()
            resumed_at = time.monotonic()
            for table in fenced:
                assert diff_tables(fenced[table], still[table]) == [], \
                    f"{table} changed downstream while etcd was stopped: a capture kept writing"
            wait_until(lambda: cluster.live_runner("stop-feed"), 30, "the changefeed assigned after etcd returned")
            wait_until(lambda: cluster.checkpoint_position("stop-feed") > before_pause, 120,
                       "the checkpoint to move after etcd returned")
            recovered = round(time.monotonic() - resumed_at, 1)
        assert load_thread.steps > 0
        workload.finish()
        wait_for_row(down, DATABASE, "finish_mark", timeout=150)
        cluster.wait_checkpoint_reaches("stop-feed", upstream_position(up), 120)

        logs = {f"cdc{n}": os.path.join(s.data_dir, "server.log") for n, s in enumerate(servers)}
        with open(os.path.join(runner_server.data_dir, "server.log"), encoding="utf-8", errors="replace") as log:
            assert "this capture lost its session" in log.read(), "the runner never noticed its session was lost"
        assert not concurrent_writes(write_windows(logs, "stop-feed")), "two captures wrote stop-feed at once"
        diff = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "diff", "--source", mariadb.uri,
                               "--target", downstream.uri, "--filter", f"{DATABASE}.*"],
                              capture_output=True, text=True, timeout=300)
        assert diff.returncode == 0, diff.stdout + diff.stderr
        for table in TABLES:
            expected = read_upstream_table(up, DATABASE, table)
            assert expected, f"workload left {table} empty"
            problems = diff_tables(expected, read_upstream_table(down, DATABASE, table))
            assert not problems, f"{table}: " + "\n".join(problems)
        print(f"etcd stopped {PAUSE_SECONDS}s; checkpoint moved {recovered}s after SIGCONT; "
              f"total {round(time.monotonic() - began)}s, load average {os.getloadavg()[0]:.1f}")
    finally:
        cluster.stop_all()
        etcd.stop()
