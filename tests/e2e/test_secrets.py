"""No secret in any log line, API answer, command line or world-readable file (issue 20 item 5).

One server logs at debug level (from its start, and again through `POST /api/v2/log` as the issue
did), with its upstream password in a file. It runs three changefeeds whose URIs all carry
secrets: a MySQL sink with a password and a redo log on S3 (its own secret key), an S3 storage sink
(another secret key) and a Kafka sink over SASL/PLAIN. The workload also puts a `CREATE USER ...
IDENTIFIED BY` into the binlog. Once every changefeed has passed the workload (the MySQL
downstream compared row by row), neither the server's log file nor its captured stdout/stderr
(Spark's JVM and Python workers) holds any of the secrets, raw or percent-encoded; neither does any
API answer or any process's command line; every file under the data directory is 0600 and every
directory 0700.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from urllib.parse import quote

import pytest

from sparkcdc.testing.compare import wait_tables_equal
from sparkcdc.testing.emulators import S3_SECRET_KEY, EmulatorNotInstalled, start_emulator
from sparkcdc.testing.kafka import KafkaBroker, KafkaNotInstalled, read_topic
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

UPSTREAM_PASSWORD = "Up@stream:Pw/7f3a"  # characters a URI must percent-encode
SINK_PASSWORD = "SinkPw-2b81"
STORAGE_SECRET = "StorageSecret-c4d2"
REDO_SECRET = "RedoSecret-9e0f"
KAFKA_PASSWORD = "KafkaPw-5a6b"
BINLOG_PASSWORD = "BinlogPw-1c2d"
SECRETS = (UPSTREAM_PASSWORD, SINK_PASSWORD, STORAGE_SECRET, REDO_SECRET, KAFKA_PASSWORD, BINLOG_PASSWORD)
DATABASE = "e2e_secrets"
TABLES = ["customers", "orders", "items", "finish_mark"]


def _found(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text or quote(secret, safe="") in text]


@pytest.fixture
def s3(tmp_path):
    try:
        emulator = start_emulator("s3", str(tmp_path / "s3"))
    except EmulatorNotInstalled as exc:
        pytest.skip(f"S3 emulator not installed ({exc}); run scripts/setup-emulators.sh")
    yield emulator
    emulator.stop()


@pytest.fixture
def sasl_kafka(tmp_path):
    try:
        broker = KafkaBroker(tmp_path / "kafka", sasl_users={"cdcsink": KAFKA_PASSWORD}).start()
    except KafkaNotInstalled as exc:
        pytest.skip(str(exc))
    yield broker
    broker.stop()


def test_no_secret_in_logs_answers_command_lines_or_open_files(mariadb, mariadb_factory, s3, sasl_kafka, tmp_path):
    downstream = mariadb_factory()
    up = mariadb.connect()
    with up.cursor() as cur:
        cur.execute("CREATE USER 'cdcup'@'%%' IDENTIFIED BY %s", (UPSTREAM_PASSWORD,))
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'cdcup'@'%'")
    with downstream.connect().cursor() as cur:
        cur.execute("CREATE USER 'sinkuser'@'%%' IDENTIFIED BY %s", (SINK_PASSWORD,))
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'sinkuser'@'%'")
    for bucket in ("redo", "out"):
        s3.create_bucket(bucket)
    password_file = tmp_path / "upstream-password"
    password_file.write_text(UPSTREAM_PASSWORD + "\n")
    data_dir, log_file = tmp_path / "cdc", tmp_path / "cdc" / "sparkcdc.log"
    server = ServerProcess(str(data_dir), f"mysql://cdcup@127.0.0.1:{mariadb.port}/", extra_args=(
        "--upstream-password-file", str(password_file), "--log-level", "debug", "--log-file", str(log_file),
        "--spark-master", "local[2]"))
    try:
        server.start()
        server.api("POST", "/api/v2/log", {"log_level": "debug"})
        rules = {"filter": {"rules": [f"{DATABASE}.*"]}}
        feeds = {
            "to-mysql": (f"mysql://sinkuser:{SINK_PASSWORD}@127.0.0.1:{downstream.port}/",
                         {**rules, "consistent": {"level": "eventual", "storage": s3.uri("redo", "cf").replace(
                             S3_SECRET_KEY, REDO_SECRET)}}),
            "to-s3": (s3.uri("out", "cf", protocol="canal-json").replace(S3_SECRET_KEY, STORAGE_SECRET), rules),
            "to-kafka": (f"kafka://{sasl_kafka.sasl_bootstrap}/secrets-topic?protocol=canal-json&sasl-user=cdcsink"
                         f"&sasl-password={KAFKA_PASSWORD}&sasl-mechanism=PLAIN", rules),
        }
        answers = [server.api("POST", "/api/v2/changefeeds", {"changefeed_id": changefeed_id, "sink_uri": sink_uri,
                                                              "replica_config": config})
                   for changefeed_id, (sink_uri, config) in feeds.items()]

        workload = Workload(up, DATABASE, seed=20)
        workload.create_tables()
        workload.run(60)
        with up.cursor() as cur:
            cur.execute(f"CREATE USER 'victim'@'%%' IDENTIFIED BY '{BINLOG_PASSWORD}'")
        workload.run(30)
        workload.finish()
        after_workload = int(time.time() * 1000) << 18  # a TSO every changefeed's checkpoint must pass
        deadline = time.monotonic() + 240
        while min(server.checkpoint(cf) for cf in feeds) < after_workload and time.monotonic() < deadline:
            states = {cf: server.api("GET", f"/api/v2/changefeeds/{cf}")["state"] for cf in feeds}
            assert set(states.values()) <= {"normal", "warning"}, states
            time.sleep(2)
        assert min(server.checkpoint(cf) for cf in feeds) >= after_workload, \
            {cf: server.api("GET", f"/api/v2/changefeeds/{cf}") for cf in feeds}
        wait_tables_equal(up, downstream.connect(), DATABASE, TABLES)
        assert sum(len(messages) for messages in read_topic(sasl_kafka.bootstrap, "secrets-topic").values()) > 0

        # API answers: every changefeed, the list, statuses and the metadata dump.
        answers += [server.api("GET", f"/api/v2/changefeeds/{cf}") for cf in feeds]
        answers += [server.api("GET", "/api/v2/changefeeds?state=all"), server.api("GET", "/api/v2/unsafe/metadata")]
        answers += [server.api("GET", f"/api/v2/changefeeds/{cf}/status") for cf in feeds]
        assert not _found(json.dumps(answers)), _found(json.dumps(answers))

        # Command lines of every process on the machine: the server, its JVM, its Python workers.
        command_lines = subprocess.run(["ps", "-e", "-ww", "-o", "args="], capture_output=True, text=True,
                                       check=True).stdout
        assert "sparkcdc.cli.main server" in command_lines and "org.apache.spark" in command_lines
        assert not _found(command_lines)
    finally:
        server.stop()

    # The whole log at debug level, and the output of Spark's JVM and Python workers beside it.
    python_log = log_file.read_text(errors="replace")
    process_output = (data_dir / "server.log").read_text(errors="replace")
    assert "[DEBUG]" in python_log and "to-kafka" in python_log
    assert not _found(python_log), [line for line in python_log.splitlines() if _found(line)][:5]
    assert not _found(process_output), [line for line in process_output.splitlines() if _found(line)][:5]

    # Files and directories the server (and Spark under it) made: for its user only.
    loose = []
    for root, directories, files in os.walk(data_dir):
        for name in directories + files:
            mode = stat.S_IMODE(os.lstat(os.path.join(root, name)).st_mode)
            if mode & 0o077:
                loose.append(f"{os.path.join(root, name)} {mode:o}")
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700 and not loose, loose
    assert {"meta.sqlite", "txn-index.sqlite", "sparkcdc.log"} <= set(os.listdir(data_dir))
