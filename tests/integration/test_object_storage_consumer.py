"""`sparkcdc consumer storage`: a storage sink on the S3 emulator replayed into a real MariaDB,
with database and table DDL, a PK change, deletes, rows past the checkpoint and a restart."""

from __future__ import annotations

import time
import uuid

import pytest

from sparkcdc.cli.main import main
from sparkcdc.config.replica import SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.sink.storage import StorageSink
from sparkcdc.testing.emulators import EmulatorNotInstalled, binary_for, start_emulator

pytestmark = pytest.mark.integration

DAY = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))
COLUMNS = (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("name", "varchar", charset="utf8mb4", length=32),
    ColumnInfo("price", "decimal", precision=10, scale=2),
    ColumnInfo("raw", "varbinary", charset="binary", length=8),
)
CREATE = "CREATE TABLE items (id INT NOT NULL PRIMARY KEY, name VARCHAR(32), price DECIMAL(10,2), raw VARBINARY(8))"
ALTER = "ALTER TABLE items ADD COLUMN note TEXT"


def ts(second: int) -> int:
    return compose(int((DAY + second) * 1000))


def change(commit_ts, op, before=None, after=None, seq=0):
    return RowChange(commit_ts, "shopdb", "items", op, before=before, after=after, seq=seq)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    try:
        binary_for("s3")
    except EmulatorNotInstalled as exc:
        pytest.skip(f"moto not installed ({exc})")
    server = start_emulator("s3", str(tmp_path_factory.mktemp("moto")))
    yield server
    server.stop()


def downstream_rows(mariadb, with_note: bool):
    connection = mariadb.connect("shopdb")
    with connection.cursor() as cursor:
        note = ", note" if with_note else ""
        cursor.execute(f"SELECT id, name, CAST(price AS CHAR), HEX(raw){note} FROM items ORDER BY id")
        rows = cursor.fetchall()
    connection.close()
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_consumer_replays_storage_into_mariadb(mariadb, s3, protocol, tmp_path):
    bucket = f"consume-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    sink_config = SinkConfig(protocol=protocol, enable_tidb_extension=True)
    sink_config.csv.include_commit_ts = True
    sink_config.csv.output_old_value = True
    uri = s3.uri(bucket, "cdc", protocol=protocol)
    with mariadb.connect() as connection, connection.cursor() as cursor:
        cursor.execute("DROP DATABASE IF EXISTS shopdb")

    table = TableInfo("shopdb", "items", 1, COLUMNS, ts(1), handle_key=("id",))
    sink = StorageSink(uri, sink_config, lambda: DAY)
    sink.write_ddl(DDLEvent(ts(0), "shopdb", "", "CREATE DATABASE shopdb", "create database"))
    sink.write_ddl(DDLEvent(ts(1), "shopdb", "items", CREATE, "create table", table_info=table))
    one, two = ("1", "apple", "1.50", "\x00\xff"), ("2", "pear", "2.00", None)
    sink.write_rows(table, [change(ts(2), "insert", after=one), change(ts(2), "insert", after=two, seq=1)])
    sink.write_rows(table, [change(ts(3), "update", before=one, after=("10",) + one[1:])])
    sink.write_checkpoint(ts(3))
    altered = TableInfo("shopdb", "items", 1, COLUMNS + (ColumnInfo("note", "text", charset="utf8mb4"),),
                        ts(4), handle_key=("id",))
    sink.write_ddl(DDLEvent(ts(4), "shopdb", "items", ALTER, "add column", table_info=altered, pre_table_info=table))
    sink.write_rows(altered, [change(ts(5), "delete", before=two + (None,))])
    sink.write_rows(altered, [change(ts(6), "insert", after=("3", "fig", "3.00", "", "new"))])
    sink.write_checkpoint(ts(5))  # ts(6) is stored but not yet checkpointed

    config_file = tmp_path / "changefeed.toml"  # the csv layout the files were written with
    config_file.write_text("[sink.csv]\ninclude-commit-ts = true\noutput-old-value = true\n")
    command = ["consumer", "storage", "--upstream-uri", uri, "--config", str(config_file),
               "--downstream-uri", mariadb.uri + "?safe-mode=true&batch-dml-enable=false", "--once"]
    assert main(command) == 0
    assert downstream_rows(mariadb, with_note=True) == [(10, "apple", "1.50", "00FF", None)]

    sink.write_checkpoint(ts(6))
    # A restarted consumer starts from checkpoint 0: DDL and rows are replayed idempotently.
    assert main(command) == 0
    assert downstream_rows(mariadb, with_note=True) == [
        (3, "fig", "3.00", "", "new"), (10, "apple", "1.50", "00FF", None)]
