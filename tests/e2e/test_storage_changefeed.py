"""A changefeed from a real MariaDB through Spark to file storage, rebuilt and compared.

One server serves a canal-json and a csv changefeed over the same workload; a second one is
SIGKILLed mid-workload and restarted.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts, rebuild_tables
from sparkcdc.testing.alltypes import create_alltypes
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.e2e

WORKLOAD_TABLES = ["customers", "orders", "items", "finish_mark"]


def wait_replicated(root: str, protocol: str, database: str, mark: int, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(root, "metadata")):
            tables = rebuild_tables(root, protocol)
            if (mark,) in tables.get((database, "finish_mark"), {}) or (str(mark),) in tables.get(
                (database, "finish_mark"), {}
            ):
                return tables
        time.sleep(1)
    raise AssertionError(f"finish mark {mark} of {database} not replicated to {root} in {timeout}s")


def assert_tables_equal(conn, database: str, rebuilt, tables=WORKLOAD_TABLES) -> None:
    for table in tables:
        expected = read_upstream_table(conn, database, table)
        actual = {
            tuple(str(k) for k in key): row for key, row in rebuilt.get((database, table), {}).items()
        }
        assert expected, f"workload left {table} empty"
        problems = diff_tables(expected, actual)
        assert not problems, f"{database}.{table}: " + "\n".join(problems)


def write_large_transaction(conn, database: str, rows: int = 5_000) -> None:
    """One transaction over 8 MB of binlog (wide rows, so few of them), which the puller cuts into
    pieces that reach the sink in several micro-batches: inserts, then updates of rows an earlier
    piece inserted."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.bulk (id INT PRIMARY KEY, k INT NOT NULL, doc VARCHAR(2000) NOT NULL)")
        cur.execute("BEGIN")
        for first in range(1, rows + 1, 1000):
            cur.executemany(f"INSERT INTO `{database}`.bulk VALUES (%s, %s, %s)",
                            [(i, i % 97, (f"{i}-" * 400)[:1800]) for i in range(first, first + 1000)])
        cur.execute(f"UPDATE `{database}`.bulk SET k = k + 1000, doc = REVERSE(doc) WHERE id % 10 = 0")
        cur.execute("COMMIT")


@pytest.fixture(scope="module")
def server(mariadb, tmp_path_factory):
    process = ServerProcess(str(tmp_path_factory.mktemp("cdc")), mariadb.uri).start()
    yield process
    process.stop()


def test_canal_json_and_csv_rebuild_equals_upstream(server, mariadb, tmp_path):
    database = "e2e_formats"
    outputs = {
        "canal-json": str(tmp_path / "canal"),
        "csv": str(tmp_path / "csv"),
    }
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    for changefeed_id, protocol in (("cj", "canal-json"), ("csv", "csv")):
        server.cli(
            "changefeed", "create", "-c", changefeed_id, "--config", str(config),
            "--sink-uri", f"file://{outputs[protocol]}?protocol={protocol}&enable-tidb-extension=true"
            if protocol == "canal-json" else f"file://{outputs[protocol]}?protocol=csv",
        )
    conn = mariadb.connect()
    workload = Workload(conn, database, seed=7)
    workload.create_tables()
    create_alltypes(conn, database)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE `{database}`.alltypes SET vc = CONCAT(vc, '!'), i = i + 1 WHERE i = 7")
    workload.run(150)
    write_large_transaction(conn, database)
    workload.finish()

    for protocol, root in outputs.items():
        rebuilt = wait_replicated(root, protocol, database, 1)
        assert_tables_equal(conn, database, rebuilt, WORKLOAD_TABLES + ["alltypes", "bulk"])
    index = TxnIndex(os.path.join(server.data_dir, "txn-index.sqlite"))
    pieces = max(t.piece_count for t in index.txns_between(index.first_ts(), index.resolved_ts()))
    assert pieces >= 2, "the large transaction went through in pieces, over several micro-batches"

    # canal-json lines carry TiCDC's fields; the tidb extension carries the commit-ts.
    data_files = [
        os.path.join(d, f) for d, _, files in os.walk(os.path.join(outputs["canal-json"], database))
        for f in files if f.startswith("CDC") and f.endswith(".json")
    ]
    assert data_files
    first = json.loads(open(data_files[0], encoding="utf-8").readline())
    assert list(first)[:7] == ["id", "database", "table", "pkNames", "isDdl", "type", "es"]
    assert first["es"] == first["_tidb"]["commitTs"] >> 18
    assert all(v is None or isinstance(v, str) for v in first["data"][0].values())

    listed = json.loads(server.cli("changefeed", "list").stdout)
    assert {item["id"] for item in listed} >= {"cj", "csv"}
    assert all(item["summary"]["state"] == "normal" for item in listed)

    # With local executors the read tasks hand their batches over as files (pipeline/source.py):
    # every file was taken by the driver, and a removed changefeed leaves no directory behind.
    spool = os.path.join(server.data_dir, "changefeeds", "default", "{}", "spool")
    assert os.path.isdir(spool.format("cj")) and os.listdir(spool.format("cj")) == []
    server.cli("changefeed", "remove", "-c", "csv")
    assert not os.path.exists(spool.format("csv"))


