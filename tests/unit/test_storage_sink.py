"""The storage sink's layout and the storage consumer, round-tripped through a temp dir."""

import json
import os
import time

import pytest

from test_codec_fixtures import FULL, NULLS, TABLE, TS1, TS2, TS3, UPDATED
from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.storage_reader import checkpoint_ts, rebuild_tables
from sparkcdc.errors import ErrSinkUnknownProtocol, ErrSinkURIInvalid
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.sink.storage import StorageSink, parse_storage_uri
from sparkcdc.sink.storage import writer as storage_writer
from sparkcdc.sink.storage.table_definition import TableDefinition

NOW = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))  # local time, like TiCDC's date dirs
CLOCK = lambda: NOW  # noqa: E731
V = TABLE.version


def row(ts, op, before=None, after=None, seq=0):
    return RowChange(ts, "db", "all_types", op, before=before, after=after, seq=seq)


def with_id(values, new_id):
    return (new_id,) + tuple(values[1:])


def sink_config(protocol):
    sink = SinkConfig(protocol=protocol, enable_tidb_extension=True)
    sink.csv.include_commit_ts = True
    return sink


# -- URI ------------------------------------------------------------------------------
def test_uri_overrides_config_and_validates(tmp_path):
    target = parse_storage_uri(
        f"file://{tmp_path}?protocol=csv&worker-count=4&flush-interval=3s&file-size=1048576"
        "&file-index-digit=6&date-separator=none&enable-tidb-extension=true",
        SinkConfig(protocol="canal-json"),
    )
    assert target.root == str(tmp_path) and target.protocol == "csv"
    assert target.sink.cloud_storage_config.worker_count == 4
    assert target.sink.file_index_digit == 6 and target.sink.date_separator == "none"
    assert "protocol" in target.overridden and target.flush_interval_seconds == 3
    assert parse_storage_uri(str(tmp_path), SinkConfig(protocol="csv")).root == str(tmp_path)


@pytest.mark.parametrize(
    "query,error",
    [
        ("protocol=avro", ErrSinkUnknownProtocol),
        ("", ErrSinkUnknownProtocol),
        ("protocol=csv&worker-count=0", ErrSinkURIInvalid),
        ("protocol=csv&flush-interval=1s", ErrSinkURIInvalid),
        ("protocol=csv&flush-interval=11m", ErrSinkURIInvalid),
        ("protocol=csv&file-size=100", ErrSinkURIInvalid),
        ("protocol=csv&flush-concurrency=513", ErrSinkURIInvalid),
        ("protocol=csv&file-index-digit=5", ErrSinkURIInvalid),
        ("protocol=csv&bogus=1", ErrSinkURIInvalid),
    ],
)
def test_uri_rejects(query, error):
    with pytest.raises(error):
        parse_storage_uri("file:///tmp/x?" + query, SinkConfig())


# -- layout ---------------------------------------------------------------------------
def test_layout_schema_index_and_checkpoint(tmp_path):
    sink = StorageSink(f"file://{tmp_path}?protocol=csv&file-index-digit=6", sink_config("csv"), CLOCK)
    sink.write_rows(TABLE, [row(TS1, "insert", after=FULL)])
    sink.flush()
    sink.write_rows(TABLE, [row(TS2, "delete", before=FULL)])
    sink.flush()
    sink.write_checkpoint(TS2)
    sink.write_checkpoint(TS1)  # never moves backwards
    data_dir = tmp_path / "db" / "all_types" / str(V) / "2024-03-01"
    assert sorted(os.listdir(data_dir)) == ["CDC000001.csv", "CDC000002.csv", "meta"]
    assert (data_dir / "meta" / "CDC.index").read_text() == "CDC000002.csv\n"
    (schema_file,) = os.listdir(tmp_path / "db" / "all_types" / "meta")
    definition = TableDefinition.from_table_info(TABLE, V)
    assert schema_file == f"schema_{V}_{definition.checksum():010d}.json"
    schema = json.loads((tmp_path / "db" / "all_types" / "meta" / schema_file).read_text())
    assert schema["TableColumnsTotal"] == len(TABLE.columns) and schema["Version"] == 1
    assert schema["TableColumns"][0] == {
        "ColumnName": "id", "ColumnType": "INT", "ColumnPrecision": "11",
        "ColumnNullable": "false", "ColumnIsPk": "true",
    }
    assert (tmp_path / "metadata").read_text() == '{"checkpoint-ts":%d}' % TS2
    assert checkpoint_ts(str(tmp_path)) == TS2
    assert not [n for n in os.listdir(data_dir) if n.startswith(".")]


