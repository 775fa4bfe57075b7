"""The storage sink on S3, Azure Blob and GCS, each against a real emulator on 127.0.0.1.

Every backend goes through the same fsspec code path; these tests write with StorageSink,
read back with the storage consumer through the same URI, and check the layout, the
metadata ordering, multipart uploads, expiry and that credentials never leak.
"""

from __future__ import annotations

import json
import logging
import time
import uuid

import pytest

from sparkcdc.config.replica import SinkConfig
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.consumer.storage_reader import checkpoint_ts, rebuild_tables
from sparkcdc.errors import SparkCDCError
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.sink.storage import StorageSink
from sparkcdc.sink.storage.table_definition import TableDefinition
from sparkcdc.testing.emulators import EmulatorNotInstalled, binary_for, start_emulator

pytestmark = pytest.mark.integration

BACKENDS = ("s3", "azblob", "gcs")
DAY1 = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))
TS0 = compose(int(DAY1 * 1000))
COLUMNS = (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("name", "varchar", charset="utf8mb4", length=64),
    ColumnInfo("price", "decimal", precision=10, scale=2),
    ColumnInfo("payload", "blob", charset="binary"),
)
TABLE = TableInfo("shop", "items", 7, COLUMNS, TS0, handle_key=("id",))


def ts(seconds: float) -> int:
    return compose(int((DAY1 + seconds) * 1000))


def change(commit_ts, op, before=None, after=None, seq=0):
    return RowChange(commit_ts, "shop", "items", op, before=before, after=after, seq=seq)


def config(protocol: str) -> SinkConfig:
    sink = SinkConfig(protocol=protocol, enable_tidb_extension=True)
    sink.csv.include_commit_ts = True
    sink.csv.output_old_value = True
    return sink


@pytest.fixture(scope="module", params=BACKENDS)
def emulator(request, tmp_path_factory):
    try:
        binary_for(request.param)
    except EmulatorNotInstalled as exc:
        pytest.skip(f"{request.param} emulator not installed ({exc})")
    server = start_emulator(request.param, str(tmp_path_factory.mktemp(request.param)))
    yield server
    server.stop()


@pytest.fixture
def bucket(emulator):
    name = f"cdc-{uuid.uuid4().hex[:12]}"
    emulator.create_bucket(name)
    return name


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_round_trip_layout_and_replay(emulator, bucket, protocol):
    uri = emulator.uri(bucket, "changefeed/one", protocol=protocol, file_index_digit="6")
    sink = StorageSink(uri, config(protocol), lambda: DAY1)
    first = ("1", "apple", "1.50", "\x00\xff")
    second = ("2", "pear", "2.00", None)
    sink.write_rows(TABLE, [change(ts(1), "insert", after=first), change(ts(1), "insert", after=second, seq=1)])
    sink.write_rows(TABLE, [change(ts(2), "update", before=first, after=("1", "apple", "1.75", "\x01"))])
    sink.write_rows(TABLE, [change(ts(3), "delete", before=second)])
    sink.write_checkpoint(ts(3))
    sink.write_rows(TABLE, [change(ts(4), "insert", after=("3", "past", "9.99", None))])
    sink.flush()  # data past the checkpoint: stored, not yet visible to consumers
    sink.close()

    extension = "json" if protocol == "canal-json" else "csv"
    fs = sink.target.filesystem()
    root = f"{bucket}/changefeed/one"
    version_dir = f"{root}/shop/items/{TS0}/2024-03-01"
    assert sorted(p.rsplit("/", 1)[1] for p in fs.find(version_dir)) == [
        "CDC.index", f"CDC000001.{extension}", f"CDC000002.{extension}"]
    assert fs.cat_file(f"{version_dir}/meta/CDC.index") == f"CDC000002.{extension}\n".encode()
    schema_name = f"schema_{TS0}_{TableDefinition.from_table_info(TABLE, TS0).checksum():010d}.json"
    assert fs.ls(f"{root}/shop/items/meta", detail=False) == [f"{root}/shop/items/meta/{schema_name}"]
    assert fs.cat_file(f"{root}/metadata") == b'{"checkpoint-ts":%d}' % ts(3)

    assert checkpoint_ts(uri) == ts(3)
    tables = rebuild_tables(uri, protocol, config(protocol))
    assert tables[("shop", "items")] == {
        ("1",): {"id": "1", "name": "apple", "price": "1.75", "payload": "\x01"},
    }

    # A restarted sink replays the last transactions: the consumer dedupes them.
    restarted = StorageSink(uri, config(protocol), lambda: DAY1)
    restarted.write_rows(TABLE, [change(ts(3), "delete", before=second)])
    restarted.write_rows(TABLE, [change(ts(4), "insert", after=("3", "past", "9.99", None))])
    restarted.write_checkpoint(ts(4))
    assert fs.exists(f"{version_dir}/CDC000003.{extension}")
    rebuilt = rebuild_tables(uri, protocol, config(protocol))[("shop", "items")]
    assert sorted(rebuilt) == [("1",), ("3",)]


