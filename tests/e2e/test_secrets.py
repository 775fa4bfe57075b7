"""No secret in any log line, API answer, command line or world-readable file (issue 20 item 5).

One server logs at debug level (from its start, and again through `POST /api/v2/log` as the issue
did), with its upstream password in a file. It runs three changefeeds whose URIs all carry
secrets: a MySQL sink with a password and a redo log on S3 (its own secret key), an S3 storage sink
(another secret key) and a Kafka sink over SASL/PLAIN. The workload also puts a `CREATE USER ...
IDENTIFIED BY` into the binlog. Once every changefeed has passed the workload (the MySQL
downstream compared row by row), neither the server's log file nor its captured stdout/stderr
(Spark's JVM and Python workers) holds any of the secrets, raw or percent-encoded; neither does any
API answer or any process's command line; every file under the data directory is 0600 and every
directory 0700. Then `redo apply`, `consumer storage`, `consumer kafka` (with a row only its key
reaches Kafka, read upstream) and `diff` run with their MySQL passwords in files or the
environment: they work, and `ps` never shows a secret on their command lines.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

import pytest

from sparkcdc.consumer.storage_reader import checkpoint_ts as storage_checkpoint_ts
from sparkcdc.testing.compare import wait_tables_equal
from sparkcdc.testing.ha import wait_until
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


def run_unseen(args: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess:
    """`sparkcdc args` in a child with `environment` added, which must succeed and whose command
    line, as `ps` shows it every 50 ms while it runs, must hold no secret."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-m", "sparkcdc.cli.main", *args], stdout=out, stderr=err,
                                 text=True, env={**os.environ, **environment})
        seen: set[str] = set()
        deadline = time.monotonic() + 240
        while child.poll() is None and time.monotonic() < deadline:
            seen.add(subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(child.pid)], capture_output=True,
                                    text=True).stdout.strip())
            time.sleep(0.05)
        if child.poll() is None:
            child.kill()
        child.wait()
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(args, child.returncode, out.read(), err.read())
    assert result.returncode == 0, (args[:2], result.stdout[-2000:], result.stderr[-3000:])
    assert any("sparkcdc.cli.main" in line for line in seen), "ps never saw the command"
    assert not _found(" ".join(seen)), (args[:2], _found(" ".join(seen)))
    return result


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
            # Rows over max-message-bytes go as their keys only: `consumer kafka` reads them upstream.
            "to-kafka": (f"kafka://{sasl_kafka.sasl_bootstrap}/secrets-topic?protocol=canal-json&sasl-user=cdcsink"
                         f"&sasl-password={KAFKA_PASSWORD}&sasl-mechanism=PLAIN&enable-tidb-extension=true"
                         "&max-message-bytes=4096",
                         {**rules, "sink": {"kafka_config": {"large_message_handle": {
                             "large_message_handle_option": "handle-key-only"}}}}),
        }
        answers = [server.api("POST", "/api/v2/changefeeds", {"changefeed_id": changefeed_id, "sink_uri": sink_uri,
                                                              "replica_config": config})
                   for changefeed_id, (sink_uri, config) in feeds.items()]

        workload = Workload(up, DATABASE, seed=20)
        workload.create_tables()
        workload.run(60)
        with up.cursor() as cur:
            cur.execute(f"CREATE USER 'victim'@'%%' IDENTIFIED BY '{BINLOG_PASSWORD}'")
            cur.execute(f"CREATE TABLE `{DATABASE}`.big (id INT PRIMARY KEY, body MEDIUMTEXT)")
            cur.execute(f"INSERT INTO `{DATABASE}`.big VALUES (1, REPEAT('b', 9000)), (2, 'small')")
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

        # The other commands take their MySQL passwords from a file or the environment, never from
        # the command line, and work: each against real servers with password users.
        sink_password_file = tmp_path / "sink-password"
        sink_password_file.write_text(SINK_PASSWORD + "\n")
        s3_environment = {"AWS_ACCESS_KEY_ID": s3.credentials["access-key"], "AWS_SECRET_ACCESS_KEY": STORAGE_SECRET}
        sink_user = f"mysql://sinkuser@127.0.0.1:{downstream.port}/"
        applied = run_unseen(["redo", "apply", "--storage", f"s3://redo/cf?endpoint={s3.endpoint}",
                              "--tmp-dir", str(tmp_path / "redo-tmp"), "--sink-uri", sink_user,
                              "--sink-password-file", str(sink_password_file)], s3_environment)
        assert "applied" in applied.stdout
        wait_tables_equal(up, downstream.connect(), DATABASE, TABLES + ["big"])

        replayed = mariadb_factory()
        with replayed.connect().cursor() as cur:
            cur.execute("CREATE USER 'sinkuser'@'%%' IDENTIFIED BY %s", (SINK_PASSWORD,))
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'sinkuser'@'%'")
        replayed_user = f"mysql://sinkuser@127.0.0.1:{replayed.port}/"
        # `--once` applies what the storage checkpoint (its metadata file, written every flush) covers.
        wait_until(lambda: storage_checkpoint_ts(s3.uri("out", "cf")) >= after_workload, 120,
                   "the storage sink's metadata checkpoint to pass the workload")
        run_unseen(["consumer", "storage", "--upstream-uri", f"s3://out/cf?endpoint={s3.endpoint}&protocol=canal-json",
                    "--downstream-uri", replayed_user, "--once", "--checkpoint-file", str(tmp_path / "consumed")],
                   {**s3_environment, "SPARKCDC_DOWNSTREAM_PASSWORD": SINK_PASSWORD})
        wait_tables_equal(up, replayed.connect(), DATABASE, TABLES + ["big"], timeout=5)
        with replayed.connect().cursor() as cur:
            cur.execute(f"DROP DATABASE `{DATABASE}`")
        run_unseen(["consumer", "kafka", "--upstream-uri",
                    f"kafka://{sasl_kafka.bootstrap}/secrets-topic?protocol=canal-json&enable-tidb-extension=true",
                    "--downstream-uri", replayed_user, "--downstream-password-file", str(sink_password_file),
                    "--upstream-mysql-uri", f"mysql://cdcup@127.0.0.1:{mariadb.port}/", "--until-ts",
                    str(after_workload)], {"SPARKCDC_UPSTREAM_MYSQL_PASSWORD": UPSTREAM_PASSWORD})
        wait_tables_equal(up, replayed.connect(), DATABASE, TABLES + ["big"], timeout=5)

        diff = run_unseen(["diff", "--source", f"mysql://cdcup@127.0.0.1:{mariadb.port}/",
                           "--target", replayed_user, "--target-password-file", str(sink_password_file),
                           "--filter", f"{DATABASE}.*"], {"SPARKCDC_SOURCE_PASSWORD": UPSTREAM_PASSWORD})
        assert "equal" in diff.stdout.lower(), diff.stdout
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
