"""MariaDB -> Spark changefeed -> real Kafka with protocol=debezium -> tables rebuilt from the
Debezium envelopes, compared row by row with upstream.

Debezium carries no watermarks and no DDL, so sparkcdc's Kafka consumer cannot order it across
partitions and does not read it (docs/kafka-sink.md). This test rebuilds on its side instead: the
`table` dispatcher keeps each table's changes in one partition in commit order, so replaying a
partition's envelopes (op c/u/d with before/after) rebuilds each table. The workload has
PK-changing updates (split into delete + insert, deletes of a transaction first), the product
document's PK-swap transaction, multi-row transactions and column defaults.

A second changefeed writes DECIMAL(20,6) and BIGINT UNSIGNED values with `[sink.debezium]`
decimal-handling-mode and bigint-unsigned-handling-mode `precise`; they are read back with
Debezium's own rule for Kafka Connect Decimals (written in this test, not taken from the
encoder) and must equal upstream's exactly (issue 21: TiCDC's doubles rounded 937 of 1,151
values and turned ±99999999999999.999999 into NULL for a Flink reader)."""

from __future__ import annotations

import base64
import json
import random
import time
from decimal import Decimal

import pytest

from sparkcdc.sink.codec.debezium import decode_value
from sparkcdc.testing.compare import Rows, diff_tables, read_upstream_table
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.upstream.schema_reader import read_table_info

pytestmark = pytest.mark.e2e

DATABASE = "e2e_kafka_debezium"
TOPIC = "cdc-e2e-debezium"
MONEY_DATABASE = "e2e_kafka_debezium_money"
MONEY_TOPIC = "cdc-e2e-debezium-precise"
MONEY_CONFIG = ('[sink.debezium]\ndecimal-handling-mode = "precise"\nbigint-unsigned-handling-mode = "precise"\n')
TABLES = {
    "accounts": "CREATE TABLE accounts (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL DEFAULT 'anon', "
                "balance BIGINT DEFAULT 0, flags BIT(3) DEFAULT b'101', kind ENUM('a','b c') DEFAULT 'a', "
                "seen DATETIME(3) NULL, stamp TIMESTAMP(6) NULL, raw VARBINARY(8), ratio DOUBLE, note TEXT)",
    "pairs": "CREATE TABLE pairs (a INT PRIMARY KEY, b INT)",
}


class DebeziumRebuilder:
    """Applies every table's envelopes, partition by partition in offset order, to in-memory
    tables keyed by primary key (a test-side stand-in for a consumer)."""

    def __init__(self, bootstrap: str, infos: dict):
        from confluent_kafka import Consumer, TopicPartition

        self.infos = infos
        self.tables: dict[str, Rows] = {name: {} for name in infos}
        self.messages = 0
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dbz-rebuild",
                                  "enable.auto.commit": False})
        partitions = self.consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for message in self.consumer.consume(500, 0.5):
                if message.error() is None and message.value() is not None:
                    self.apply(message.value())

    def apply(self, value: bytes) -> None:
        table = json.loads(value)["payload"]["source"]["table"]
        info = self.infos[table]
        row = decode_value(info, value)
        rows = self.tables[table]
        key_positions = [info.column_names.index(k) for k in info.primary_key]
        if row.before is not None:
            rows.pop(tuple(row.before[i] for i in key_positions), None)
        if row.after is not None:
            rows[tuple(row.after[i] for i in key_positions)] = dict(zip(info.column_names, row.after))
        self.messages += 1

    def close(self) -> None:
        self.consumer.close()


