"""Issue 9's disaster test: multi-table transactions replicate into MariaDB with a redo log; the
server is SIGKILLed while the downstream is mid-batch (the kill-after-first-table failpoint kills it right after the
first table of a multi-table batch is applied); `sparkcdc redo apply` then brings the downstream
to exactly the upstream's state as of the redo resolved-ts (the upstream stops writing before
the fatal batch, so that state is the upstream's current one): `sparkcdc diff` and a row-by-row
comparison find no difference."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from sparkcdc import failpoint
from sparkcdc.pipeline.batch_sink import KILL_AFTER_FIRST_TABLE
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

DATABASE = "e2e_redo"
TABLES = ("accounts", "transfers", "kill_trigger")


def execute(conn, *statements, args=None):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement, args)


def snapshot(conn):
    return {t: read_upstream_table(conn, DATABASE, t) for t in TABLES}


def transfer(conn, rng: random.Random, number: int) -> None:
    """One multi-table transaction: two balances move, a transfer row, now and then a key change."""
    a, b = rng.sample(range(1, 41), 2)
    amount = rng.randint(1, 50)
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"UPDATE {DATABASE}.accounts SET balance = balance - %s WHERE id = %s", (amount, a))
        cur.execute(f"UPDATE {DATABASE}.accounts SET balance = balance + %s WHERE id = %s", (amount, b))
        cur.execute(f"INSERT INTO {DATABASE}.transfers (id, from_id, to_id, amount) VALUES (%s, %s, %s, %s)",
                    (number, a, b, amount))
        if number % 7 == 0:  # a unique-key change and a primary-key change
            cur.execute(f"UPDATE {DATABASE}.accounts SET email = CONCAT('n', %s, '-', email) WHERE id = %s",
                        (number, a))
            cur.execute(f"UPDATE {DATABASE}.transfers SET id = id + 100000 WHERE id = %s", (number - 1,))
        if number % 11 == 0:
            cur.execute(f"DELETE FROM {DATABASE}.transfers WHERE id = %s", (number - 3,))
        cur.execute("COMMIT")


def test_redo_apply_restores_the_downstream_after_a_mid_batch_crash(mariadb, mariadb_factory, tmp_path,
                                                                     monkeypatch):
    downstream = mariadb_factory()
    up = mariadb.connect()
    execute(up, f"DROP DATABASE IF EXISTS {DATABASE}")
    redo_uri = f"file://{tmp_path}/redo"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{DATABASE}.*"]\n'
                      f'[consistent]\nlevel = "eventual"\nstorage = "{redo_uri}"\ncompression = "lz4"\n')
    monkeypatch.setenv(failpoint.ENV, f"{KILL_AFTER_FIRST_TABLE}=return(kill_trigger)")
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    try:
        server.cli("changefeed", "create", "-c", "with-redo", "--config", str(config),
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/?worker-count=4")
        execute(up, f"CREATE DATABASE {DATABASE}",
                f"CREATE TABLE {DATABASE}.accounts (id INT PRIMARY KEY, email VARCHAR(64) NOT NULL, "
                "balance INT NOT NULL, UNIQUE KEY uk_email (email))",
                f"CREATE TABLE {DATABASE}.transfers (id INT PRIMARY KEY, from_id INT, to_id INT, amount INT)",
                f"CREATE TABLE {DATABASE}.kill_trigger (id INT PRIMARY KEY)")
        execute(up, f"INSERT INTO {DATABASE}.accounts VALUES " +
                ", ".join(f"({i}, 'user{i}@example.com', 1000)" for i in range(1, 41)))
        rng = random.Random(9)
        for number in range(1, 121):
            transfer(up, rng, number)
            if number == 60:
                execute(up, f"ALTER TABLE {DATABASE}.transfers ADD COLUMN memo VARCHAR(20) NULL DEFAULT 'm'")
            time.sleep(0.02)
        # Wait until the downstream has most of it, so the log's checkpoint is well past zero.
        deadline = time.monotonic() + 120
        down = downstream.connect()
        while True:
            try:
                with down.cursor() as cur:
                    cur.execute(f"SELECT COUNT(*) FROM {DATABASE}.transfers WHERE memo = 'm'")
                    if cur.fetchone()[0] > 0:
                        break
            except Exception:
                pass
            assert time.monotonic() < deadline, "the changefeed did not catch up"
            time.sleep(0.5)
        # The last transaction touches three tables; the server dies after applying the first.
        with up.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {DATABASE}.accounts SET balance = balance + 1")
            cur.executemany(f"INSERT INTO {DATABASE}.transfers (id, from_id, to_id, amount) VALUES (%s, 1, 2, 3)",
                            [(200_000 + i,) for i in range(300)])
            cur.execute(f"INSERT INTO {DATABASE}.kill_trigger VALUES (1)")
            cur.execute("COMMIT")
        server.process.wait(timeout=120)  # the failpoint SIGKILLs the server's process group
        log = (tmp_path / "cdc" / "server.log").read_text()
        assert f"FAILPOINT {KILL_AFTER_FIRST_TABLE}: killing the server" in log
        assert f"FAILPOINT ARMED: {KILL_AFTER_FIRST_TABLE}=return(kill_trigger)" in log

        expected = snapshot(up)
        before = snapshot(down)
        assert before != expected, "the crash should leave the downstream mid-batch"
        assert before["accounts"] == expected["accounts"], "the batch's first table was applied"
        assert before["kill_trigger"] == {}

        meta = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "redo", "meta", "--storage", redo_uri],
                              capture_output=True, text=True, timeout=60)
        assert meta.returncode == 0, meta.stderr
        checkpoint, resolved = (int(part.split(":")[1]) for part in meta.stdout.strip().split(", "))
        assert 0 < checkpoint < resolved
        apply = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "redo", "apply", "--storage", redo_uri,
                                "--tmp-dir", str(tmp_path / "tmp"),
                                "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/"],
                               capture_output=True, text=True, timeout=300)
        assert apply.returncode == 0, apply.stderr
        after = snapshot(down)
        for table in TABLES:
            assert diff_tables(expected[table], after[table]) == [], table
        assert len(after["transfers"]) > 300 and after["kill_trigger"]
        diff = subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "diff", "--source", mariadb.uri,
                               "--target", downstream.uri, "--filter", f"{DATABASE}.*"],
                              capture_output=True, text=True, timeout=300)
        assert diff.returncode == 0, diff.stdout + diff.stderr
    finally:
        server.stop()
