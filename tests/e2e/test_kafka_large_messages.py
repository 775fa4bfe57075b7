"""MariaDB -> changefeed -> real Kafka with max-message-bytes=4096 -> sparkcdc's Kafka consumer ->
a second MariaDB, with rows far over the limit: canal-json with handle-key-only (the consumer
reads those rows from upstream) and open-protocol with claim-check to a storage directory (the
consumer reads the full messages back). Rebuilt tables equal upstream row by row."""

from __future__ import annotations

import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.sink.kafka.config import parse_kafka_sink_uri
from sparkcdc.testing.compare import read_upstream_table, wait_for_row, wait_tables_equal
from sparkcdc.testing.kafka import ConsumerThread
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.upstream.row_lookup import UpstreamRowReader

pytestmark = pytest.mark.e2e


CASES = [("canal-json", "handle-key-only"), ("open-protocol", "claim-check")]


def test_rows_over_max_message_bytes_replicate(mariadb, mariadb_factory, kafka, tmp_path):
    """Both cases at once on one broker and server: a changefeed, database and consumer each."""
    broker = kafka
    downstream_db = mariadb_factory()
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    upstream_rows = UpstreamRowReader(mariadb.connect)
    consumers = []
    try:
        up = mariadb.connect()
        for protocol, option in CASES:
            database = f"e2e_large_{protocol.replace('-', '_')}"
            sink_uri = (f"kafka://{broker.bootstrap}/cdc-large-{protocol}?protocol={protocol}&partition-num=2"
                        "&max-message-bytes=4096" + ("&enable-tidb-extension=true" if protocol == "canal-json" else ""))
            config_text = (f'[filter]\nrules = ["{database}.*"]\n'
                           f'[sink.kafka-config.large-message-handle]\nlarge-message-handle-option = "{option}"\n')
            if option == "claim-check":
                config_text += f'claim-check-storage-uri = "file://{tmp_path}/claim-check"\n'
            (tmp_path / f"{protocol}.toml").write_text(config_text)
            consumers.append(ConsumerThread(parse_kafka_sink_uri(sink_uri, parse_replica_config(config_text)),
                                            f"mysql://root@127.0.0.1:{downstream_db.port}/", f"e2e-large-{protocol}",
                                            upstream_row=upstream_rows.read))
            server.cli("changefeed", "create", "-c", f"large-{protocol.replace('-', '')}",
                       "--config", str(tmp_path / f"{protocol}.toml"), "--sink-uri", sink_uri)
            with up.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{database}`")
                cur.execute(f"CREATE TABLE `{database}`.docs (id INT PRIMARY KEY, body MEDIUMTEXT, blob_part BLOB, n INT)")
                cur.execute(f"CREATE TABLE `{database}`.finish_mark (id INT PRIMARY KEY)")
            consumers[-1].start()
        for protocol, _ in CASES:
            database = f"e2e_large_{protocol.replace('-', '_')}"
            with up.cursor() as cur:
                for i in range(1, 41):
                    big = i % 3 == 0
                    cur.execute(f"INSERT INTO `{database}`.docs VALUES (%s, %s, %s, %s)",
                                (i, ("é" + str(i)) * (2000 if big else 5), bytes(range(256)) * (20 if big else 1), i))
                cur.execute(f"UPDATE `{database}`.docs SET n = n + 100, body = CONCAT(body, 'tail') WHERE id % 6 = 0")
                cur.execute(f"UPDATE `{database}`.docs SET body = REPEAT('z', 9000) WHERE id IN (1, 2)")  # small -> large
                cur.execute(f"UPDATE `{database}`.docs SET body = 'short' WHERE id = 3")  # large -> small
                cur.execute(f"DELETE FROM `{database}`.docs WHERE id IN (9, 10)")
                cur.execute(f"ALTER TABLE `{database}`.docs ADD COLUMN tag VARCHAR(8) DEFAULT 'new'")
                cur.execute(f"UPDATE `{database}`.docs SET tag = 'big', body = REPEAT('q', 6000) WHERE id = 12")
                cur.execute(f"INSERT INTO `{database}`.finish_mark VALUES (1)")
        down = downstream_db.connect()
        for (protocol, option), consumer in zip(CASES, consumers):
            database = f"e2e_large_{protocol.replace('-', '_')}"
            try:
                wait_for_row(down, database, "finish_mark", timeout=240)
            finally:
                assert not consumer.errors, (protocol, consumer.errors)
            assert len(read_upstream_table(up, database, "docs")) == 38
            wait_tables_equal(up, down, database, ["docs"])
        # the large rows of the claim-check case went to storage
        assert len(list((tmp_path / "claim-check").glob("*.json"))) >= 15
    finally:
        for consumer in consumers:
            consumer.stop()
        upstream_rows.close()
        server.stop()