def _workload(conn, seed: int = 11) -> None:
    """Inserts, updates (some moving the primary key), deletes, in transactions of 1-5 statements."""
    rng = random.Random(seed)
    ids = set()
    next_id = 1
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{DATABASE}`.pairs VALUES (1, 1), (2, 2)")
        for _ in range(70):
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 5)):
                choice = rng.random()
                if choice < 0.45 or not ids:
                    if rng.random() < 0.3:  # only the key: the other columns take their defaults
                        cur.execute(f"INSERT INTO `{DATABASE}`.accounts (id) VALUES (%s)", (next_id,))
                    else:
                        cur.execute(
                            f"INSERT INTO `{DATABASE}`.accounts (id, name, balance, flags, kind, seen, stamp, raw, "
                            "ratio, note) VALUES (%s, %s, %s, %s, %s, NOW(3), NOW(6), %s, %s, %s)",
                            (next_id, f"n{next_id}", rng.randint(-10**12, 10**12), rng.randint(0, 7),
                             rng.choice(["a", "b c"]), bytes([rng.randint(0, 255), 0, 255]),
                             rng.random() * 1000, None if rng.random() < 0.3 else "é" * rng.randint(0, 5)))
                    ids.add(next_id)
                    next_id += 1
                elif choice < 0.65:
                    old = rng.choice(sorted(ids))
                    cur.execute(f"UPDATE `{DATABASE}`.accounts SET id = %s, balance = balance + 1 WHERE id = %s",
                                (next_id, old))
                    ids.discard(old)
                    ids.add(next_id)
                    next_id += 1
                elif choice < 0.85:
                    cur.execute(f"UPDATE `{DATABASE}`.accounts SET name = %s, note = NULL, flags = 0 WHERE id = %s",
                                (f"u{rng.randint(0, 99)}", rng.choice(sorted(ids))))
                else:
                    victim = rng.choice(sorted(ids))
                    cur.execute(f"DELETE FROM `{DATABASE}`.accounts WHERE id = %s", (victim,))
                    ids.discard(victim)
            cur.execute("COMMIT")
        # The product document's PK swap, in one transaction.
        cur.execute("BEGIN")
        cur.execute(f"UPDATE `{DATABASE}`.pairs SET a = 3 WHERE a = 1")
        cur.execute(f"UPDATE `{DATABASE}`.pairs SET a = 1 WHERE a = 2")
        cur.execute(f"UPDATE `{DATABASE}`.pairs SET a = 2 WHERE a = 3")
        cur.execute("COMMIT")


def _money_rows(count: int = 400, seed: int = 3) -> list[tuple]:
    """DECIMAL(20,6) values over the whole range, the extremes included, with BIGINT UNSIGNED ids."""
    rng = random.Random(seed)
    edges = ["99999999999999.999999", "-99999999999999.999999", "7056705757967.768814", "0.000000", "-0.000001"]
    amounts = edges + [f"{rng.choice(['', '-'])}{rng.randint(0, 10**14 - 1)}.{rng.randint(0, 10**6 - 1):06d}"
                       for _ in range(count - len(edges))]
    ids = {2**64 - 1, 2**63, 2**63 - 1, 0}
    while len(ids) < count:
        ids.add(rng.randint(1, 2**64 - 2))
    return list(zip(sorted(ids), amounts))


def debezium_decimal(field: dict, value: str) -> Decimal:
    """Debezium's rule for org.apache.kafka.connect.data.Decimal in JSON: the base64 of the
    unscaled value's big-endian two's-complement bytes, with the field's `scale` parameter."""
    assert field["type"] == "bytes" and field["name"] == "org.apache.kafka.connect.data.Decimal", field
    unscaled = int.from_bytes(base64.b64decode(value), byteorder="big", signed=True)
    return Decimal(unscaled).scaleb(-int(field["parameters"]["scale"]))


def read_precise_money(bootstrap: str, want: int, timeout: float = 180.0) -> dict[Decimal, Decimal]:
    """{id: amount} decoded from the precise changefeed's insert envelopes."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dbz-precise", "enable.auto.commit": False})
    got: dict[Decimal, Decimal] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not consumer.assignment():
            topics = consumer.list_topics(MONEY_TOPIC, timeout=10).topics
            if MONEY_TOPIC in topics and topics[MONEY_TOPIC].error is None:
                consumer.assign([TopicPartition(MONEY_TOPIC, p, 0) for p in topics[MONEY_TOPIC].partitions])
            else:
                time.sleep(2)
        while len(got) < want and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                if message.error() is not None or message.value() is None:
                    continue
                envelope = json.loads(message.value())
                image = next(f for f in envelope["schema"]["fields"] if f["field"] == "after")
                fields = {f["field"]: f for f in image["fields"]}
                after = envelope["payload"]["after"]
                got[debezium_decimal(fields["id"], after["id"])] = debezium_decimal(fields["amount"], after["amount"])
    finally:
        consumer.close()
    return got


def test_debezium_envelopes_rebuild_the_tables(mariadb, kafka, tmp_path):
    broker = kafka
    sink_uri = f"kafka://{broker.bootstrap}/{TOPIC}?protocol=debezium&partition-num=3"
    config = tmp_path / "cf.toml"
    config.write_text(f'[filter]\nrules = ["{DATABASE}.*"]\n'
                      f'[sink]\ndispatchers = [{{matcher = ["{DATABASE}.*"], partition = "table"}}]\n')
    up = mariadb.connect()
    with up.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")
        cur.execute(f"CREATE DATABASE `{DATABASE}`")
        for ddl in TABLES.values():
            cur.execute(f"USE `{DATABASE}`")
            cur.execute(ddl)
    infos = {name: read_table_info(up, DATABASE, name, 0, 0) for name in TABLES}
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    rebuilder = None
    try:
        server.cli("changefeed", "create", "-c", "to-kafka-debezium", "--config", str(config),
                   "--sink-uri", sink_uri)
        money_config = tmp_path / "money.toml"
        money_config.write_text(f'[filter]\nrules = ["{MONEY_DATABASE}.*"]\n' + MONEY_CONFIG)
        server.cli("changefeed", "create", "-c", "debezium-precise", "--config", str(money_config),
                   "--sink-uri", f"kafka://{broker.bootstrap}/{MONEY_TOPIC}?protocol=debezium&partition-num=1")
        money = _money_rows()
        with up.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{MONEY_DATABASE}`")
            cur.execute(f"CREATE DATABASE `{MONEY_DATABASE}`")
            cur.execute(f"CREATE TABLE `{MONEY_DATABASE}`.money (id BIGINT UNSIGNED PRIMARY KEY, "
                        "amount DECIMAL(20,6) NOT NULL)")
            cur.executemany(f"INSERT INTO `{MONEY_DATABASE}`.money VALUES (%s, %s)", money)
        _workload(up)
        expected = {name: read_upstream_table(up, DATABASE, name) for name in TABLES}
        assert len(expected["accounts"]) > 20 and len(expected["pairs"]) == 2
        deadline = time.monotonic() + 180
        problems: list[str] = ["nothing read yet"]
        while problems and time.monotonic() < deadline:
            if rebuilder is None:
                try:
                    rebuilder = DebeziumRebuilder(broker.bootstrap, infos)
                except KeyError:  # the topic does not exist until the first row is sent
                    time.sleep(2)
                    continue
            rebuilder.poll(3)
            problems = [f"{name}: {p}" for name in TABLES
                        for p in diff_tables(expected[name], rebuilder.tables[name])]
        assert not problems, "\n".join(problems)
        # The rows really came through Debezium envelopes with PK changes as delete + insert.
        assert rebuilder.messages > 150
        assert rebuilder.tables["pairs"] == {("1",): {"a": "1", "b": "2"}, ("2",): {"a": "2", "b": "1"}}

        upstream_money = {Decimal(key[0]): Decimal(row["amount"])
                          for key, row in read_upstream_table(up, MONEY_DATABASE, "money").items()}
        assert upstream_money == {Decimal(i): Decimal(a) for i, a in money}
        assert read_precise_money(broker.bootstrap, len(money)) == upstream_money
    finally:
        if rebuilder is not None:
            rebuilder.close()
        server.stop()
        up.close()
