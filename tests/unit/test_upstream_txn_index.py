import multiprocessing
import os
import sqlite3

import pytest

from sparkcdc.errors import ErrStartTsInvalid
from sparkcdc.model.events import ColumnInfo, DDLEvent, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.upstream.txn_index import TableVersion, TxnIndex, TxnRecord


def table(name, version, *cols):
    return TableInfo("db", name, 1, tuple(ColumnInfo(c, "int") for c in cols), version)


def txn(ts, start, end, gtid, is_ddl=False, marked=False):
    return TxnRecord(ts, gtid, BinlogPosition("mysql-bin.000001", start), BinlogPosition("mysql-bin.000001", end),
                     end - start, is_ddl, skip_replication=marked)


@pytest.fixture
def index(tmp_path):
    idx = TxnIndex(str(tmp_path / "i.sqlite"))
    idx.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")])
    return idx


def test_empty(tmp_path):
    idx = TxnIndex(str(tmp_path / "e.sqlite"))
    assert idx.resolved_ts() == 0 and idx.is_empty()
    with pytest.raises(ErrStartTsInvalid):
        idx.resolve_start("")


def test_append_and_queries(index):
    assert index.resolved_ts() == index.first_ts() == 1000
    ddl = DDLEvent(1002, "db", "a", "ALTER TABLE a ADD y int", "alter table", table("a", 1002, "x", "y"))
    index.append(
        [txn(1001, 100, 200, "0-1-1"), txn(1002, 200, 250, "0-1-2", True), txn(1003, 250, 300, "0-1-3")],
        [ddl],
        [TableVersion("db", "a", 1002, ddl.table_info), TableVersion("db", "b", 1003, table("b", 1003, "z"))],
        1003,
    )
    index.append([], [], [TableVersion("db", "b", 1010, None)], 1010)
    assert index.resolved_ts() == 1010
    assert [t.commit_ts for t in index.txns_between(1001, 1003)] == [1002, 1003]
    assert index.next_ddl_after(1000) == 1002 and index.next_ddl_after(1002) is None
    assert index.ddls_between(1000, 1010)[0].table_info.column_names == ("x", "y")
    assert index.table_info_at("db", "a", 1001).column_names == ("x",)
    assert index.table_info_at("db", "a", 1002).column_names == ("x", "y")
    assert [t.table for t in index.tables_at(1005)] == ["a", "b"]
    assert [t.table for t in index.tables_at(1010)] == ["a"]
    assert index.position_at(999) is None
    assert index.position_at(1000) == BinlogPosition("mysql-bin.000001", 100)
    assert index.position_at(1002) == BinlogPosition("mysql-bin.000001", 250)
    assert index.resolve_start("mysql-bin.000001:250") == 1002
    assert index.resolve_start("mysql-bin.000001:100") == 1000
    assert index.resolve_start("0-1-2") == 1002
    assert index.resolve_start("1001") == 1001
    with pytest.raises(ErrStartTsInvalid):
        index.resolve_start("999")
    with pytest.raises(ErrStartTsInvalid):
        index.resolve_start("mysql-bin.000001:201")
    with pytest.raises(ErrStartTsInvalid):
        index.resolve_start("not a start")


def test_resolved_ts_never_moves_back(index):
    index.append([], [], [], 2000)
    index.append([], [], [], 1500)
    assert index.resolved_ts() == 2000


def test_failed_append_leaves_nothing(index):
    with pytest.raises(Exception):
        index.append([txn(1001, 100, 200, "0-1-1"), txn(1001, 200, 300, "0-1-2")], [], [], 1001)
    assert index.txns_between(0, 10**9) == [] and index.resolved_ts() == 1000


def test_appends_keep_their_connection_so_the_wal_is_not_checkpointed_each_time(index):
    wal = index.path + "-wal"
    index.append([txn(1001, 100, 200, "0-1-1")], [], [], 1001)
    index.append([txn(1002, 200, 300, "0-1-2")], [], [], 1002)
    # A connection closed after each append would have been the last one: SQLite checkpoints and
    # removes the WAL then. Readers (another instance, as the API's) see the appends meanwhile.
    assert os.path.getsize(wal) > 0
    assert [t.commit_ts for t in TxnIndex(index.path).txns_between(0, 10**9)] == [1001, 1002]
    index.close()
    assert not os.path.exists(wal)
    index.append([txn(1003, 300, 400, "0-1-3")], [], [], 1003)  # a closed index opens its connection again
    assert index.resolved_ts() == 1003