def test_ddl_schema_files_and_new_version_dir(emulator, bucket):
    uri = emulator.uri(bucket, "", protocol="canal-json", date_separator="none")
    sink = StorageSink(uri, config("canal-json"), lambda: DAY1)
    sink.write_rows(TABLE, [change(ts(1), "insert", after=("1", "a", "1.00", None))])
    altered = TableInfo("shop", "items", 7, COLUMNS + (ColumnInfo("note", "text", charset="utf8mb4"),),
                        ts(2), handle_key=("id",))
    sink.write_ddl(DDLEvent(ts(2), "shop", "items", "ALTER TABLE items ADD note TEXT", "add column",
                            table_info=altered, pre_table_info=TABLE))
    sink.write_rows(altered, [change(ts(3), "update", before=("1", "a", "1.00", None, None),
                                     after=("1", "a", "1.00", None, "hi"))])
    sink.write_checkpoint(ts(3))
    fs = sink.target.filesystem()
    schema_files = fs.ls(f"{bucket}/shop/items/meta", detail=False)
    assert [p.rsplit("/", 1)[1].split("_")[1] for p in schema_files] == [str(TS0), str(ts(2))]
    assert fs.exists(f"{bucket}/shop/items/{ts(2)}/CDC00000000000000000001.json")
    tables = rebuild_tables(emulator.uri(bucket), "canal-json")
    assert tables[("shop", "items")] == {
        ("1",): {"id": "1", "name": "a", "price": "1.00", "payload": None, "note": "hi"}}


def test_metadata_written_only_after_the_data_it_covers(emulator, bucket):
    uri = emulator.uri(bucket, "ordered", protocol="csv")
    sink = StorageSink(uri, config("csv"), lambda: DAY1)
    writes: list[str] = []
    upload = sink._fs.pipe_file

    def recording_upload(path, data, **kwargs):
        upload(path, data, **kwargs)
        writes.append(path.rsplit("/", 1)[1])  # recorded once the PUT has returned

    sink._fs.pipe_file = recording_upload
    sink.write_rows(TABLE, [change(ts(1), "insert", after=("1", "a", "1.00", None))])
    assert writes == []  # buffered, nothing visible yet
    sink.write_checkpoint(ts(1))  # no explicit flush(): the checkpoint must flush first
    assert writes[-1] == "metadata"
    assert writes.index("CDC00000000000000000001.csv") < writes.index("CDC.index") < writes.index("metadata")
    assert rebuild_tables(uri, "csv", config("csv"))[("shop", "items")] == {
        ("1",): {"id": "1", "name": "a", "price": "1.00", "payload": None}}


def test_large_file_multipart_upload_with_flush_concurrency(emulator, bucket):
    uri = emulator.uri(bucket, "big", protocol="csv", flush_concurrency="4", file_size=str(64 << 20),
                       date_separator="none")
    sink = StorageSink(uri, config("csv"), lambda: DAY1)
    rows = [change(ts(1), "insert", after=(str(i), "n" * 1000, "1.00", None), seq=i) for i in range(12_000)]
    sink.write_rows(TABLE, rows)  # one transaction: ~12 MB in one file
    sink.write_checkpoint(ts(1))
    fs = sink.target.filesystem()
    path = f"{bucket}/big/shop/items/{TS0}/CDC00000000000000000001.csv"
    assert fs.size(path) > 12_000_000
    if emulator.backend == "s3":  # a multipart object's ETag ends in -<parts>
        assert fs.info(path)["ETag"].strip('"').endswith("-3")
    assert len(rebuild_tables(uri, "csv", config("csv"))[("shop", "items")]) == 12_000