@pytest.mark.parametrize("can_exchange", [True, False])
def test_index_and_metadata_rewrites_reuse_their_two_inodes(tmp_path, monkeypatch, can_exchange):
    """CDC.index and metadata trade names with a `.swap` twin: after the first rewrites the same
    two inodes hold them, whatever the content's length; without renameat2 a rename still
    leaves the newest content in place."""
    if not can_exchange:
        monkeypatch.setattr(storage_writer, "_RENAMEAT2", None)
    elif storage_writer._RENAMEAT2 is None:
        pytest.skip("no renameat2 on this system")
    sink = StorageSink(f"file://{tmp_path}?protocol=csv&file-index-digit=6", sink_config("csv"), CLOCK)
    meta = tmp_path / "db" / "all_types" / str(V) / "2024-03-01" / "meta"
    seen: dict[str, set[int]] = {"index": set(), "metadata": set()}
    for number in range(1, 7):
        sink.write_rows(TABLE, [row(TS1 + number, "insert", after=with_id(FULL, str(number)))])
        sink.write_checkpoint(TS1 + number)
        assert (meta / "CDC.index").read_text() == f"CDC{number:06d}.csv\n"
        assert (tmp_path / "metadata").read_text() == '{"checkpoint-ts":%d}' % (TS1 + number)
        if number >= 2:  # the first write renamed the twin in: the next one made it anew
            seen["index"].add(os.stat(meta / "CDC.index").st_ino)
            seen["metadata"].add(os.stat(tmp_path / "metadata").st_ino)
    assert sorted(os.listdir(meta)) == ([".CDC.index.swap", "CDC.index"] if can_exchange else ["CDC.index"])
    assert checkpoint_ts(str(tmp_path)) == TS1 + 6
    if can_exchange:
        assert len(seen["index"]) == 2 and len(seen["metadata"]) == 2
        # A shorter content than the twin held (a checkpoint with fewer digits) is cut to size.
        sink._write_atomic("metadata", b"{}", rewrite=True)
        assert (tmp_path / "metadata").read_bytes() == b"{}"


def test_schema_json_matches_go_marshal_indent():
    text = TableDefinition.from_table_info(TABLE, V, "CREATE TABLE t (id INT)", 3).to_json()
    assert text.startswith(
        '{\n    "Table": "all_types",\n    "Schema": "db",\n    "Version": 1,\n'
        f'    "TableVersion": {V},\n    "Query": "CREATE TABLE t (id INT)",\n    "Type": 3,\n'
        '    "TableColumns": [\n        {\n            "ColumnName": "id",\n'
    )


def test_ddl_writes_table_and_database_schema_files(tmp_path):
    sink = StorageSink(f"file://{tmp_path}?protocol=canal-json", sink_config("canal-json"), CLOCK)
    new_version = compose(1_700_000_010_000)
    sink.write_ddl(DDLEvent(new_version, "db", "all_types", "ALTER TABLE all_types ADD c INT",
                            "add column", table_info=TABLE.with_version(new_version)))
    sink.write_ddl(DDLEvent(new_version + 1, "db2", "", "CREATE DATABASE db2", "create database"))
    (table_schema,) = os.listdir(tmp_path / "db" / "all_types" / "meta")
    assert table_schema.startswith(f"schema_{new_version}_")
    assert json.loads((tmp_path / "db" / "all_types" / "meta" / table_schema).read_text())["Type"] == 5
    (db_schema,) = os.listdir(tmp_path / "db2" / "meta")
    db_json = json.loads((tmp_path / "db2" / "meta" / db_schema).read_text())
    assert db_json["TableColumns"] is None and db_json["Type"] == 1 and db_json["Table"] == ""