def test_sigkill_mid_workload_loses_nothing(mariadb, tmp_path):
    database = "e2e_kill"
    root = str(tmp_path / "out")
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    checkpoints: list[int] = []
    stop_polling = threading.Event()

    def poll_metadata():
        path = os.path.join(root, "metadata")
        while not stop_polling.is_set():
            if os.path.exists(path):
                checkpoints.append(checkpoint_ts(root))
            time.sleep(0.05)

    poller = threading.Thread(target=poll_metadata, daemon=True)
    try:
        server.cli("changefeed", "create", "-c", "killme", "--config", str(config),
                   "--sink-uri", f"file://{root}?protocol=canal-json&enable-tidb-extension=true")
        poller.start()
        conn = mariadb.connect()
        workload = Workload(conn, database, seed=11)
        workload.create_tables()
        writer = threading.Thread(target=workload.run, args=(300,))
        writer.start()
        # Kill once the changefeed has written something and the workload is still going.
        deadline = time.monotonic() + 120
        while not checkpoints and time.monotonic() < deadline:
            time.sleep(0.2)
        assert checkpoints, "changefeed made no progress before the kill"
        server.kill()
        writer.join()
        killed_at = checkpoints[-1]

        server.start()
        workload.finish()
        rebuilt = wait_replicated(root, "canal-json", database, 1)
        assert_tables_equal(conn, database, rebuilt)
        assert checkpoint_ts(root) > killed_at
        state = server.query("killme")
        assert state["state"] == "normal"
    finally:
        stop_polling.set()
        server.stop()
    assert checkpoints == sorted(checkpoints), "metadata checkpoint-ts moved backwards"


def test_flush_interval_holds_rows_across_batches_and_a_pause_does_not_repeat_them(server, mariadb, tmp_path):
    """flush-interval=2s on a real changefeed: a second of single-row transactions, spread over
    several micro-batches, lands in one data file, written while the upstream is idle (no DDL
    after them to force it). Rows still held when the changefeed pauses are not written then: the
    resumed changefeed writes them once, in a file of their own."""
    database = "e2e_held"
    root = str(tmp_path / "held")
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{database}.*"]\n')
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v VARCHAR(16))")
    server.cli("changefeed", "create", "-c", "held", "--config", str(config),
               "--sink-uri", f"file://{root}?protocol=canal-json&enable-tidb-extension=true&flush-interval=2s")
    table_dir = os.path.join(root, database, "t")
    start_ts = server.checkpoint("held")

    def inserts_by_file(table_dir: str = table_dir) -> dict[str, list[str]]:
        found = {}
        for directory, _, names in os.walk(table_dir):
            for name in sorted(n for n in names if n.startswith("CDC") and n.endswith(".json")):
                with open(os.path.join(directory, name), encoding="utf-8") as handle:
                    found[name] = [row["id"] for line in handle for row in (json.loads(line).get("data") or [])]
        return found

    def wait_for_ids(count: int) -> dict[str, list[str]]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = inserts_by_file()
            if sum(map(len, found.values())) >= count:
                return found
            time.sleep(0.2)
        raise AssertionError(f"{count} rows not in {table_dir} within 60s: {inserts_by_file()}")

    with conn.cursor() as cur:
        for i in range(1, 11):
            cur.execute(f"INSERT INTO `{database}`.t VALUES ({i}, 'a')")
            time.sleep(0.1)
    first = wait_for_ids(10)
    assert list(first.values()) == [[str(i) for i in range(1, 11)]], first
    assert checkpoint_ts(root) == server.checkpoint("held") > start_ts

    # The batch that reaches target-ts writes what it holds: the changefeed finishes long before
    # its 10-minute flush-interval.
    target_ts, target_root = server.checkpoint("held"), str(tmp_path / "target")
    server.cli("changefeed", "create", "-c", "held-target", "--config", str(config), "--start-ts", str(start_ts),
               "--target-ts", str(target_ts), "--sink-uri",
               f"file://{target_root}?protocol=canal-json&enable-tidb-extension=true&flush-interval=10m")
    deadline = time.monotonic() + 60
    while server.query("held-target")["state"] != "finished" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert server.query("held-target")["state"] == "finished"
    assert list(inserts_by_file(os.path.join(target_root, database, "t")).values()) == list(first.values())
    assert checkpoint_ts(target_root) == target_ts
    server.cli("changefeed", "remove", "-c", "held-target")

    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{database}`.t VALUES (11, 'b'), (12, 'b')")
        cur.execute(f"UPDATE `{database}`.t SET v = 'c' WHERE id = 1")
    time.sleep(1)  # read and held, not yet 2 s old
    server.cli("changefeed", "pause", "-c", "held")
    paused = inserts_by_file()
    server.cli("changefeed", "resume", "-c", "held")
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{database}`.t VALUES (13, 'd')")
    found = wait_for_ids(14)  # 13 inserts and the update of id 1
    ids = sorted(int(i) for rows in found.values() for i in rows)
    assert ids == sorted([*range(1, 14), 1]), f"each change written once: {found} (at the pause: {paused})"
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.finish_mark (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO `{database}`.finish_mark VALUES (1)")
    assert_tables_equal(conn, database, wait_replicated(root, "canal-json", database, 1), ["t"])
    server.cli("changefeed", "remove", "-c", "held")
