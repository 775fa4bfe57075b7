"""A one-node Apache Kafka (KRaft, broker + controller) for tests and local runs.

The jars come from Maven Central through `scripts/setup-kafka.sh` (into `.tools/kafka/lib`).
Each broker gets its own data directory and free ports on 127.0.0.1, a small heap and the
client JIT only, so it starts in seconds on a busy 2-core machine.

    with start_kafka(tmp_path) as kafka:
        uri = f"kafka://{kafka.bootstrap}/topic?protocol=canal-json"

    python -m sparkcdc.testing.kafka /tmp/kafka-data   # runs a broker until Ctrl-C
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from sparkcdc.testing.emulators import tools_dir
from sparkcdc.testing.jvm_service import java_command, serve_until_interrupted, spawn, terminate
from sparkcdc.testing.ports import free_port

class KafkaNotInstalled(RuntimeError):
    """The broker jars are missing: run scripts/setup-kafka.sh."""


def new_cluster_id() -> str:
    """A random KRaft cluster id (base64url of 16 bytes, no padding). Like Kafka's own
    Uuid.randomUuid, never one starting with '-': the storage tool would read it as a flag."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def kafka_lib_dir() -> Path:
    lib = tools_dir() / "kafka" / "lib"
    if not any(lib.glob("kafka_2.13-*.jar")):
        raise KafkaNotInstalled(f"no Kafka jars in {lib}; run scripts/setup-kafka.sh")
    return lib


def _server_properties(data_dir: Path, port: int, controller_port: int, sasl_port: int,
                       sasl_users: dict[str, str]) -> str:
    listeners, sasl = [f"PLAINTEXT://127.0.0.1:{port}"], []
    if sasl_users:  # a SASL/PLAIN listener beside the plain one (inter-broker traffic stays plain)
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}")
        accounts = " ".join(f'user_{user}="{password}"' for user, password in sasl_users.items())
        sasl = ["sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {accounts};"]
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners={','.join(listeners)},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners={','.join(listeners)}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        *sasl,
        f"log.dirs={data_dir / 'logs'}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=4",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        "message.max.bytes=10485760",
        "",
    ])


@dataclass
class KafkaBroker:
    """A broker process; `bootstrap` is `127.0.0.1:<port>`. Restartable on the same data."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process: Optional[subprocess.Popen] = None
    # SASL/PLAIN accounts (user -> password): when given, `sasl_bootstrap` is a second listener
    # that takes only them.
    sasl_users: dict[str, str] = field(default_factory=dict, repr=False)
    sasl_port: int = field(default_factory=free_port)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def _config(self) -> Path:
        return self.data_dir / "server.properties"

    def _java(self, main: str, *args: str) -> list[str]:
        classpath = str(kafka_lib_dir()) + "/*"
        log4j = self.data_dir / "log4j2.properties"
        return java_command("256m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath, main, *args)

    def format(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._config.write_text(_server_properties(self.data_dir, self.port, self.controller_port, self.sasl_port,
                                                   self.sasl_users))
        (self.data_dir / "log4j2.properties").write_text(
            "rootLogger.level=WARN\nrootLogger.appenderRef.f.ref=F\n"
            "appender.f.type=File\nappender.f.name=F\n"
            f"appender.f.fileName={self.data_dir / 'server.log'}\n"
            "appender.f.layout.type=PatternLayout\nappender.f.layout.pattern=%d %p %c: %m%n\n"
            "logger.k.name=kafka.server.KafkaServer\nlogger.k.level=INFO\n"
            "logger.r.name=kafka.server.KafkaRaftServer\nlogger.r.level=INFO\n")
        # A JVM start can fail or stall on a loaded machine; try again, and say why if it keeps failing.
        for attempt in range(3):
            command = self._java("kafka.tools.StorageTool", "format", "--cluster-id", new_cluster_id(),
                                 "--config", str(self._config), "--ignore-formatted")
            try:
                result = subprocess.run(command, capture_output=True, timeout=120)
            except subprocess.TimeoutExpired:
                output = "timed out after 120s"
            else:
                if result.returncode == 0:
                    return
                output = (result.stdout + result.stderr).decode(errors="replace")[-2000:]
            time.sleep(1 + attempt)
        raise RuntimeError(f"formatting Kafka storage in {self.data_dir} failed 3 times: {output}")

    def start(self, timeout: float = 120.0) -> "KafkaBroker":
        if not self._config.exists():
            self.format()
        self.process = spawn(self._java("kafka.Kafka", str(self._config)), self.data_dir / "stdout.log")
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.process.returncode}; see {self.data_dir}/stdout.log")
            try:
                if admin is None:
                    # Connect by hand first: librdkafka logs every refused connection.
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    admin = AdminClient({"bootstrap.servers": self.bootstrap})
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:  # not listening yet
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"Kafka on {self.bootstrap} not ready in {timeout}s; see {self.data_dir}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown, ~2-3 s), SIGKILL if it does not exit in `timeout`."""
        process, self.process = self.process, None
        terminate(process, timeout)

    def restart(self) -> None:
        self.stop()
        self.start()


