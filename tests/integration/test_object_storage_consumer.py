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


def items_sink(s3, mariadb, bucket_prefix: str, sink_config: SinkConfig) -> tuple[str, StorageSink, TableInfo]:
    """(uri, sink, table): a new bucket whose sink has created shopdb.items, dropped downstream."""
    bucket = f"{bucket_prefix}-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    uri = s3.uri(bucket, "cdc", protocol=sink_config.protocol)
    with mariadb.connect() as connection, connection.cursor() as cursor:
        cursor.execute("DROP DATABASE IF EXISTS shopdb")
    table = TableInfo("shopdb", "items", 1, COLUMNS, ts(1), handle_key=("id",))
    sink = StorageSink(uri, sink_config, lambda: DAY)
    sink.write_ddl(DDLEvent(ts(0), "shopdb", "", "CREATE DATABASE shopdb", "create database"))
    sink.write_ddl(DDLEvent(ts(1), "shopdb", "items", CREATE, "create table", table_info=table))
    return uri, sink, table


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_consumer_replays_storage_into_mariadb(mariadb, s3, protocol, tmp_path):
    sink_config = SinkConfig(protocol=protocol, enable_tidb_extension=True)
    sink_config.csv.include_commit_ts = True
    sink_config.csv.output_old_value = True
    uri, sink, table = items_sink(s3, mariadb, "consume", sink_config)
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


PRE_COLUMNS = (
    ColumnInfo("id", "bigint", unsigned=True, nullable=False, is_primary_key=True),
    ColumnInfo("code", "char", charset="utf8mb4", length=4, nullable=False),
    ColumnInfo("amount", "decimal", precision=12, scale=3),
    ColumnInfo("at", "datetime", scale=3),
    ColumnInfo("raw", "varbinary", charset="binary", length=8),
    ColumnInfo("note", "text", charset="utf8mb4"),
)
TIERS = ("basic", "gold")


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_tables_from_before_the_changefeed_and_a_saved_checkpoint(mariadb, s3, protocol, tmp_path):
    """First schema files without a DDL query create their tables from the columns (enum
    members come from a table the user created downstream); the consumer checkpoint is saved
    downstream, so a restart applies only what is new."""
    bucket = f"pre-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    sink_config = SinkConfig(protocol=protocol, enable_tidb_extension=True)
    sink_config.csv.include_commit_ts = True
    uri = s3.uri(bucket, "cdc", protocol=protocol)
    database = f"pre_{protocol.replace('-', '_')}"
    with mariadb.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {database}")
        cursor.execute("DROP DATABASE IF EXISTS sparkcdc_consumer")
        # The enum table exists downstream already (schema files carry no enum members).
        cursor.execute(f"CREATE DATABASE {database}")
        cursor.execute(f"CREATE TABLE {database}.tiers (id INT PRIMARY KEY, tier ENUM('basic','gold'))")

    plain = TableInfo(database, "plain", 1, PRE_COLUMNS, ts(0), handle_key=("id",))
    tiers = TableInfo(database, "tiers", 2, (
        ColumnInfo("id", "int", nullable=False, is_primary_key=True),
        ColumnInfo("tier", "enum", elements=TIERS)), ts(0), handle_key=("id",))
    sink = StorageSink(uri, sink_config, lambda: DAY)
    row = ("18446744073709551615", "ab", "-1.250", "2024-03-01 12:00:00.125", "\x01\x02", "x")
    sink.write_rows(plain, [RowChange(ts(2), database, "plain", "insert", after=row),
                            RowChange(ts(2), database, "plain", "insert", after=("2",) + row[1:], seq=1)])
    sink.write_rows(tiers, [RowChange(ts(2), database, "tiers", "insert", after=("1", "gold"))])
    sink.write_checkpoint(ts(2))
    config_file = tmp_path / "changefeed.toml"
    config_file.write_text("[sink.csv]\ninclude-commit-ts = true\n")
    command = ["consumer", "storage", "--upstream-uri", uri, "--config", str(config_file),
               "--downstream-uri", mariadb.uri + "?safe-mode=true&batch-dml-enable=false", "--once"]
    assert main(command) == 0

    down = mariadb.connect(database)
    with down.cursor() as cursor:
        cursor.execute("SELECT id, code, CAST(amount AS CHAR), CAST(at AS CHAR), HEX(raw), note FROM plain ORDER BY id")
        assert cursor.fetchall() == (
            (2, "ab", "-1.250", "2024-03-01 12:00:00.125", "0102", "x"),
            (18446744073709551615, "ab", "-1.250", "2024-03-01 12:00:00.125", "0102", "x"))
        cursor.execute("SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY FROM information_schema.COLUMNS "
                       "WHERE TABLE_SCHEMA=%s AND TABLE_NAME='plain' ORDER BY ORDINAL_POSITION", (database,))
        assert cursor.fetchall() == (
            ("id", "bigint(20) unsigned", "NO", "PRI"), ("code", "char(4)", "NO", ""),
            ("amount", "decimal(12,3)", "YES", ""), ("at", "datetime(3)", "YES", ""),
            ("raw", "varbinary(8)", "YES", ""), ("note", "text", "YES", ""))
        cursor.execute("SELECT id, tier FROM tiers")
        assert cursor.fetchall() == ((1, "gold"),)
        cursor.execute("SELECT checkpoint_ts FROM sparkcdc_consumer.storage_checkpoint WHERE upstream = %s",
                       (f"s3://{bucket}/cdc",))
        assert cursor.fetchall() == ((ts(2),),)
        # Rows deleted by hand stay deleted: a restarted consumer resumes at its checkpoint.
        cursor.execute("DELETE FROM plain WHERE id = 2")

    sink.write_rows(plain, [RowChange(ts(3), database, "plain", "insert", after=("3",) + row[1:])])
    # Another old table's first rows: its schema file's version (ts(0)) is below the checkpoint.
    late = TableInfo(database, "late", 3, PRE_COLUMNS[:2], ts(0), handle_key=("id",))
    sink.write_rows(late, [RowChange(ts(3), database, "late", "insert", after=("7", "z"))])
    sink.write_checkpoint(ts(3))
    assert main(command) == 0
    with down.cursor() as cursor:
        cursor.execute("SELECT id FROM plain ORDER BY id")
        assert cursor.fetchall() == ((3,), (18446744073709551615,))
        cursor.execute("SELECT id, code FROM late")
        assert cursor.fetchall() == ((7, "z"),)
    down.close()


