"""Schema versions below the minimum changefeed checkpoint are garbage-collected by the capture,
reads at or after it are unchanged, and nothing may start below it afterwards."""

import pytest

from sparkcdc.errors import ErrStartTsInvalid
from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.server.capture import Capture, CaptureOptions
from sparkcdc.model.changefeed import ChangefeedInfo, ChangefeedStatus
from sparkcdc.upstream.txn_index import TableVersion, TxnIndex, TxnRecord


def table(name, version, *cols):
    return TableInfo("db", name, 1, tuple(ColumnInfo(c, "int") for c in cols), version)


def ddl_txn(ts):
    return TxnRecord(ts, None, BinlogPosition("mysql-bin.000001", ts), BinlogPosition("mysql-bin.000001", ts + 1), 1, True)


def fill(index):
    """a: versions 1000 (x), 1010 (x, y), 1020 (x, y, z); b created at 1005, dropped at 1015."""
    index.bootstrap(BinlogPosition("mysql-bin.000001", 100), 1000, [table("a", 1000, "x")])
    index.append([ddl_txn(1005), ddl_txn(1010), ddl_txn(1015), ddl_txn(1020)], [], [
        TableVersion("db", "b", 1005, table("b", 1005, "v")),
        TableVersion("db", "a", 1010, table("a", 1010, "x", "y")),
        TableVersion("db", "b", 1015, None),
        TableVersion("db", "a", 1020, table("a", 1020, "x", "y", "z")),
    ], 1030)


def versions(index):
    with index._connect() as conn:
        return sorted(conn.execute("SELECT table_name, version FROM table_versions").fetchall())


def test_gc_keeps_what_reads_at_or_after_the_safe_ts_need(tmp_path):
    index = TxnIndex(str(tmp_path / "i.sqlite"))
    fill(index)
    before = {ts: [(t.table, t.column_names) for t in index.tables_at(ts)] for ts in (1012, 1016, 1025)}
    assert index.gc_schema_versions(1016) == 3  # a@1000, b@1005, b's tombstone
    assert versions(index) == [("a", 1010), ("a", 1020)]
    assert {ts: [(t.table, t.column_names) for t in index.tables_at(ts)] for ts in (1016, 1025)} == {
        ts: before[ts] for ts in (1016, 1025)}
    assert index.table_info_at("db", "a", 1016).column_names == ("x", "y")
    with pytest.raises(ErrStartTsInvalid, match="garbage-collected"):
        index.resolve_start("1012")
    assert index.resolve_start("1016") == 1016
    index.gc_schema_versions(1001)  # the watermark never moves back
    assert index.schema_gc_ts() == 1016


def changefeed(store, name, checkpoint):
    store.create_changefeed(
        ChangefeedInfo("default", name, 1, "blackhole://", "", checkpoint, 0, "stopped", None, {}, "test"),
        ChangefeedStatus(checkpoint, checkpoint))


def test_capture_collects_below_the_minimum_checkpoint_of_all_changefeeds(tmp_path):
    capture = Capture(CaptureOptions("127.0.0.1:0", str(tmp_path), "mysql://root@127.0.0.1:1/"))
    fill(TxnIndex(capture.index_path))
    capture.gc_schema_versions(once=True)
    assert len(versions(TxnIndex(capture.index_path))) == 5, "no changefeed: nothing is collected"
    changefeed(capture.store, "fast", 1025)
    changefeed(capture.store, "slow", 1012)
    capture.gc_schema_versions(once=True)
    assert versions(TxnIndex(capture.index_path)) == [("a", 1010), ("a", 1020), ("b", 1005), ("b", 1015)]
    assert TxnIndex(capture.index_path).schema_gc_ts() == 1012


def test_versions_younger_than_the_gc_life_time_stay_for_a_resume_back_past_every_checkpoint(tmp_path):
    """TiCDC can `resume --overwrite-checkpoint-ts` back within TiDB's gc life time (10 min),
    whatever the checkpoints: so are the versions kept that long. The fill's ts are in the
    epoch's first millisecond: at now = 600 s they are exactly 10 minutes old."""
    capture = Capture(CaptureOptions("127.0.0.1:0", str(tmp_path), "mysql://root@127.0.0.1:1/"))
    fill(TxnIndex(capture.index_path))
    changefeed(capture.store, "caught-up", 1025)
    capture.gc_schema_versions(once=True, now=600.0)
    assert len(versions(TxnIndex(capture.index_path))) == 5
    assert TxnIndex(capture.index_path).resolve_start("1001") == 1001
    capture.gc_schema_versions(once=True, now=600.002)
    assert versions(TxnIndex(capture.index_path)) == [("a", 1020)]
    with pytest.raises(ErrStartTsInvalid, match="garbage-collected"):
        TxnIndex(capture.index_path).resolve_start("1012")