def test_file_size_splits_between_transactions(tmp_path):
    sink = StorageSink(f"file://{tmp_path}?protocol=csv&file-size=1048576&date-separator=none",
                       sink_config("csv"), CLOCK)
    big = with_id(FULL, "9")[:10] + ("x" * 600_000,) + FULL[11:]
    sink.write_rows(TABLE, [row(TS1, "insert", after=big), row(TS1, "insert", after=with_id(big, "10"), seq=1),
                            row(TS2, "insert", after=with_id(FULL, "11"))])
    version_dir = tmp_path / "db" / "all_types" / str(V)
    assert (version_dir / "CDC00000000000000000001.csv").read_text().count('"I"') == 2  # one txn
    sink.close()
    assert (version_dir / "CDC00000000000000000002.csv").read_text().count('"I"') == 1


def test_restart_continues_index_and_date_change_restarts(tmp_path):
    uri = f"file://{tmp_path}?protocol=canal-json&file-index-digit=6"
    first = StorageSink(uri, sink_config("canal-json"), CLOCK)
    first.write_rows(TABLE, [row(TS1, "insert", after=FULL)])
    first.close()
    second = StorageSink(uri, sink_config("canal-json"), CLOCK)
    second.write_rows(TABLE, [row(TS2, "insert", after=with_id(FULL, "5"))])
    second.flush()
    day = tmp_path / "db" / "all_types" / str(V) / "2024-03-01"
    assert sorted(os.listdir(day)) == ["CDC000001.json", "CDC000002.json", "meta"]
    next_day = StorageSink(uri, sink_config("canal-json"), lambda: NOW + 86400)
    next_day.write_rows(TABLE, [row(TS3, "insert", after=with_id(FULL, "6"))])
    next_day.close()
    assert sorted(os.listdir(tmp_path / "db" / "all_types" / str(V) / "2024-03-02")) == ["CDC000001.json", "meta"]


def test_a_data_file_the_index_names_but_that_was_never_written_keeps_its_number(tmp_path):
    """A crash between writing CDC.index and its data file: the next sink writes that number."""
    uri = f"file://{tmp_path}?protocol=canal-json&file-index-digit=6"
    first = StorageSink(uri, sink_config("canal-json"), CLOCK)
    first.write_rows(TABLE, [row(TS1, "insert", after=FULL)])
    first.close()
    day = tmp_path / "db" / "all_types" / str(V) / "2024-03-01"
    (day / "meta" / "CDC.index").write_text("CDC000002.json\n")
    second = StorageSink(uri, sink_config("canal-json"), CLOCK)
    second.write_rows(TABLE, [row(TS2, "insert", after=with_id(FULL, "5"))])
    second.close()
    assert sorted(os.listdir(day)) == ["CDC000001.json", "CDC000002.json", "meta"]
    third = StorageSink(uri, sink_config("canal-json"), CLOCK)  # the named file is there now: the next
    third.write_rows(TABLE, [row(TS3, "insert", after=with_id(FULL, "6"))])
    third.close()
    assert sorted(os.listdir(day)) == ["CDC000001.json", "CDC000002.json", "CDC000003.json", "meta"]


def test_a_directory_removed_between_writes_is_made_again(tmp_path):
    """Local writes make a directory only when opening a file in it fails: one removed under the
    sink (expired-file cleanup, an operator) comes back with the next file."""
    import shutil

    sink = StorageSink(f"file://{tmp_path}?protocol=canal-json&file-index-digit=6", sink_config("canal-json"), CLOCK)
    sink.write_rows(TABLE, [row(TS1, "insert", after=FULL)])
    sink.flush()
    day = tmp_path / "db" / "all_types" / str(V) / "2024-03-01"
    shutil.rmtree(day)
    sink.write_rows(TABLE, [row(TS2, "insert", after=with_id(FULL, "5"))])
    sink.flush()
    assert sorted(os.listdir(day)) == ["CDC000002.json", "meta"]
    assert (day / "meta" / "CDC.index").read_text() == "CDC000002.json\n"
    assert not [n for n in os.listdir(day) if n.startswith(".")]  # no temp file left behind


