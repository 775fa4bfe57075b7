"""HA: three `sparkcdc server --pd` captures on one etcd, two changefeeds into a MariaDB under load.

Five rounds of: SIGKILL the capture that runs a changefeed, then SIGKILL the owner, then restart
both (same data dirs) so three captures are alive again. After every kill each changefeed must be
replicating on a live capture other than the killed ones within 30 s (lease TTL 10 s + owner
tick), and in every round each changefeed's checkpoint must move, so the resumed changefeeds
really replicate. At the end (once both checkpoints cover the upstream's last change) `sparkcdc
diff` finds no difference, the tables match row by row, and the servers' logs show no two
captures writing one changefeed's batches at the same time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sparkcdc.testing.compare import diff_tables, read_upstream_table, wait_for_row
from sparkcdc.testing.etcd import EtcdServer, etcd_binary
from sparkcdc.testing.ha import (HACluster, ThrottledLoad, concurrent_writes, upstream_position, wait_until,
                                 write_windows)
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

# Opt-in: five rounds of two kills and two Spark server restarts took 6 min at load average ~12 on
# a 2-core machine (each kill reassigned in 7-10 s; restarting two servers while both checkpoints
# move, 29-39 s a round; setup ~60 s), twice the suite's budget of ~3 min per e2e test.
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(etcd_binary() is None, reason="etcd-server is not installed (scripts/setup.sh)"),
              pytest.mark.skipif(os.environ.get("SPARKCDC_RUN_HA_E2E") != "1",
                                 reason="takes ~6 min on 2 cores (5 rounds of kills and server restarts); "
                                        "set SPARKCDC_RUN_HA_E2E=1 to run it")]

TABLES = ["customers", "orders", "items", "finish_mark"]
CHANGEFEEDS = {"ha-a": "e2e_ha_a", "ha-b": "e2e_ha_b"}  # changefeed -> the database it replicates
ROUNDS = 5
FAILOVER_SECONDS = 30
# A round's checkpoint must move while its two killed servers restart; a takeover costs starting
# the Spark query and its first batch, 15-40 s on this 2-core machine under load.
CHECKPOINT_SECONDS = 150


def test_two_changefeeds_survive_five_rounds_of_killing_a_runner_then_the_owner(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    etcd = EtcdServer(str(tmp_path / "etcd")).start()
    servers = [ServerProcess(str(tmp_path / f"cdc{n}"), mariadb.uri,
                             extra_args=("--pd", etcd.endpoint, "--spark-master", "local[1]"))
               for n in range(3)]
    cluster = HACluster(etcd, servers)
    began = time.monotonic()
    try:
        cluster.start_all()
        wait_until(lambda: len(cluster.live_captures()) == 3, 30, "three captures in etcd")
        listed = json.loads(servers[1].cli("capture", "list").stdout)
        assert sorted(c["address"] for c in listed) == sorted(f"127.0.0.1:{s.port}" for s in servers)
        assert sum(c["is-owner"] for c in listed) == 1

        up = mariadb.connect()
        workloads = {}
        for n, (changefeed_id, database) in enumerate(CHANGEFEEDS.items()):
            config = tmp_path / f"{changefeed_id}.toml"
            config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
            servers[n].cli("changefeed", "create", "-c", changefeed_id, "--config", str(config),
                           "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=2")
            workloads[changefeed_id] = Workload(mariadb.connect(), database, seed=11 + n)
        for workload in workloads.values():
            workload.create_tables()  # after create: the CREATE DATABASE must replicate too
            workload.run(20)
        for changefeed_id in CHANGEFEEDS:
            wait_until(lambda: cluster.runner_of(changefeed_id), 30, f"the owner to assign {changefeed_id}")
        started = {cf: cluster.checkpoint_position(cf) for cf in CHANGEFEEDS}
        for changefeed_id in CHANGEFEEDS:
            wait_until(lambda: cluster.checkpoint_position(changefeed_id) > started[changefeed_id], 180,
                       f"the first checkpoint of {changefeed_id}")
        setup_seconds = round(time.monotonic() - began)

        def load_step():
            for workload in workloads.values():
                workload.run(1)

        timings = []
        with ThrottledLoad(load_step, interval=0.25) as load:
            for round_number in range(ROUNDS):
                round_began = time.monotonic()
                before = {cf: cluster.checkpoint_position(cf) for cf in CHANGEFEEDS}
                target = list(CHANGEFEEDS)[round_number % 2]
                runner = wait_until(lambda: cluster.live_runner(target), FAILOVER_SECONDS,
                                    f"round {round_number}: {target} on a live capture")
                killed: dict[str, ServerProcess] = {}
                for role in ("runner", "owner"):
                    if role == "runner":
                        victim_id = runner
                    else:
                        victim_id = wait_until(lambda: (o := cluster.owner_id()) in cluster.live_captures() and o,
                                               FAILOVER_SECONDS, f"round {round_number}: a live owner")
                    killed_at = time.monotonic()
                    killed[victim_id] = cluster.kill(victim_id)
                    for changefeed_id in CHANGEFEEDS:
                        wait_until(lambda: cluster.live_runner(changefeed_id),
                                   FAILOVER_SECONDS - (time.monotonic() - killed_at),
                                   f"round {round_number}: {changefeed_id} on another capture after killing the "
                                   f"{role} {victim_id}")
                    timings.append((round_number, role, round(time.monotonic() - killed_at, 1)))
                restarted_at = time.monotonic()
                # Same data dirs (each index resumes where it stopped), both at once, while the
                # surviving capture must move both checkpoints.
                with ThreadPoolExecutor(len(killed)) as pool:
                    restarts = [pool.submit(server.start, 240) for server in killed.values()]
                    for changefeed_id in CHANGEFEEDS:
                        wait_until(lambda: cluster.checkpoint_position(changefeed_id) > before[changefeed_id],
                                   CHECKPOINT_SECONDS - (time.monotonic() - round_began),
                                   f"round {round_number}: the checkpoint of {changefeed_id} to move")
                    for restart in restarts:
                        restart.result()
                wait_until(lambda: len(cluster.live_captures()) == 3, 30, f"round {round_number}: three captures")
                timings.append((round_number, "restart+checkpoint", round(time.monotonic() - restarted_at, 1)))
        assert load.steps > 0
        for changefeed_id, workload in workloads.items():
            workload.finish()
        end = upstream_position(up)
        down = downstream.connect()
        for changefeed_id, database in CHANGEFEEDS.items():
            wait_for_row(down, database, "finish_mark", timeout=180)
            cluster.wait_checkpoint_reaches(changefeed_id, end, 120)
        print(f"setup {setup_seconds}s; (round, kill or phase, seconds):", timings,
              f"total {round(time.monotonic() - began)}s, load average {os.getloadavg()[0]:.1f}")

        diff = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "diff", "--source", mariadb.uri,
                               "--target", downstream.uri, *[f"--filter={db}.*" for db in CHANGEFEEDS.values()]],
                              capture_output=True, text=True, timeout=300)
        assert diff.returncode == 0, diff.stdout + diff.stderr
        for database in CHANGEFEEDS.values():
            for table in TABLES:
                expected = read_upstream_table(up, database, table)
                assert expected, f"workload left {database}.{table} empty"
                problems = diff_tables(expected, read_upstream_table(down, database, table))
                assert not problems, f"{database}.{table}: " + "\n".join(problems)
        logs = {f"cdc{n}": os.path.join(s.data_dir, "server.log") for n, s in enumerate(servers)}
        for changefeed_id in CHANGEFEEDS:
            assert not concurrent_writes(write_windows(logs, changefeed_id)), \
                f"two captures wrote {changefeed_id} at once"
    finally:
        cluster.stop_all()
        etcd.stop()
