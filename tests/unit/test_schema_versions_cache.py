"""TxnIndex.tables_at reads a per-process copy of the schema store (reloaded when a write moves
its generation): every write path must still show in the next read, and parsed tables are shared."""

import os

from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.txn_index import TableVersion, TxnIndex, TxnRecord


def table(name, version, *cols):
    return TableInfo("db", name, 1, tuple(ColumnInfo(c, "int") for c in cols), version)


def txn(ts):
    return TxnRecord(ts, None, BinlogPosition("mysql-bin.000001", ts), BinlogPosition("mysql-bin.000001", ts + 1), 1, True)


def shape(index, ts):
    return [(t.table, t.column_names) for t in index.tables_at(ts)]


def test_each_write_path_shows_in_the_next_cached_read(tmp_path):
    path = str(tmp_path / "i.sqlite")
    index = TxnIndex(path)
    index.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")])
    assert shape(index, 1000) == [("a", ("x",))]
    index.append([txn(1005), txn(1010)], [], [TableVersion("db", "b", 1005, table("b", 1005, "v")),
                                              TableVersion("db", "a", 1010, table("a", 1010, "x", "y"))], 1010)
    assert shape(index, 1007) == [("a", ("x",)), ("b", ("v",))]
    assert shape(index, 1010) == [("a", ("x", "y")), ("b", ("v",))]
    # Another TxnIndex on the file, as the puller in another process: the reader's copy is stale.
    TxnIndex(path).append([txn(1020)], [], [TableVersion("db", "b", 1020, None)], 1020)
    assert shape(index, 1025) == [("a", ("x", "y"))]
    index.append([txn(1030)], [], [TableVersion("db", "c", 1030, table("c", 1030, "w"))], 1025)
    assert shape(index, 1030) == [("a", ("x", "y")), ("c", ("w",))]
    index.drop_unresolved([1030])  # a failover's new primary never had it
    assert shape(index, 1030) == [("a", ("x", "y"))]
    assert index.gc_schema_versions(1025) == 3  # a@1000, b@1005, b's tombstone
    assert shape(index, 1007) == []  # below the safe ts nothing is kept
    assert shape(index, 1025) == [("a", ("x", "y"))]


def test_an_index_made_again_at_the_same_path_is_not_read_from_the_old_copy(tmp_path):
    path = str(tmp_path / "i.sqlite")
    TxnIndex(path).bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")])
    assert shape(TxnIndex(path), 1000) == [("a", ("x",))]
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    TxnIndex(path).bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("z", 1000, "q")])
    assert shape(TxnIndex(path), 1000) == [("z", ("q",))]


def test_a_table_version_is_parsed_once_and_its_json_written_once(tmp_path):
    index = TxnIndex(str(tmp_path / "i.sqlite"))
    index.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x", "y")])
    first, again = index.tables_at(1000)[0], index.tables_at(1001)[0]
    assert first is again
    assert first is TableInfo.from_json(first.to_json())
    assert first.to_json() is first.to_json()
    assert TableInfo.from_json(first.to_json()) == table("a", 1000, "x", "y")


def test_table_info_at_reads_the_same_copy_and_sees_every_write(tmp_path):
    path = str(tmp_path / "i.sqlite")
    index = TxnIndex(path)
    index.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")])
    assert index.table_info_at("db", "a", 999) is None
    assert index.table_info_at("db", "a", 1000).column_names == ("x",)
    assert index.table_info_at("db", "nope", 1000) is None
    TxnIndex(path).append([txn(1010), txn(1020)], [], [TableVersion("db", "a", 1010, table("a", 1010, "x", "y")),
                                                       TableVersion("db", "a", 1020, None)], 1020)
    assert index.table_info_at("db", "a", 1009).column_names == ("x",)
    assert index.table_info_at("db", "a", 1015).column_names == ("x", "y")
    assert index.table_info_at("db", "a", 1020) is None  # dropped
    assert index.table_info_at("db", "a", 1015) is index.tables_at(1015)[0]
    names = [("db", "a"), ("db", "nope"), ("db", "a")]
    for ts in (999, 1009, 1015, 1020):  # a batch's lookup of all its tables gives what one by one does
        assert index.table_infos_at(names, ts) == [index.table_info_at(*name, ts) for name in names]


def test_equal_table_keys_mean_equal_tables_and_a_write_moves_the_key(tmp_path):
    path = str(tmp_path / "i.sqlite")
    index = TxnIndex(path)
    index.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")])
    assert index.tables_key_at(1000) == index.tables_key_at(1009)
    key = index.tables_key_at(1009)
    TxnIndex(path).append([txn(1005)], [], [TableVersion("db", "b", 1005, table("b", 1005, "v"))], 1005)
    assert index.tables_key_at(1009) != key  # b appeared at 1005
    assert index.tables_key_at(1004) != index.tables_key_at(1005)


def test_an_index_file_of_an_older_layout_gets_the_columns_added_since(tmp_path):
    import sqlite3

    path = str(tmp_path / "old.sqlite")
    with sqlite3.connect(path) as conn:  # the first release's tables, without the added columns
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE txns (commit_ts INTEGER PRIMARY KEY, gtid TEXT, start_file TEXT NOT NULL, "
            "start_pos INTEGER NOT NULL, end_file TEXT NOT NULL, end_pos INTEGER NOT NULL, size INTEGER NOT NULL, "
            "is_ddl INTEGER NOT NULL);")
    index = TxnIndex(path)
    with sqlite3.connect(path) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(txns)")}
        assert {"pieces", "epoch", "breaks", "skip_replication"} <= columns
        assert conn.execute("PRAGMA user_version").fetchone()[0] != 0
    index.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")])
    index.append([txn(1005)], [], [], 1005)
    assert [t.commit_ts for t in TxnIndex(path).txns_between(1000, 1005)] == [1005]


def test_a_parsed_table_keeps_its_text_as_its_json():
    info = table("j", 1000, "x", "y")
    text = info.to_json()
    parsed = TableInfo.from_json(text)
    assert parsed == info and parsed.to_json() == text and "_json" in vars(parsed)
    older = text.replace(',"handle_key":[]', "")  # written before handle keys were recorded
    assert older != text and TableInfo.from_json(older) == info and TableInfo.from_json(older).to_json() == older