def test_flush_interval_holds_rows_across_checkpoints_until_the_oldest_has_waited_it(tmp_path):
    """flush-interval=2s: the batches' rows wait in one buffer per table, the checkpoint with them,
    until the first of them has waited 2 s; then one file holds them all and `metadata` covers it.
    Rows still held at close are dropped: no checkpoint covers them, so the changefeed hands them
    over again when it resumes."""
    now = [NOW]
    uri = f"file://{tmp_path}?protocol=canal-json&file-index-digit=6&flush-interval=2s"
    sink = StorageSink(uri, sink_config("canal-json"), lambda: now[0])
    assert sink.holds_rows
    day = tmp_path / "db" / "all_types" / str(V) / "2024-03-01"
    sink.write_rows(TABLE, [row(TS1, "insert", after=FULL)])
    assert sink.write_checkpoint(TS1) == 0
    now[0] += 1.5
    sink.write_rows(TABLE, [row(TS2, "insert", after=with_id(FULL, "5"))])
    assert sink.write_checkpoint(TS2) == 0
    assert not day.exists() and not (tmp_path / "metadata").exists()
    now[0] += 0.5
    assert sink.write_checkpoint(TS2 + 1) == TS2 + 1
    assert sorted(os.listdir(day)) == ["CDC000001.json", "meta"]
    assert (day / "CDC000001.json").read_text().count('"type":"INSERT"') == 2
    assert checkpoint_ts(str(tmp_path)) == TS2 + 1
    assert sink.write_checkpoint(TS2 + 2) == TS2 + 2  # nothing held: the checkpoint moves at once
    sink.write_rows(TABLE, [row(TS3, "insert", after=with_id(FULL, "6"))])
    assert sink.write_checkpoint(TS3) == 0
    sink.close()
    assert sorted(os.listdir(day)) == ["CDC000001.json", "meta"] and checkpoint_ts(str(tmp_path)) == TS2 + 2
    # Without flush-interval every checkpoint writes the batch's files.
    assert not StorageSink(f"file://{tmp_path}?protocol=csv", sink_config("csv"), CLOCK).holds_rows


@pytest.mark.parametrize("protocol", ["csv", "canal-json"])
def test_a_large_buffer_waits_in_a_hidden_temp_file_that_becomes_the_data_file(tmp_path, monkeypatch, protocol):
    """On file:// a buffer past SPILL_BYTES goes on in a hidden temp file: no data file appears
    before the flush, and the file it becomes holds the same bytes as one written from memory
    (the header once), in the date directory of the flush, with no temp file left; a full
    buffer (file-size) and rows dropped at close (flush-interval) leave none either."""
    def write(root, clock, spill, query="", text="x"):
        monkeypatch.setattr(storage_writer, "SPILL_BYTES", spill)
        config = sink_config(protocol)
        config.csv.output_field_header = True
        sink = StorageSink(f"file://{root}?protocol={protocol}&file-index-digit=6{query}", config, clock)
        for n, ts in enumerate((TS1, TS2, TS3)):
            values = with_id(FULL, str(10 + n))
            sink.write_rows(TABLE, [row(ts, "insert", after=values[:10] + (text,) + values[11:])])
        return sink

    version = os.path.join("db", "all_types", str(V))
    write(tmp_path / "memory", CLOCK, 1 << 30).close()
    expected = (tmp_path / "memory" / version / "2024-03-01" / f"CDC000001.{'csv' if protocol == 'csv' else 'json'}")
    now = [NOW]
    sink = write(tmp_path / "spilled", lambda: now[0], 1)
    day = tmp_path / "spilled" / version / "2024-03-01"
    assert [name for name in os.listdir(day) if not name.startswith(".CDC.")] == []  # only the temp file
    now[0] += 86400  # the flush comes the next day: the file goes to that day's directory
    sink.close()
    next_day = tmp_path / "spilled" / version / "2024-03-02"
    assert sorted(os.listdir(next_day)) == [expected.name, "meta"] and os.listdir(day) == []
    assert (next_day / expected.name).read_bytes() == expected.read_bytes()
    assert expected.read_text().count('"I"' if protocol == "csv" else '"INSERT"') == 3
    if protocol == "csv":
        assert expected.read_text().count("ticdc-meta$operation") == 1  # the header, once

    held = write(tmp_path / "held", CLOCK, 1, "&flush-interval=1m")
    held.close()  # rows flush-interval held: dropped, their temp file with them
    assert os.listdir(tmp_path / "held" / version / "2024-03-01") == []

    # 600 KB rows: the second transaction fills the spilled buffer (file-size 1 MiB), the third
    # goes in a file of its own at close.
    full = write(tmp_path / "full", CLOCK, 1, "&file-size=1048576", "x" * 600_000)
    full.close()
    files = sorted(os.listdir(tmp_path / "full" / version / "2024-03-01"))
    assert files[-1] == "meta" and [(tmp_path / "full" / version / "2024-03-01" / name).read_text().count("x" * 600_000)
                                    for name in files[:-1]] == [2, 1]


