"""Issue 9's syncpoint test: with enable-sync-point, every syncpoint the changefeed records in
the downstream's tidb_cdc.syncpoint_v1 is a point where the downstream tables equal the upstream
tables as of that commit-ts. The upstream writes one multi-table transaction at a time and then
pauses, so its state between two pauses is known; each recorded syncpoint's upstream position
falls in one pause, whose upstream state the downstream must show. The tidb_cdc schema is not
replicated and `sparkcdc diff` over every table passes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from sparkcdc.model.position import BinlogPosition
from sparkcdc import failpoint
from sparkcdc.pipeline.runner import SYNC_POINT_INTERVAL_FAILPOINT
from sparkcdc.testing.compare import read_upstream_table
from sparkcdc.testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

DATABASE = "e2e_sync"
TABLES = ("stock", "orders")
SETUP = [
    f"CREATE DATABASE {DATABASE}",
    f"CREATE TABLE {DATABASE}.stock (sku INT PRIMARY KEY, qty INT NOT NULL)",
    f"CREATE TABLE {DATABASE}.orders (id INT PRIMARY KEY, sku INT NOT NULL, qty INT NOT NULL)",
    f"INSERT INTO {DATABASE}.stock VALUES (1, 100), (2, 100), (3, 100)",
]
PAUSES = 4


def execute(conn, statements):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def master_position(conn) -> tuple[int, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return BinlogPosition(file, int(pos)).key()


def snapshot(conn):
    return {t: read_upstream_table(conn, DATABASE, t) for t in TABLES}


def syncpoints(conn) -> list[tuple[int, tuple[int, int]]]:
    with conn.cursor() as cur:
        try:
            cur.execute("SELECT primary_ts, upstream_position FROM tidb_cdc.syncpoint_v1 "
                        "WHERE changefeed = 'with-syncpoints' ORDER BY CAST(primary_ts AS UNSIGNED)")
        except Exception:  # not created yet
            return []
        return [(int(ts), BinlogPosition.parse(position).key()) for ts, position in cur.fetchall()]


def test_downstream_equals_upstream_at_every_syncpoint(mariadb, mariadb_factory, tmp_path, monkeypatch):
    downstream = mariadb_factory()
    up, down = mariadb.connect(), downstream.connect()
    execute(up, [f"DROP DATABASE IF EXISTS {DATABASE}", *SETUP])
    execute(down, SETUP)  # the downstream starts with the upstream's data, as at a changefeed's start-ts
    config = tmp_path / "cf.toml"
    config.write_text(f'enable-sync-point = true\n[filter]\nrules = ["{DATABASE}.*"]\n')
    monkeypatch.setenv(failpoint.ENV, f"{SYNC_POINT_INTERVAL_FAILPOINT}=return(2s)")
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    try:
        server.cli("changefeed", "create", "-c", "with-syncpoints", "--config", str(config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=4")
        # Pause k runs from position positions[k] (after transaction k) to the next transaction.
        positions, states = [master_position(up)], [snapshot(up)]
        for k in range(1, PAUSES + 1):
            deadline = time.monotonic() + 90
            while not any(positions[-1] <= position for _, position in syncpoints(down)):
                assert time.monotonic() < deadline, f"no syncpoint during pause {k - 1}"
                time.sleep(0.5)
            # The downstream does not move while the upstream is paused: it is as at the syncpoint.
            assert snapshot(down) == states[-1], f"pause {k - 1}"
            with up.cursor() as cur:  # one multi-table transaction, then the next pause
                cur.execute("BEGIN")
                cur.execute(f"UPDATE {DATABASE}.stock SET qty = qty - {k} WHERE sku IN (1, {k % 3 + 1})")
                cur.execute(f"INSERT INTO {DATABASE}.orders VALUES ({k}, 1, {k}), ({100 + k}, {k % 3 + 1}, {k})")
                if k > 2:
                    cur.execute(f"DELETE FROM {DATABASE}.orders WHERE id = {k - 2}")
                cur.execute("COMMIT")
            positions.append(master_position(up))
            states.append(snapshot(up))
        # The last pause: caught up, and a syncpoint in it.
        deadline = time.monotonic() + 90
        while not any(positions[-1] <= position for _, position in syncpoints(down)):
            assert time.monotonic() < deadline, f"no syncpoint during pause {PAUSES}"
            time.sleep(0.5)
        assert snapshot(down) == states[-1], f"pause {PAUSES}"
        # Every recorded syncpoint lies in one of the pauses, whose downstream state was checked.
        recorded = syncpoints(down)
        assert [ts for ts, _ in recorded] == sorted(ts for ts, _ in recorded)
        pauses_seen = set()
        for primary_ts, position in recorded:
            assert position >= positions[0], (primary_ts, position, positions)
            pauses_seen.add(max(k for k, start in enumerate(positions) if start <= position))
        assert pauses_seen == set(range(PAUSES + 1))
        # tidb_cdc is never compared or replicated: diff over every table passes.
        diff = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "diff", "--source", mariadb.uri,
                               "--target", downstream.uri], capture_output=True, text=True, timeout=300)
        assert "tidb_cdc" not in diff.stdout
        assert f"{DATABASE}.orders: equal" in diff.stdout, diff.stdout + diff.stderr
    finally:
        server.stop()
