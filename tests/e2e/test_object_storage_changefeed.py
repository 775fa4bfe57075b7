"""MariaDB -> one `sparkcdc server` -> a changefeed per backend (S3, GCS and Azure Blob
emulators; canal-json and csv) -> a `sparkcdc consumer storage` process each -> a second
MariaDB, compared table by table.

One workload database per changefeed keeps the downstreams apart in one MariaDB. The workload
covers CREATE DATABASE/TABLE, ALTER ADD COLUMN mid-stream, PK-changing updates, and a table
that existed before the changefeeds (its first schema file has no DDL query). The server is
SIGKILLed mid-workload and restarted, and one consumer is SIGKILLed and restarted, resuming
from the checkpoint it keeps downstream.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

import pytest

from sparkcdc.consumer.storage_consumer import upstream_identity
from sparkcdc.consumer.storage_reader import checkpoint_ts
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.emulators import Emulator, EmulatorNotInstalled, binary_for, start_emulator
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

BACKENDS = ("s3", "gcs", "azblob")
SHORT = {"canal-json": "cj", "csv": "csv"}
# Every backend and every protocol once: three changefeeds (~80 s), which keeps the suite in its
# time budget. SPARKCDC_E2E_OBJECT_STORAGE_FULL=1 runs both protocols on every backend (six, ~140 s).
MATRIX = (
    [(b, p) for b in BACKENDS for p in SHORT]
    if os.environ.get("SPARKCDC_E2E_OBJECT_STORAGE_FULL")
    else [("s3", "canal-json"), ("gcs", "csv"), ("azblob", "canal-json")]
)
TABLES = ["customers", "orders", "items", "pre", "finish_mark"]
PRE_TABLE = ("CREATE TABLE pre (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL, d DECIMAL(8,2), "
             "at DATETIME(3) NULL, b VARBINARY(4))")


@dataclass
class Feed:
    backend: str
    protocol: str
    database: str
    uri: str
    config: str
    consumer: subprocess.Popen | None = None
    log_path: str = ""


@pytest.fixture(scope="module")
def emulators(tmp_path_factory):
    started: dict[str, Emulator] = {}
    try:
        for backend in BACKENDS:
            try:
                binary_for(backend)
            except EmulatorNotInstalled as exc:
                pytest.skip(f"{backend} emulator not installed ({exc}); run scripts/setup-emulators.sh")
            started[backend] = start_emulator(backend, str(tmp_path_factory.mktemp(backend)))
        yield started
    finally:
        for emulator in started.values():
            emulator.stop()


def start_consumer(feed: Feed, downstream_uri: str) -> None:
    with open(feed.log_path, "ab") as log:
        feed.consumer = subprocess.Popen(
            [sys.executable, "-m", "sparkcdc.cli.main", "consumer", "storage",
             "--upstream-uri", feed.uri, "--downstream-uri", downstream_uri,
             "--config", feed.config, "--flush-interval", "1s"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_consumer(feed: Feed, sig: int = signal.SIGTERM) -> None:
    if feed.consumer is not None and feed.consumer.poll() is None:
        feed.consumer.send_signal(sig)
        try:
            feed.consumer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            feed.consumer.kill()
            feed.consumer.wait()


def tail(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read()[-3000:].decode(errors="replace")


def consumer_checkpoint(down, feed: Feed) -> int:
    with down.cursor() as cursor:
        try:
            cursor.execute("SELECT checkpoint_ts FROM sparkcdc_consumer.storage_checkpoint WHERE upstream = %s",
                           (upstream_identity(feed.uri),))
        except Exception:  # not created yet
            return 0
        row = cursor.fetchone()
        return int(row[0]) if row else 0


def wait_all_replicated(down, feeds: list[Feed], timeout: float) -> None:
    """Until each consumer has saved a checkpoint covering its finish mark: a consumer saves
    only after a whole round (every table) is committed downstream."""
    pending = {feed.database: feed for feed in feeds}
    targets: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for database, feed in list(pending.items()):
            assert feed.consumer.poll() is None, (
                f"consumer of {database} exited with {feed.consumer.returncode}:\n{tail(feed.log_path)}")
            if database not in targets:
                with down.cursor() as cursor:
                    try:
                        if cursor.execute(f"SELECT 1 FROM `{database}`.finish_mark"):
                            targets[database] = checkpoint_ts(feed.uri)
                    except Exception:  # not created downstream yet
                        pass
            if database in targets and consumer_checkpoint(down, feed) >= targets[database]:
                del pending[database]
        time.sleep(1)
    assert not pending, "not replicated in time: " + ", ".join(
        f"{d} (storage checkpoint {checkpoint_ts(f.uri)})\n{tail(f.log_path)}" for d, f in pending.items())


def test_every_backend_and_protocol_replays_into_mariadb(mariadb, mariadb_factory, emulators, tmp_path):
    started = time.monotonic()
    downstream_db = mariadb_factory()
    downstream_uri = f"mysql://root@127.0.0.1:{downstream_db.port}/?safe-mode=true&batch-dml-enable=false"
    up = mariadb.connect()
    run = uuid.uuid4().hex[:6]
    feeds: list[Feed] = []
    for backend, emulator in emulators.items():
        bucket = f"cdc-{backend}-{run}"
        emulator.create_bucket(bucket)
        for protocol in [p for b, p in MATRIX if b == backend]:
            short = SHORT[protocol]
            database = f"os_{backend}_{short}_{run}"
            extra = {"enable_tidb_extension": "true"} if protocol == "canal-json" else {}
            uri = emulator.uri(bucket, short, protocol=protocol, flush_interval="2s", **extra)
            config = tmp_path / f"{database}.toml"
            config.write_text(f'[filter]\nrules = ["{database}.*"]\n[sink.csv]\ninclude-commit-ts = true\n')
            feeds.append(Feed(backend, protocol, database, uri, str(config),
                              log_path=str(tmp_path / f"consumer-{database}.log")))
    workloads = {feed.database: Workload(mariadb.connect(), feed.database, seed=5) for feed in feeds}
    with up.cursor() as cursor:
        for feed in feeds:  # a table from before the changefeed: no DDL query in its schema file
            cursor.execute(f"CREATE DATABASE `{feed.database}`")
            cursor.execute(f"USE `{feed.database}`")
            cursor.execute(PRE_TABLE)

    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    try:
        for feed in feeds:
            server.cli("changefeed", "create", "-c", feed.database.replace("_", "-"),
                       "--config", feed.config, "--sink-uri", feed.uri)
        for feed in feeds:
            start_consumer(feed, downstream_uri)

        def first_half() -> None:
            for workload in workloads.values():
                workload.create_tables()  # the database exists already: IF NOT EXISTS
                workload._exec("INSERT INTO pre VALUES (1, 'one', 1.50, '2024-01-02 03:04:05.678', x'00ff'), "
                               "(2, 'two', NULL, NULL, NULL)")
                workload.run(30)

        writer = threading.Thread(target=first_half)
        writer.start()
        # Crash the server once every changefeed has checkpointed something, mid-workload.
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not all(checkpoint_ts(f.uri) for f in feeds):
            time.sleep(0.5)
        assert all(checkpoint_ts(f.uri) for f in feeds), (
            "a changefeed made no progress before the kill:\n" + tail(server.log_path or
                                                                     str(tmp_path / "cdc" / "server.log")))
        server.kill()
        stop_consumer(feeds[0], signal.SIGKILL)  # and one consumer, to resume from its saved checkpoint
        writer.join()

        for database, workload in workloads.items():
            workload._exec(f"USE `{database}`")
            workload._exec("ALTER TABLE orders ADD COLUMN region VARCHAR(16) NULL DEFAULT 'eu'")
            workload._exec("UPDATE orders SET region = 'us' WHERE id % 2 = 0")
            workload._exec("UPDATE pre SET v = 'uno', d = d + 1 WHERE id = 1")
            workload._exec("DELETE FROM pre WHERE id = 2")
            workload._exec("INSERT INTO pre VALUES (3, 'three', -0.01, '1999-12-31 23:59:59.999', '')")
        server.start()
        start_consumer(feeds[0], downstream_uri)
        for workload in workloads.values():
            workload.run(30)
            workload.finish()

        down = downstream_db.connect()
        wait_all_replicated(down, feeds, timeout=240)
        for feed in feeds:
            for table in TABLES:
                expected = read_upstream_table(up, feed.database, table)
                assert expected, f"{feed.database}.{table} is empty upstream"
                problems = diff_tables(expected, read_upstream_table(down, feed.database, table))
                assert not problems, f"{feed.backend}/{feed.protocol} {table}: " + "\n".join(problems)
        # And what a user runs: `sparkcdc diff` by chunked checksums over every replicated table.
        diff = subprocess.run(
            [sys.executable, "-m", "sparkcdc.cli.main", "diff", "--source", mariadb.uri,
             "--target", f"mysql://root@127.0.0.1:{downstream_db.port}/", "--filter", f"os_*_{run}.*"],
            capture_output=True, text=True, timeout=120)
        assert diff.returncode == 0, diff.stdout + diff.stderr
        with down.cursor() as cursor:
            cursor.execute("SELECT COUNT(*), MIN(checkpoint_ts) > 0 FROM sparkcdc_consumer.storage_checkpoint")
            assert cursor.fetchone() == (len(feeds), 1)
        listed = json.loads(server.cli("changefeed", "list").stdout)
        assert {item["summary"]["state"] for item in listed if item["id"].startswith("os-")} == {"normal"}
    finally:
        for feed in feeds:
            stop_consumer(feed)
        server.stop()
    print(f"object storage e2e: {len(feeds)} changefeeds in {time.monotonic() - started:.0f}s")