def test_expired_files_are_removed(emulator, bucket):
    sink_config = config("canal-json")
    sink_config.cloud_storage_config.file_expiration_days = 2
    uri = emulator.uri(bucket, "expiring", protocol="canal-json")
    old = StorageSink(uri, sink_config, lambda: DAY1)
    old.write_rows(TABLE, [change(ts(1), "insert", after=("1", "a", "1.00", None))])
    old.write_checkpoint(ts(1))
    new = StorageSink(uri, sink_config, lambda: DAY1 + 3 * 86400)
    new.write_rows(TABLE, [change(ts(3 * 86400), "insert", after=("2", "b", "1.00", None))])
    new.write_checkpoint(ts(3 * 86400))  # the day's first checkpoint runs the cleanup
    fs = new.target.filesystem()
    remaining = [p.split(f"{TS0}/", 1)[1] for p in fs.find(f"{bucket}/expiring/shop/items/{TS0}")]
    assert sorted(remaining) == ["2024-03-01/meta/CDC.index", "2024-03-04/CDC00000000000000000001.json",
                                 "2024-03-04/meta/CDC.index"]
    assert fs.exists(f"{bucket}/expiring/metadata")


def test_credentials_never_in_output_logs_or_errors(emulator, bucket, caplog):
    secrets = [v for k, v in emulator.credentials.items() if k in ("secret-access-key", "account-key")]
    if emulator.backend == "gcs":  # fake-gcs-server needs none; a credentials file path is masked
        secrets = ["/secret/path/key.json"]
    caplog.set_level(logging.DEBUG)
    uri = emulator.uri(bucket, "masked", protocol="csv")
    sink = StorageSink(uri, config("csv"), lambda: DAY1)
    shown = [sink.target.uri, repr(sink.target), repr(sink.target.location), str(sink.target)]
    if emulator.backend == "gcs":
        with pytest.raises(SparkCDCError) as bad_file:
            StorageSink(uri + "&credentials-file=/secret/path/key.json", config("csv"))
        shown.append(str(bad_file.value))
    missing = StorageSink(emulator.uri(f"{bucket}-missing", "x", protocol="csv"), config("csv"), lambda: DAY1)
    missing.write_rows(TABLE, [change(ts(1), "insert", after=("1", "a", "1.00", None))])
    with pytest.raises(SparkCDCError) as failure:
        missing.write_checkpoint(ts(1))
    shown += [str(failure.value), json.dumps(failure.value.to_json()), caplog.text]
    for secret in secrets:
        assert all(secret not in text for text in shown), secret
    assert "xxxxx" in sink.target.uri or emulator.backend == "gcs"
    assert mask_sink_uri(uri + "&credentials-file=/secret/path/key.json").count("/secret/") == 0


def test_a_polling_reader_sees_tables_written_after_its_first_listing(emulator, bucket):
    """A consumer keeps one file system for its life: listings must not be cached (adlfs did)."""
    from sparkcdc.consumer.storage_consumer import StorageConsumer

    uri = emulator.uri(bucket, "poll", protocol="canal-json")
    sink = StorageSink(uri, config("canal-json"), lambda: DAY1)

    class Recorder:
        def __init__(self):
            self.rows = []

        def write_rows(self, table, rows):
            self.rows.extend(rows)

        def write_ddl(self, ddl):
            pass

        def flush(self):
            pass

        def close(self):
            pass

    downstream = Recorder()
    consumer = StorageConsumer(uri, downstream, "canal-json", config("canal-json"))
    sink.write_rows(TABLE, [change(ts(1), "insert", after=("1", "a", "1.00", None))])
    sink.write_checkpoint(ts(1))
    consumer.sync_once()
    other = TableInfo("shop", "later", 8, COLUMNS, TS0, handle_key=("id",))
    sink.write_rows(other, [RowChange(ts(2), "shop", "later", "insert", after=("2", "b", "2.00", None))])
    sink.write_rows(TABLE, [change(ts(2), "insert", after=("3", "c", "3.00", None))])
    sink.write_checkpoint(ts(2))
    consumer.sync_once()
    assert sorted((r.table, r.after[0]) for r in downstream.rows) == [("items", "1"), ("items", "3"), ("later", "2")]
