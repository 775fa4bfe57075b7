"""load_table: a storage sink's table as a typed Spark DataFrame, from file:// and from S3.

One test, because a SparkSession costs ~20 s to start.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
import uuid
from decimal import Decimal

import pytest

from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.spark_reader import load_table
from sparkcdc.consumer.storage_reader import rebuild_tables
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.sink.storage import StorageSink
from sparkcdc.testing.emulators import EmulatorNotInstalled, start_emulator

pytestmark = pytest.mark.integration

DAY = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))
COLUMNS = (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("big", "bigint", unsigned=True),
    ColumnInfo("price", "decimal", precision=10, scale=2),
    ColumnInfo("ratio", "double"),
    ColumnInfo("name", "varchar", charset="utf8mb4", length=32),
    ColumnInfo("raw", "varbinary", charset="binary", length=8),
    ColumnInfo("born", "date"),
    ColumnInfo("seen", "datetime", scale=3),
    ColumnInfo("kind", "enum", elements=("a", "b")),
)
TABLE = TableInfo("shop", "items", 9, COLUMNS, compose(int(DAY * 1000)), handle_key=("id",))


def ts(second: int) -> int:
    return compose(int((DAY + second) * 1000))


def change(commit_ts, op, before=None, after=None, seq=0):
    return RowChange(commit_ts, "shop", "items", op, before=before, after=after, seq=seq)


ONE = ("1", "18446744073709551615", "12.50", "0.25", "one", "\x00\xff", "2024-02-29", "2024-02-29 13:14:15.123", "a")
TWO = ("2", "5", "1.00", None, "two", None, None, None, "b")
THREE = ("3", "7", "3.00", "1.5", "three", "", "2000-01-01", "2000-01-01 00:00:00", "b")
ONE_MOVED = ("10",) + ONE[1:4] + ("one moved",) + ONE[5:]


def write_workload(uri: str, sink: SinkConfig) -> None:
    writer = StorageSink(uri, sink, lambda: DAY)
    writer.write_rows(TABLE, [change(ts(1), "insert", after=ONE), change(ts(1), "insert", after=TWO, seq=1)])
    writer.write_checkpoint(ts(1))
    writer.write_rows(TABLE, [change(ts(2), "update", before=ONE, after=ONE_MOVED),  # key change
                              change(ts(2), "insert", after=THREE, seq=1)])
    writer.write_rows(TABLE, [change(ts(3), "delete", before=TWO)])
    writer.write_checkpoint(ts(3))
    replay = StorageSink(uri, sink, lambda: DAY)  # a restart replays ts(2): at-least-once
    replay.write_rows(TABLE, [change(ts(2), "update", before=ONE, after=ONE_MOVED),
                              change(ts(2), "insert", after=THREE, seq=1)])
    replay.write_rows(TABLE, [change(ts(4), "delete", before=THREE)])  # past the checkpoint
    replay.flush()


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("sparkcdc-load-table")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    yield session
    session.stop()


def test_load_table_latest_state_types_and_as_of(spark, tmp_path):
    from pyspark.sql import types as T

    sink = SinkConfig(protocol="canal-json", enable_tidb_extension=True)
    roots = [f"file://{tmp_path}/cdc"]
    emulator = None
    try:
        emulator = start_emulator("s3", str(tmp_path / "moto"))
    except EmulatorNotInstalled:
        pass  # file:// alone still covers load_table; the S3 path is covered when moto is there
    if emulator is not None:
        bucket = f"spark-{uuid.uuid4().hex[:8]}"
        emulator.create_bucket(bucket)
        roots.append(emulator.uri(bucket, "cdc"))
    try:
        for root in roots:
            write_workload(root + ("&" if "?" in root else "?") + "protocol=canal-json", sink)
            frame = load_table(spark, root, "shop", "items", table_info=TABLE)  # enum members
            types = {f.name: f.dataType for f in frame.schema.fields}
            assert types == {
                "id": T.IntegerType(), "big": T.DecimalType(20, 0), "price": T.DecimalType(10, 2),
                "ratio": T.DoubleType(), "name": T.StringType(), "raw": T.BinaryType(),
                "born": T.DateType(), "seen": T.TimestampNTZType(), "kind": T.StringType(),
            }
            rows = {r["id"]: r.asDict() for r in frame.collect()}
            assert sorted(rows) == [3, 10]  # 1 moved to 10, 2 deleted, 3's delete not checkpointed
            assert rows[10] == {
                "id": 10, "big": Decimal("18446744073709551615"), "price": Decimal("12.50"),
                "ratio": 0.25, "name": "one moved", "raw": bytearray(b"\x00\xff"),
                "born": dt.date(2024, 2, 29), "seen": dt.datetime(2024, 2, 29, 13, 14, 15, 123000),
                "kind": "a",
            }
            assert rows[3]["raw"] == bytearray() and rows[3]["ratio"] == 1.5
            # The same keys as the plain-Python consumer.
            rebuilt = rebuild_tables(root, "canal-json", sink, {("shop", "items"): TABLE})[("shop", "items")]
            assert sorted(int(k[0]) for k in rebuilt) == sorted(rows)

            earlier = {r["id"]: r["name"] for r in load_table(spark, root, "shop", "items", as_of_ts=ts(1),
                                                                    table_info=TABLE).collect()}
            assert earlier == {1: "one", 2: "two"}
    finally:
        if emulator is not None:
            emulator.stop()