def test_an_append_after_a_failed_one_goes_through(index):
    with pytest.raises(sqlite3.IntegrityError):
        index.append([txn(1001, 100, 200, "0-1-1"), txn(1001, 200, 300, "0-1-2")], [], [], 1001)
    index.append([txn(1001, 100, 200, "0-1-1")], [], [], 1001)
    assert [t.gtid for t in index.txns_between(0, 10**9)] == ["0-1-1"] and index.resolved_ts() == 1001


def _read_in_child(path, queue):
    queue.put(TxnIndex(path).resolved_ts())


def test_readable_from_another_process(index):
    index.append([txn(1001, 100, 200, "0-1-1")], [], [], 1001)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_read_in_child, args=(index.path, queue))
    proc.start()
    proc.join(30)
    assert queue.get(timeout=5) == 1001


def test_the_mark_of_a_bdr_sinks_writes_is_kept_and_old_index_files_gain_its_column(tmp_path):
    path = tmp_path / "old.sqlite"
    # An index file from before the mark: its txns table lacks the column.
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE txns (commit_ts INTEGER PRIMARY KEY, gtid TEXT, start_file TEXT NOT NULL, "
                     "start_pos INTEGER NOT NULL, end_file TEXT NOT NULL, end_pos INTEGER NOT NULL, "
                     "size INTEGER NOT NULL, is_ddl INTEGER NOT NULL, pieces TEXT, foreign_key_checks TEXT)")
        conn.execute("INSERT INTO txns VALUES (5, '0-1-5', 'mysql-bin.000001', 100, 'mysql-bin.000001', 200, 100, 0, "
                     "NULL, NULL)")
    index = TxnIndex(str(path))
    index.append([txn(10, 300, 400, "0-2-1", marked=True), txn(20, 400, 500, "0-1-6")], [], [], 20)
    assert [(t.commit_ts, t.skip_replication) for t in index.txns_between(0, 20)] == [(5, False), (10, True), (20, False)]
    assert [(s.commit_ts, s.skip_replication) for s in index.txn_sizes_between(0, 20)] == [
        (5, False), (10, True), (20, False)]
    assert index.marked_between(0, 20) == {10} and index.marked_between(10, 20) == set()


def test_a_gtid_resolves_after_its_whole_group(index):
    """CREATE TABLE ... SELECT's group is two records with its GTID: the DDL, then its rows."""
    rows = TxnRecord(1003, "0-1-2", BinlogPosition("mysql-bin.000001", 250), BinlogPosition("mysql-bin.000001", 400),
                     150, False, continues_group=True)
    index.append([txn(1001, 100, 200, "0-1-1"), txn(1002, 200, 250, "0-1-2", True), rows,
                  txn(1004, 400, 450, "0-1-3")], [], [], 1004)
    assert [t.continues_group for t in index.txns_between(1000, 1004)] == [False, False, True, False]
    assert index.resolve_start("0-1-2") == 1003
    assert index.resolve_start("mysql-bin.000001:400") == 1003


@pytest.fixture
def gtid_index(tmp_path):
    """An index started at GTID state 0-1-10,1-1-4 that then indexed domain 0 and 1 transactions."""
    from sparkcdc.model.gtid import parse_state

    idx = TxnIndex(str(tmp_path / "g.sqlite"))
    idx.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")],
                  gtid_state=parse_state("0-1-10,1-1-4"))
    idx.record_source("a", 3306, 1, None, "mariadb", new_epoch=False)
    idx.append([txn(1001, 100, 200, "0-1-11"), txn(1002, 200, 300, "1-1-5"), txn(1003, 300, 400, "0-1-12")],
               [], [], 1003)
    return idx


def test_the_index_knows_the_gtid_state_at_every_commit_ts(gtid_index):
    assert str(gtid_index.gtid_executed()) == "0-1-12,1-1-5"
    assert str(gtid_index.gtid_state_at(1000)) == "0-1-10,1-1-4"
    assert str(gtid_index.gtid_state_at(1001)) == "0-1-11,1-1-4"
    assert str(gtid_index.gtid_state_at(1002)) == "0-1-11,1-1-5"
    assert str(gtid_index.gtid_state_at(1500)) == "0-1-12,1-1-5"
    assert gtid_index.gtid_state_at(999) is None
    # ... and the reverse: a state names where a changefeed stands.
    assert gtid_index.resolve_start("0-1-11,1-1-5") == 1002
    assert gtid_index.resolve_start("0-1-10,1-1-4") == 1000
    assert gtid_index.resolve_start("0-1-12") == 1003