def test_a_spilled_buffer_that_cannot_be_written_leaves_no_temp_file_and_no_partial_data_file(tmp_path, monkeypatch):
    """A disk that fills while a buffer spills, or a data directory that cannot be made at the
    flush: a storage error names the path, the temp file is removed, and the close that follows
    writes no file holding part of a transaction."""
    import errno

    from sparkcdc.errors import ErrStorageIO, SparkCDCError

    monkeypatch.setattr(storage_writer, "SPILL_BYTES", 1)
    uri = f"file://{tmp_path}?protocol=canal-json&file-index-digit=6"
    day = tmp_path / "db" / "all_types" / str(V) / "2024-03-01"
    sink = StorageSink(uri, sink_config("canal-json"), CLOCK)
    sink.write_rows(TABLE, [row(TS1, "insert", after=FULL)])  # spilled
    real = storage_writer.write_parts

    def full_disk(handle, parts):
        real(handle, [bytes(parts[0])[:10]])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage_writer, "write_parts", full_disk)
    with pytest.raises(SparkCDCError, match="No space left on device"):
        sink.write_rows(TABLE, [row(TS2, "insert", after=with_id(FULL, "5"))])
    monkeypatch.setattr(storage_writer, "write_parts", real)
    sink.close()
    assert os.listdir(day) == []

    now = [NOW]
    sink = StorageSink(uri, sink_config("canal-json"), lambda: now[0])
    sink.write_rows(TABLE, [row(TS3, "insert", after=with_id(FULL, "6"))])
    now[0] += 86400
    (tmp_path / "db" / "all_types" / str(V) / "2024-03-02").write_text("not a directory")
    with pytest.raises(ErrStorageIO, match="2024-03-02"):
        sink.flush()
    assert os.listdir(day) == []