def test_file_checkpoint_store_round_trip(tmp_path):
    from sparkcdc.consumer.storage_consumer import FileCheckpointStore
    from sparkcdc.errors import ErrStorageIO

    path = str(tmp_path / "state" / "checkpoint.json")
    store = FileCheckpointStore(path, "s3://b/cdc")
    assert store.load() == 0
    store.save(42)
    assert FileCheckpointStore(path, "s3://b/cdc").load() == 42
    with pytest.raises(ErrStorageIO, match="belongs to s3://b/cdc"):
        FileCheckpointStore(path, "gcs://other").load()


def test_enum_members_carry_over_an_alter_that_does_not_repeat_them(tmp_path):
    """canal-json writes enum/set as numbers; after `ALTER ... ADD COLUMN` the new schema file's
    query no longer lists the members, so they come from the version before."""
    from sparkcdc.consumer.storage_reader import rebuild_tables

    sink_config = SinkConfig(protocol="canal-json", enable_tidb_extension=True)
    uri = f"file://{tmp_path}/out?protocol=canal-json"
    tier = ColumnInfo("tier", "enum", elements=TIERS)
    v1 = TableInfo("shopdb", "members", 1, (COLUMNS[0], tier), ts(1), handle_key=("id",))
    v2 = TableInfo("shopdb", "members", 1, (COLUMNS[0], tier, ColumnInfo("n", "int")), ts(3), handle_key=("id",))
    sink = StorageSink(uri, sink_config, lambda: DAY)
    sink.write_ddl(DDLEvent(ts(1), "shopdb", "members",
                            "CREATE TABLE members (id INT PRIMARY KEY, tier ENUM('basic','gold'))",
                            "create table", table_info=v1))
    sink.write_rows(v1, [RowChange(ts(2), "shopdb", "members", "insert", after=("1", "gold"))])
    sink.write_ddl(DDLEvent(ts(3), "shopdb", "members", "ALTER TABLE members ADD COLUMN n INT",
                            "add column", table_info=v2, pre_table_info=v1))
    sink.write_rows(v2, [RowChange(ts(4), "shopdb", "members", "insert", after=("2", "basic", "5"))])
    sink.write_checkpoint(ts(4))
    rows = rebuild_tables(str(tmp_path / "out"), "canal-json")[("shopdb", "members")]
    assert sorted(r["tier"] for r in rows.values()) == ["basic", "gold"]


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_transactions_without_their_own_commit_ts_apply_in_order(mariadb, s3, protocol, tmp_path):
    """Canal-json without the TiDB extension gives a row only its millisecond, csv without
    include-commit-ts nothing: transactions of one millisecond (one file) share a commit-ts, and
    the consumer must still apply them in order (an insert then a delete of one key leaves none)."""
    uri, sink, table = items_sink(s3, mariadb, "tick", SinkConfig(protocol=protocol, enable_tidb_extension=False))
    five, six = ("5", "plum", "5.00", None), ("6", "kiwi", "6.00", None)
    tick = ts(2)  # three transactions in one millisecond: logical parts 0, 1, 2
    sink.write_rows(table, [change(tick, "insert", after=five), change(tick, "insert", after=six, seq=1)])
    sink.write_rows(table, [change(tick + 1, "update", before=six, after=six[:1] + ("lime",) + six[2:])])
    sink.write_rows(table, [change(tick + 2, "delete", before=five)])
    sink.write_checkpoint(tick + 2)
    command = ["consumer", "storage", "--upstream-uri", uri, "--downstream-uri", mariadb.uri, "--once"]
    assert main(command) == 0
    assert downstream_rows(mariadb, with_note=False) == [(6, "lime", "6.00", None)]
