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