# -- consumer round trip ----------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["csv", "canal-json"])
def test_round_trip_with_pk_change_deletes_and_replays(tmp_path, protocol):
    uri = f"file://{tmp_path}?protocol={protocol}"
    config = sink_config(protocol)
    if protocol == "csv":
        config.csv.output_old_value = True
    sink = StorageSink(uri, config, CLOCK)
    moved = with_id(UPDATED, "7")
    sink.write_rows(TABLE, [row(TS1, "insert", after=FULL), row(TS1, "insert", after=NULLS, seq=1)])
    sink.flush()
    sink.write_rows(TABLE, [row(TS2, "update", before=FULL, after=moved)])
    sink.flush()
    sink.write_checkpoint(TS2)
    sink.close()
    # A restarted sink replays from the checkpoint: duplicates, then a change past it.
    replay = StorageSink(uri, config, CLOCK)
    replay.write_rows(TABLE, [row(TS1, "insert", after=FULL), row(TS1, "insert", after=NULLS, seq=1)])
    replay.write_rows(TABLE, [row(TS2, "update", before=FULL, after=moved)])
    replay.write_rows(TABLE, [row(TS3, "delete", before=NULLS)])
    replay.flush()

    tables = rebuild_tables(str(tmp_path), protocol, config, table_infos={("db", "all_types"): TABLE})
    expected = {
        ("7",): dict(zip(TABLE.column_names, moved)),
        ("2",): dict(zip(TABLE.column_names, NULLS)),
    }
    assert tables[("db", "all_types")] == expected  # TS3 is past the checkpoint

    replay.write_checkpoint(TS3)
    tables = rebuild_tables(str(tmp_path), protocol, config, table_infos={("db", "all_types"): TABLE})
    assert tables[("db", "all_types")] == {("7",): dict(zip(TABLE.column_names, moved))}


def test_schema_file_paths_match_ticdc_golden_values():
    """tiflow pkg/sink/cloudstorage/table_definition_test.go (TestTableDefinitionGenFilePath)."""
    table = TableInfo("schema1", "table1", 20, (
        ColumnInfo("Id", "int", nullable=False, is_primary_key=True),
        ColumnInfo("LastName", "varchar", nullable=False, length=128, charset="utf8mb4"),
        ColumnInfo("FirstName", "varchar", length=64, charset="utf8mb4"),
        ColumnInfo("Birthday", "datetime"),
    ), 100)
    assert TableDefinition.from_table_info(table, 100).file_path() == \
        "schema1/table1/meta/schema_100_0785427252.json"
    assert TableDefinition("schema1", "", 100, "", 0, ()).file_path() == "schema1/meta/schema_100_3233644819.json"
    assert json.loads(TableDefinition("schema1", "", 100, "", 0, ()).to_json())["TableColumns"] is None


def test_storage_errors_are_transient_unless_retrying_cannot_fix_them():
    from sparkcdc.errors import ErrStorageIO, ErrStorageUnavailable
    from sparkcdc.sink.storage.writer import storage_error

    for permanent in (NotADirectoryError(20, "Not a directory"), PermissionError("403 Forbidden"),
                      FileNotFoundError("NoSuchBucket")):
        assert type(storage_error("x", permanent)) is ErrStorageIO
    for transient in (ConnectionRefusedError(111, "Connection refused"), TimeoutError(), OSError("503 SlowDown"),
                      RuntimeError("Could not connect to the endpoint URL")):
        assert type(storage_error("x", transient)) is ErrStorageUnavailable


@pytest.mark.parametrize("most", [None, 1, 7, 1000])
def test_a_data_file_is_its_parts_in_order_whatever_each_writev_takes(tmp_path, monkeypatch, most):
    """write_parts hands the parts to writev IOV_MAX at a time, WRITE_CALL_BYTES at most (a part
    longer than that goes in slices), and goes on after a short write from the first byte not
    written (`most`: the bytes a call writes at most)."""
    parts = [b"", *(bytes([65 + i % 26]) * (i % 13) for i in range(3000)), b"x" * 500, b"tail"]
    monkeypatch.setattr(storage_writer, "_IOV_MAX", 64)
    monkeypatch.setattr(storage_writer, "WRITE_CALL_BYTES", 100)
    real = os.writev
    calls = []

    def writev(fd, buffers):
        data = b"".join(bytes(b) for b in buffers)
        calls.append((len(buffers), len(data)))
        return real(fd, [data[:most] if most is not None else data])

    monkeypatch.setattr(storage_writer.os, "writev", writev)
    path = tmp_path / "file"
    handle = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        storage_writer.write_parts(handle, parts)
    finally:
        os.close(handle)
    assert path.read_bytes() == b"".join(parts)
    assert max(pieces for pieces, _ in calls) <= 64 and max(size for _, size in calls) <= 100