def test_a_start_before_the_index_says_where_to_back_fill_from(gtid_index):
    from sparkcdc.upstream.txn_index import StartBeforeIndex

    with pytest.raises(StartBeforeIndex) as by_gtid:
        gtid_index.resolve_start("0-1-7,1-1-4")
    assert str(by_gtid.value.gtid_state) == "0-1-7,1-1-4" and by_gtid.value.code == "SPARKCDC:ErrStartTsInvalid"
    with pytest.raises(StartBeforeIndex) as by_position:
        gtid_index.resolve_start("mysql-bin.000001:50")
    assert by_position.value.position == BinlogPosition("mysql-bin.000001", 50)
    with pytest.raises(StartBeforeIndex) as by_ts:
        gtid_index.resolve_start("999")
    assert by_ts.value.ts == 999
    with pytest.raises(ErrStartTsInvalid, match="not executed yet"):
        gtid_index.resolve_start("0-1-20")


def test_a_failover_remaps_positions_into_a_new_epoch_and_drops_only_unresolved_transactions(gtid_index):
    from sparkcdc.upstream.txn_index import Remapped

    b = gtid_index.record_source("b", 3307, 2, None, "mariadb", new_epoch=True)
    assert b.epoch == 1 and gtid_index.current_source() == b and gtid_index.source(0).host == "a"
    on_b = BinlogPosition("b-bin.000003", 900)
    gtid_index.remap(1, [Remapped(1003, on_b, BinlogPosition("b-bin.000003", 1000), (), breaks=True)])
    moved = gtid_index.txns_between(1002, 1003)[0]
    assert (moved.start, moved.epoch, moved.breaks, moved.size) == (on_b, 1, True, 100)
    assert [s.epoch for s in gtid_index.txn_sizes_between(1000, 1003)] == [0, 0, 1]
    # A FILE:POS names the current server's binlog.
    assert gtid_index.resolve_start("b-bin.000003:1000") == 1003
    with pytest.raises(ErrStartTsInvalid):
        gtid_index.resolve_start("mysql-bin.000001:200")

    gtid_index.append([txn(1004, 400, 500, "0-1-13")], [], [TableVersion("db", "c", 1004, table("c", 1004, "z"))],
                      1003)  # persisted past resolved-ts
    with pytest.raises(ValueError):
        gtid_index.drop_unresolved([1003, 1004])
    gtid_index.drop_unresolved([1004])
    assert gtid_index.last_txn().commit_ts == 1003 and str(gtid_index.gtid_executed()) == "0-1-12,1-1-5"
    assert [t.table for t in gtid_index.tables_at(2000)] == ["a"]


def test_a_position_maps_only_among_its_own_servers_transactions(gtid_index):
    """Each server numbers its binlog on its own: after a failover, a position of the new server
    is compared with the transactions re-mapped onto it, never with the old server's, and a
    position of the old server is not covered any more."""
    from sparkcdc.upstream.txn_index import Remapped

    gtid_index.append([], [], [], 1003, position=BinlogPosition("mysql-bin.000001", 450))
    assert gtid_index.covers(BinlogPosition("mysql-bin.000001", 450)) and gtid_index.ts_at_position(
        BinlogPosition("mysql-bin.000001", 350)) == 1002
    gtid_index.record_source("b", 3307, 2, None, "mariadb", new_epoch=True)
    # The old server's positions: not covered in the new epoch, still mapped in their own.
    assert not gtid_index.covers(BinlogPosition("mysql-bin.000001", 450), 0)
    assert gtid_index.ts_at_position(BinlogPosition("mysql-bin.000001", 350), 0) == 1002
    # The new server (same file name, other offsets): its read position is not the old one's.
    assert not gtid_index.covers(BinlogPosition("mysql-bin.000001", 40))
    gtid_index.remap(1, [Remapped(1002, BinlogPosition("mysql-bin.000001", 20), BinlogPosition("mysql-bin.000001", 30),
                                  (), breaks=True),
                         Remapped(1003, BinlogPosition("mysql-bin.000001", 30), BinlogPosition("mysql-bin.000001", 40),
                                  (), breaks=False)])
    assert gtid_index.covers(BinlogPosition("mysql-bin.000001", 40), 1)
    assert gtid_index.ts_at_position(BinlogPosition("mysql-bin.000001", 35)) == 1002
    assert gtid_index.ts_at_position(BinlogPosition("mysql-bin.000001", 40), 1) == 1003
    assert gtid_index.ts_at_position(BinlogPosition("mysql-bin.000001", 25), 1) == 1001, "before its first: the older"


def test_an_index_from_before_gtid_states_learns_its_start_state(index):
    from sparkcdc.model.gtid import parse_state

    index.append([txn(1001, 100, 200, "0-1-1")], [], [], 1001)
    assert index.gtid_executed() is None and index.gtid_state_at(1001) is None
    index.set_start_gtid(parse_state(""))
    assert str(index.gtid_executed()) == "0-1-1" and str(index.gtid_state_at(1000)) == ""