class RecordingDownstream:
    """A downstream that records what a Kafka consumer applies: rows, (commit-ts, DDL, rows before it), flushes."""

    def __init__(self) -> None:
        self.rows: list = []
        self.ddls: list[tuple[int, str, int]] = []
        self.flushes = 0

    def write_rows(self, table, rows) -> None:
        self.rows.extend(rows)

    def write_ddl(self, ddl) -> None:
        self.ddls.append((ddl.commit_ts, ddl.query, len(self.rows)))

    def flush(self) -> None:
        self.flushes += 1


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> dict[int, list]:
    """Every message of `topic` by partition, from the beginning to each partition's end at the
    call (a changefeed with the TiDB extension writes watermarks while idle: no idle moment comes)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: dict[int, list] = {p: [] for p in partitions}
    deadline = time.monotonic() + timeout
    assigned = [TopicPartition(topic, p) for p in partitions if ends[p] > 0]
    # The consumer's position passes control records (transaction markers) too, which no message shows.
    while assigned and any(tp.offset < ends[tp.partition] for tp in consumer.position(assigned)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"read {({p: len(m) for p, m in out.items()})} messages of {topic}, "
                               f"to offsets {ends}")
        for message in consumer.consume(1000, 1.0):
            if message.error() is None and message.offset() < ends[message.partition()]:
                out[message.partition()].append(message)
    consumer.close()
    return out


def consume_until(uri: str, downstream, table, until: int, config=None):
    """A KafkaConsumer of `uri` applying to `downstream` (every table is `table`) until its
    checkpoint reaches `until` or 60 polls pass; returns the closed consumer."""
    from sparkcdc.consumer.kafka_consumer import KafkaConsumer
    from sparkcdc.sink.kafka.config import parse_kafka_sink_uri

    consumer = KafkaConsumer(parse_kafka_sink_uri(uri, config), downstream, lambda schema, name: table, group_id="c")
    for _ in range(60):
        if consumer.poll_once(timeout=0.5) >= until:
            break
    consumer.close()
    return consumer


class ConsumerThread:
    """sparkcdc's Kafka consumer applying to a MySQL downstream in a background thread, as the
    e2e tests and benches run it; `errors` holds what stopped it."""

    def __init__(self, kafka_config, downstream_uri: str, group_id: str = "test", **consumer_options):
        from sparkcdc.config.replica import ReplicaConfig
        from sparkcdc.consumer.kafka_consumer import KafkaConsumer
        from sparkcdc.sink.mysql.config import parse_mysql_sink_uri
        from sparkcdc.sink.mysql.connection import connect
        from sparkcdc.sink.mysql.sink import MySQLSink
        from sparkcdc.upstream.schema_reader import read_table_info

        self._downstream = MySQLSink(downstream_uri, ReplicaConfig(), replicating_ts=2**63 - 1)
        self._connection = connect(parse_mysql_sink_uri(downstream_uri), None)
        cache: dict = {}

        def table_info(schema: str, table: str):
            if (schema, table) not in cache:
                cache[(schema, table)] = read_table_info(self._connection, schema, table, 0, 0)
            return cache[(schema, table)]

        self.consumer = KafkaConsumer(kafka_config, self._downstream, table_info, cache.clear, group_id,
                                      **consumer_options)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kafka-consumer")

    def _run(self) -> None:
        try:
            self.consumer.run(self._stop)
        except BaseException as exc:  # reported through `errors`
            self.errors.append(exc)

    def start(self) -> "ConsumerThread":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        self.consumer.close()
        self._downstream.close()
        self._connection.close()


@contextlib.contextmanager
def start_kafka(data_dir: os.PathLike | str) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(Path(data_dir)).start()
    try:
        yield broker
    finally:
        broker.stop()


def main(argv: list[str]) -> int:
    data_dir = Path(argv[1] if len(argv) > 1 else ".work/kafka")
    return serve_until_interrupted(
        start_kafka(data_dir), lambda broker: f"Kafka ready on {broker.bootstrap} (data in {data_dir}); Ctrl-C stops it")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
