"""The lakehouse sinks on local tables: type mapping, MERGE planning, exactly-once replays,
DDL as schema evolution and bad input, each table read back with DuckDB (not the writer)."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from sparkcdc.config.replica import SinkConfig
from sparkcdc.errors import (ErrInvalidReplicaConfig, ErrLakehouseCatalog, ErrLakehouseSchemaChange,
                             ErrLakehouseTableIncompatible, ErrSinkURIInvalid, ErrStorageUnavailable)
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.sink.lakehouse import make_lakehouse_sink
from sparkcdc.sink.lakehouse.changes import ChangeBuffer, merge_plan
from sparkcdc.sink.lakehouse.config import parse_lakehouse_uri
from sparkcdc.sink.lakehouse.sink import TableName
from sparkcdc.sink.lakehouse.types import arrow_type, canonical_texts, typed_array
from sparkcdc.testing.lakehouse import canonical_rows, duckdb_connection

FORMATS = ("delta", "iceberg")

# (column, canonical texts) covering every type of testing/alltypes.py at its edges.
TYPED = [
    (ColumnInfo("ti", "tinyint"), ["-128", "127"]),
    (ColumnInfo("tiu", "tinyint", unsigned=True), ["0", "255"]),
    (ColumnInfo("miu", "mediumint", unsigned=True), ["16777215"]),
    (ColumnInfo("i", "int"), ["-2147483648", "2147483647"]),
    (ColumnInfo("iu", "int", unsigned=True), ["4294967295"]),
    (ColumnInfo("bi", "bigint"), ["-9223372036854775808", "9223372036854775807"]),
    (ColumnInfo("biu", "bigint", unsigned=True), ["18446744073709551615", "0"]),
    (ColumnInfo("d", "decimal", precision=65, scale=30),
     ["-12345678901234567890123456789012345.123456789012345678901234567890", "0.000000000000000000000000000001"]),
    (ColumnInfo("d2", "decimal", precision=10, scale=2), ["-0.05", "99999999.99", "0.00"]),
    (ColumnInfo("d3", "decimal", precision=20, scale=10), ["0.0000000001"]),
    (ColumnInfo("f", "float"), ["3.14159", "-0.0000000001"]),
    (ColumnInfo("db", "double"), ["2.718281828459045", "1" + "0" * 300]),
    (ColumnInfo("vc", "varchar"), ["héllo 😀 世界", ""]),
    (ColumnInfo("bn", "binary", charset="binary"), ["\x00\x01", "\xff\xff\xff\xff"]),
    (ColumnInfo("bl", "blob", charset="binary"), [bytes(range(256)).decode("latin-1"), "abc"]),
    (ColumnInfo("dt", "date"), ["1000-01-01", "9999-12-31"]),
    (ColumnInfo("tm", "time"), ["-838:59:59", "838:59:59"]),
    (ColumnInfo("tm3", "time", scale=3), ["-00:00:01.500"]),
    (ColumnInfo("dtm", "datetime"), ["1000-01-01 00:00:00"]),
    (ColumnInfo("dtm1", "datetime", scale=1), ["2024-02-29 23:59:59.9"]),
    (ColumnInfo("dtm6", "datetime", scale=6), ["9999-12-31 23:59:59.999999"]),
    (ColumnInfo("ts", "timestamp"), ["1970-01-01 00:00:01"]),
    (ColumnInfo("ts3", "timestamp", scale=3), ["2038-01-19 03:14:07.999"]),
    (ColumnInfo("yr", "year"), ["1901", "2155", "0000"]),
    (ColumnInfo("en", "enum", elements=("a", "b,c")), ["b,c", ""]),
    (ColumnInfo("st", "set", elements=("x", "y")), ["x,y", ""]),
    (ColumnInfo("b1", "bit", length=1), ["1", "0"]),
    (ColumnInfo("b64", "bit", length=64), ["18446744073709551615"]),
    (ColumnInfo("b10", "bit", length=10), ["1023"]),
    (ColumnInfo("js", "json"), ['{"k": [1, "😀", null]}']),
]


@pytest.mark.parametrize("column,texts", TYPED, ids=[c.name for c, _ in TYPED])
def test_every_type_round_trips(column, texts):
    values = typed_array(column, pa.array(texts + [None], pa.string()))
    assert values.type == arrow_type(column)
    assert canonical_texts(column, values.to_pylist()) == texts + [None]


def test_zero_dates_become_null():
    values = typed_array(ColumnInfo("d", "datetime"), pa.array(["0000-00-00 00:00:00", "2024-01-01 00:00:00"]))
    assert values.to_pylist()[0] is None and values.to_pylist()[1] is not None


COLUMNS = (ColumnInfo("id", "int", is_primary_key=True, nullable=False), ColumnInfo("v", "varchar"),
           ColumnInfo("n", "int"))
INFO = TableInfo("db", "t", 1, COLUMNS, 1, ("id",))


def ins(ts, key, value="x", n="1", seq=0, info=INFO):
    return RowChange(ts, info.schema, info.table, "insert", None, (str(key), value, n)[:len(info.columns)], seq)


def upd(ts, old, new, seq=0):
    return RowChange(ts, "db", "t", "update", old, new, seq)


def dele(ts, key, value="x", n="1", seq=0):
    return RowChange(ts, "db", "t", "delete", (str(key), value, n), None, seq)


def test_merge_plan_keeps_the_last_change_per_key():
    buffer = ChangeBuffer(INFO)
    buffer.add_rows([ins(1, 1), ins(1, 2), ins(1, 3, seq=2),
                     upd(2, ("1", "x", "1"), ("9", "moved", "1")),  # key 1 moves to 9
                     dele(3, 2), ins(3, 2, "again", seq=1),  # deleted, then inserted again
                     dele(4, 3)])
    plan = merge_plan(INFO, buffer.rows())
    assert sorted(plan.upserts.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 2, "v": "again", "n": 1}, {"id": 9, "v": "moved", "n": 1}]
    assert sorted(plan.deletes["id"].to_pylist()) == [1, 3]


@pytest.fixture(scope="module")
def duck():
    connection = duckdb_connection()
    yield connection
    connection.close()


def read(sink, fmt, duck, name=TableName("db", "t"), columns=COLUMNS):
    """The table as canonical rows, read by DuckDB."""
    tables = sink._tables
    if fmt == "delta":
        result = duck.execute(f"SELECT * FROM delta_scan('{tables.uri(name)}')")
    else:
        location = tables.catalog.load_table(tables.identifier(name)).metadata_location
        result = duck.execute(f"SELECT * FROM iceberg_scan('{location}')")
    names = [d[0] for d in result.description]
    key = ["_commit_ts", "_seq"] if "_commit_ts" in names else ["id" if "id" in names else "k"]
    records = result.fetchall()
    rows = canonical_rows(list(columns), names, records, key)
    assert len(rows) == len(records), "two rows with one key"
    return rows


def commits(sink, fmt, name=TableName("db", "t")) -> list[str]:
    """The commit-ts each table version records, oldest first (compactions left out)."""
    tables = sink._tables
    if fmt == "delta":
        from deltalake import DeltaTable

        history = DeltaTable(tables.uri(name)).history()
        return [h["sparkcdc.commit-ts"] for h in reversed(history) if "sparkcdc.commit-ts" in h]
    table = tables.catalog.load_table(tables.identifier(name))
    return [s.summary.additional_properties["sparkcdc.commit-ts"] for s in table.snapshots()
            if "sparkcdc.commit-ts" in s.summary.additional_properties]


def make(tmp_path, fmt, **options):
    config = SinkConfig()
    for key, value in options.items():
        setattr(getattr(config, fmt), key, value)
    return make_lakehouse_sink(f"{fmt}://{tmp_path}/lake", "default/cf", config)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_replayed_batch_is_applied_once(tmp_path, fmt, duck):
    sink = make(tmp_path, fmt)
    first = [ins(10, 1), ins(10, 2), ins(11, 3)]
    second = [upd(20, ("1", "x", "1"), ("1", "y", "2")), dele(21, 2), ins(21, 4, seq=1)]
    sink.write_rows(INFO, first)
    sink.write_checkpoint(15)
    sink.write_rows(INFO, second)
    sink.write_checkpoint(25)
    # A crash after the commits, before the checkpoint: both batches come again, cut differently.
    sink.write_rows(INFO, first + second)
    sink.write_checkpoint(25)
    assert read(sink, fmt, duck) == {("1",): {"id": "1", "v": "y", "n": "2"}, ("3",): {"id": "3", "v": "x", "n": "1"},
                                     ("4",): {"id": "4", "v": "x", "n": "1"}}
    assert commits(sink, fmt) == ["15", "25"]
    # A fresh sink (a restarted server) reads the watermark from the table.
    again = make(tmp_path, fmt)
    again.write_rows(INFO, second + [ins(30, 5)])
    again.write_checkpoint(35)
    assert set(read(again, fmt, duck)) == {("1",), ("3",), ("4",), ("5",)}
    assert commits(again, fmt) == ["15", "25", "35"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_changelog_mode_appends_every_change_once(tmp_path, fmt, duck):
    sink = make(tmp_path, fmt, mode="changelog")
    batch = [ins(10, 1), ins(10, 2, seq=1), upd(11, ("1", "x", "1"), ("1", "y", "1")), dele(12, 2)]
    for _ in range(2):  # the second time is a replay
        sink.write_rows(INFO, batch)
        sink.write_checkpoint(12)
    rows = read(sink, fmt, duck)
    assert [(k, r["_op"], r["id"], r["v"]) for k, r in sorted(rows.items())] == [
        ((10, 0), "insert", "1", "x"), ((10, 1), "insert", "2", "x"),
        ((11, 0), "update", "1", "y"), ((12, 0), "delete", "2", "x")]


def alter(ts, query, before, after, kind="add column"):
    return DDLEvent(ts, "db", "t", query, kind, after, before)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ddl_evolves_the_table(tmp_path, fmt, duck):
    sink = make(tmp_path, fmt)
    sink.write_ddl(DDLEvent(5, "db", "t", "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), n INT)",
                            "create table", INFO))
    sink.write_rows(INFO, [ins(10, 1), ins(10, 2)])
    # ADD COLUMN with a DEFAULT: existing rows take it (the batch's rows commit first, at 19).
    added = TableInfo("db", "t", 1, COLUMNS + (ColumnInfo("c", "varchar", default="dflt"),), 20, ("id",))
    sink.write_ddl(alter(20, "ALTER TABLE t ADD COLUMN c VARCHAR(5) DEFAULT 'dflt'", INFO, added))
    # RENAME COLUMN keeps the data; widening INT -> BIGINT keeps it too.
    renamed_columns = (COLUMNS[0], ColumnInfo("w", "varchar"), ColumnInfo("n", "bigint"), added.columns[3])
    renamed = TableInfo("db", "t", 1, renamed_columns, 30, ("id",))
    sink.write_ddl(alter(30, "ALTER TABLE t RENAME COLUMN v TO w, MODIFY n BIGINT", added, renamed, "multi schema change"))
    dropped = TableInfo("db", "t", 1, (renamed_columns[0], renamed_columns[2], renamed_columns[3]), 40, ("id",))
    sink.write_ddl(alter(40, "ALTER TABLE t DROP COLUMN w", renamed, dropped, "drop column"))
    sink.write_rows(dropped, [RowChange(50, "db", "t", "insert", None, ("3", "9000000000", None))])
    sink.write_checkpoint(60)
    # Replaying the DDLs (a crash before the checkpoint) changes nothing.
    sink.write_ddl(alter(40, "ALTER TABLE t DROP COLUMN w", renamed, dropped, "drop column"))
    assert read(sink, fmt, duck, columns=dropped.columns) == {
        ("1",): {"id": "1", "n": "1", "c": "dflt"}, ("2",): {"id": "2", "n": "1", "c": "dflt"},
        ("3",): {"id": "3", "n": "9000000000", "c": None}}
    assert commits(sink, fmt)[-1] == "60"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_type_change_the_formats_cannot_make_stops_with_nothing_written(tmp_path, fmt):
    sink = make(tmp_path, fmt)
    sink.write_rows(INFO, [ins(10, 1)])
    sink.write_checkpoint(10)
    to_text = TableInfo("db", "t", 1, (COLUMNS[0], COLUMNS[1], ColumnInfo("n", "varchar")), 20, ("id",))
    with pytest.raises(ErrLakehouseSchemaChange, match=r"db\.t.*MODIFY n VARCHAR.*recreate"):
        sink.write_ddl(alter(20, "ALTER TABLE t MODIFY n VARCHAR(10)", INFO, to_text, "modify column"))
    assert sink._tables.watermark(TableName("db", "t")) == 10


@pytest.mark.parametrize("fmt", FORMATS)
def test_strict_schema_mode_stops_at_a_schema_change(tmp_path, fmt):
    sink = make(tmp_path, fmt, schema_mode="strict")
    sink.write_rows(INFO, [ins(10, 1)])
    sink.write_checkpoint(10)
    added = TableInfo("db", "t", 1, COLUMNS + (ColumnInfo("c", "int"),), 20, ("id",))
    with pytest.raises(ErrLakehouseSchemaChange, match="strict"):
        sink.write_ddl(alter(20, "ALTER TABLE t ADD COLUMN c INT", INFO, added))


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_existing_table_with_other_columns_is_refused(tmp_path, fmt):
    sink = make(tmp_path, fmt)
    other = TableInfo("db", "t", 1, (COLUMNS[0], ColumnInfo("v", "int")), 1, ("id",))
    sink.write_rows(other, [RowChange(5, "db", "t", "insert", None, ("1", "7"))])
    sink.write_checkpoint(5)
    fresh = make(tmp_path, fmt)
    fresh.write_rows(INFO, [ins(10, 1)])
    with pytest.raises(ErrLakehouseTableIncompatible, match=r"db\.t.*v: table has int32, upstream needs string"):
        fresh.write_checkpoint(10)
    assert fresh._tables.watermark(TableName("db", "t")) == 5


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncate_rename_and_drop_table(tmp_path, fmt, duck):
    sink = make(tmp_path, fmt)
    sink.write_rows(INFO, [ins(10, 1), ins(10, 2)])
    sink.write_checkpoint(10)
    truncate = DDLEvent(20, "db", "t", "TRUNCATE TABLE t", "truncate table", INFO, INFO)
    sink.write_ddl(truncate)
    sink.write_rows(INFO, [ins(30, 3)])
    sink.write_checkpoint(30)
    sink.write_ddl(truncate)  # replayed after a crash: the table is past it
    renamed = TableInfo("db", "u", 1, COLUMNS, 40, ("id",))
    rename = DDLEvent(40, "db", "u", "RENAME TABLE t TO u", "rename table", renamed, INFO)
    sink.write_ddl(rename)
    sink.write_ddl(rename)  # replayed
    assert sink._tables.watermark(TableName("db", "t")) is None
    assert read(sink, fmt, duck, TableName("db", "u")) == {("3",): {"id": "3", "v": "x", "n": "1"}}
    sink.write_ddl(DDLEvent(50, "db", "u", "DROP TABLE u", "drop table", None, renamed))
    assert sink._tables.watermark(TableName("db", "u")) is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_compaction_after_n_commits_keeps_the_rows(tmp_path, fmt, duck):
    sink = make(tmp_path, fmt, compact_every=3)
    for batch in range(6):
        sink.write_rows(INFO, [ins(10 + batch, batch)])
        sink.write_checkpoint(10 + batch)
    assert set(read(sink, fmt, duck)) == {(str(k),) for k in range(6)}
    assert commits(sink, fmt) == [str(10 + b) for b in range(6)]


def test_keyless_table_in_upsert_mode_is_refused(tmp_path):
    sink = make(tmp_path, "delta")
    keyless = TableInfo("db", "k", 1, (ColumnInfo("a", "int"),), 1, ())
    sink.write_rows(keyless, [RowChange(5, "db", "k", "insert", None, ("1",))])
    with pytest.raises(ErrLakehouseTableIncompatible, match="changelog"):
        sink.write_checkpoint(5)


def test_sink_uris(tmp_path):
    target = parse_lakehouse_uri("delta+s3://bucket/lake?endpoint=http://127.0.0.1:9000&access-key=a"
                                 "&secret-access-key=b&mode=changelog", SinkConfig())
    assert target.path("db", "t") == "s3://bucket/lake/db/t" and target.options.mode == "changelog"
    assert target.storage_options()["AWS_ALLOW_HTTP"] == "true"
    with pytest.raises(ErrLakehouseCatalog, match="nessie"):
        parse_lakehouse_uri(f"iceberg://{tmp_path}?catalog=nessie", SinkConfig())
    with pytest.raises(ErrLakehouseCatalog, match="catalog-uri"):
        parse_lakehouse_uri("iceberg+s3://bucket/wh", SinkConfig())
    with pytest.raises(ErrSinkURIInvalid, match="unknown parameter 'protocol'"):
        parse_lakehouse_uri(f"delta://{tmp_path}?protocol=csv", SinkConfig())
    with pytest.raises(ErrInvalidReplicaConfig, match="upsert or changelog"):
        parse_lakehouse_uri(f"delta://{tmp_path}?mode=merge", SinkConfig())


@pytest.mark.parametrize("fmt", FORMATS)
def test_changelog_with_old_values_follows_ddl_and_records_truncate(tmp_path, fmt, duck):
    sink = make(tmp_path, fmt, mode="changelog", old_value=True)
    sink.write_rows(INFO, [ins(10, 1), upd(11, ("1", "x", "1"), ("1", "y", "2"))])
    sink.write_checkpoint(11)
    renamed = TableInfo("db", "t", 1, (COLUMNS[0], ColumnInfo("w", "varchar"), ColumnInfo("n", "bigint"),
                                       ColumnInfo("c", "int", default="5")), 20, ("id",))
    sink.write_ddl(alter(20, "ALTER TABLE t RENAME COLUMN v TO w, MODIFY n BIGINT, ADD c INT DEFAULT 5", INFO, renamed,
                         "multi schema change"))
    sink.write_rows(renamed, [RowChange(30, "db", "t", "update", ("1", "y", "2", "5"), ("1", "z", "3", "6"))])
    sink.write_checkpoint(30)
    sink.write_ddl(DDLEvent(40, "db", "t", "TRUNCATE TABLE t", "truncate table", renamed, renamed))
    rows = read(sink, fmt, duck, columns=renamed.columns)
    assert [(r["_op"], r["w"], r["_old_w"], r["n"], r["_old_n"], r["c"], r["_old_c"]) for _, r in sorted(rows.items())] == [
        ("insert", "x", None, "1", None, "5", None), ("update", "y", "x", "2", "1", "5", None),
        ("update", "z", "y", "3", "2", "6", "5"), ("truncate", None, None, None, None, None, None)]


def test_table_library_errors_become_coded_errors(tmp_path):
    sink = make(tmp_path, "delta")
    sink.write_rows(INFO, [ins(10, 1)])
    sink.write_checkpoint(10)
    (tmp_path / "lake" / "db" / "t" / "_delta_log" / "00000000000000000001.json").write_text("not json")
    sink._tables.close()  # a fresh read of the log, as after a restart
    sink.write_rows(INFO, [ins(20, 2)])
    with pytest.raises(ErrStorageUnavailable, match=r"lakehouse sink: committing the batch ending at 20 failed"):
        sink.write_checkpoint(20)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_batch_of_many_tables_commits_each_once(tmp_path, fmt, duck):
    sink = make(tmp_path, fmt)
    infos = [TableInfo("db", f"t{n}", n, COLUMNS, 1, ("id",)) for n in range(6)]
    for _ in range(2):  # the second time is a replay
        for info in infos:
            sink.write_rows(info, [ins(10, key, info=info) for key in range(3)])
        sink.write_checkpoint(10)
    for info in infos:
        assert set(read(sink, fmt, duck, TableName("db", info.table))) == {("0",), ("1",), ("2",)}
        assert commits(sink, fmt, TableName("db", info.table)) == ["10"]


KEY_TYPES = [
    (ColumnInfo("k", "varchar", is_primary_key=True, nullable=False), ["a", "b", "é😀", "zz"]),
    (ColumnInfo("k", "varbinary", charset="binary", is_primary_key=True, nullable=False), ["\x00", "\x01\xff", "a", "\xff"]),
    (ColumnInfo("k", "decimal", precision=12, scale=3, is_primary_key=True, nullable=False),
     ["-1.500", "0.000", "2.250", "99999.999"]),
    (ColumnInfo("k", "bigint", unsigned=True, is_primary_key=True, nullable=False),
     ["0", "9223372036854775808", "18446744073709551614", "18446744073709551615"]),
    (ColumnInfo("k", "datetime", scale=6, is_primary_key=True, nullable=False),
     ["1000-01-01 00:00:00.000000", "2024-02-29 23:59:59.999999", "2024-03-01 00:00:00.000000", "9999-12-31 00:00:00.000001"]),
    (ColumnInfo("k", "timestamp", scale=3, is_primary_key=True, nullable=False),
     ["1970-01-01 00:00:01.000", "2000-01-01 00:00:00.500", "2038-01-19 03:14:07.999", "2024-06-01 12:00:00.000"]),
    (ColumnInfo("k", "date", is_primary_key=True, nullable=False), ["1000-01-01", "2024-02-29", "2024-03-01", "9999-12-31"]),
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_key_type_matches_its_rows(tmp_path, fmt, duck):
    """Updates, key moves and deletes find their rows across batches (Iceberg prunes files by the
    key's bounds, Delta matches in its MERGE) for each kind of key value: one table per kind."""
    infos = [TableInfo("db", f"t_{n}", n, (key, ColumnInfo("v", "varchar")), 1, ("k",))
             for n, (key, _) in enumerate(KEY_TYPES)]
    sink = make(tmp_path, fmt)
    for batch in range(3):  # three files per table, one key each
        for info, (_, values) in zip(infos, KEY_TYPES):
            sink.write_rows(info, [RowChange(10 + batch, "db", info.table, "insert", None, (values[batch], "x"))])
        sink.write_checkpoint(10 + batch)
    for info, (_, values) in zip(infos, KEY_TYPES):
        sink.write_rows(info, [RowChange(20, "db", info.table, "update", (values[0], "x"), (values[0], "y")),
                               RowChange(20, "db", info.table, "update", (values[1], "x"), (values[3], "moved"), 1),
                               RowChange(21, "db", info.table, "delete", (values[2], "x"), None)])
    sink.write_checkpoint(21)
    for info, (key, values) in zip(infos, KEY_TYPES):
        assert read(sink, fmt, duck, TableName("db", info.table), info.columns) == {
            (values[0],): {"k": values[0], "v": "y"}, (values[3],): {"k": values[3], "v": "moved"}}, key.mysql_type


# Partition DDLs: (statement, DDL type, whether rows move or go without row events).
PARTITION_DDLS = [
    ("ALTER TABLE t TRUNCATE PARTITION p0, p1", "truncate table partition", "deletes the rows of partition\\(s\\) p0, p1"),
    ("ALTER TABLE t DROP PARTITION p1", "drop table partition", "drops partition\\(s\\) p1 with their rows"),
    ("ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION p0 VALUES IN (1), PARTITION p5 VALUES IN (2))",
     "reorganize table partition", "LIST partition\\(s\\) p0"),
    ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE u", "exchange table partition",
     "swaps the rows of partition p0 with those of table `db`.`u`"),
    ("ALTER TABLE t CONVERT PARTITION p0 TO TABLE u", "drop table partition", "into the new table `db`.`u`"),
    ("ALTER TABLE t CONVERT TABLE u TO PARTITION p9 VALUES LESS THAN (MAXVALUE)", "add table partition",
     "rows of table `db`.`u` into a new partition"),
    # These keep every row (MariaDB refuses them when a row would not fit): nothing to do.
    ("ALTER TABLE t ADD PARTITION (PARTITION p9 VALUES LESS THAN (100))", "add table partition", None),
    ("ALTER TABLE t REORGANIZE PARTITION p0, p1 INTO (PARTITION p0 VALUES LESS THAN (20))", "reorganize table partition",
     None),
    ("ALTER TABLE t REORGANIZE PARTITION", "reorganize table partition", None),
    ("ALTER TABLE t COALESCE PARTITION 2", "reorganize table partition", None),
    ("ALTER TABLE t PARTITION BY HASH (id) PARTITIONS 4", "alter table partitioning", None),
    ("ALTER TABLE t REMOVE PARTITIONING", "remove table partitioning", None),
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_partition_ddls_that_move_or_remove_rows_stop_the_changefeed_after_the_rows_before_them(tmp_path, fmt, duck):
    """The sink does not know which rows a partition holds: a lake table that kept the rows a
    partition DDL removed upstream would differ from it silently. TRUNCATE PARTITION ALL empties it."""
    sink = make(tmp_path, fmt)
    sink.write_rows(INFO, [ins(10, 1), ins(10, 2)])
    sink.write_rows(TableInfo("db", "u", 1, COLUMNS, 1, ("id",)), [ins(10, 7, info=TableInfo("db", "u", 1, COLUMNS, 1,
                                                                                                ("id",)))])
    sink.write_checkpoint(10)
    ts = 20
    for query, kind, effect in PARTITION_DDLS:
        sink.write_rows(INFO, [ins(ts - 5, ts)])  # the batch's rows before the DDL
        ddl = DDLEvent(ts, "db", "t", query, kind, INFO, INFO)
        if effect is None:
            sink.write_ddl(ddl)
        else:
            with pytest.raises(ErrLakehouseSchemaChange) as raised:
                sink.write_ddl(ddl)
            message = raised.value.message
            assert re.search(effect, message), message
            assert "db.t" in message and query in message
            assert f"resume -c cf --overwrite-checkpoint-ts {ts + 1}" in message
            assert ("--tables db.t,db.u" if "u " in query + " " else "--tables db.t") in message
        assert sink._tables.watermark(TableName("db", "t")) == ts - 1, "the rows before the DDL are committed"
        ts += 10
    assert set(read(sink, fmt, duck)) == {("1",), ("2",)} | {(str(t),) for t in range(20, ts, 10)}
    # A table the lake does not hold (not replicated here) has nothing to lose.
    sink.write_ddl(DDLEvent(ts, "db", "other", "ALTER TABLE other DROP PARTITION p1", "drop table partition",
                            INFO, INFO))
    sink.write_ddl(DDLEvent(ts + 10, "db", "t", "ALTER TABLE t TRUNCATE PARTITION ALL", "truncate table partition",
                            INFO, INFO))
    assert read(sink, fmt, duck) == {}
