"""Batch planning and batch writing, with an in-memory fake of the transaction index."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, strategies as st

from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.model.events import ColumnInfo, DDLEvent, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.pipeline import planning
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.pipeline.planning import (
    CATCH_UP_BATCH_FACTOR,
    IDLE_BATCH_SECONDS,
    BatchOffset,
    BatchPacer,
    SourceOptions,
    chunks_waiting,
    plan_next_batch,
    set_chunks_waiting,
    split_ranges,
)
from sparkcdc.sink.contract import Sink
from sparkcdc.upstream.txn_index import TxnRecord, TxnSize


def txn(ts: int, size: int = 100, ddl: bool = False, pos: int | None = None) -> TxnRecord:
    start = pos if pos is not None else ts * 1000
    return TxnRecord(ts, None, BinlogPosition("mysql-bin.000001", start),
                     BinlogPosition("mysql-bin.000001", start + size), size, ddl)


class FakeIndex:
    def __init__(self, txns, resolved, ddls=(), tables=()):
        self.txns, self.resolved, self.ddls, self.tables = list(txns), resolved, list(ddls), list(tables)

    def resolved_ts(self):
        return self.resolved

    def txns_between(self, lo, hi, limit=None):
        return [t for t in self.txns if lo < t.commit_ts <= hi][:limit]

    def txn_sizes_between(self, lo, hi, limit=None):
        return [TxnSize(t.commit_ts, t.size, bool(t.pieces), t.is_ddl, t.skip_replication, t.epoch, t.breaks)
                for t in self.txns_between(lo, hi, limit)]

    def next_ddl_after(self, ts):
        return min((t.commit_ts for t in self.txns if t.is_ddl and t.commit_ts > ts), default=None)

    def ddls_between(self, lo, hi):
        return [d for d in self.ddls if lo < d.commit_ts <= hi]

    def table_infos_at(self, names, ts):
        return [next((t for t in self.tables if (t.schema, t.table) == name), None) for name in names]

    def source(self, epoch):
        return None  # no server recorded: ranges read from the upstream URI's first server


def plan_batch_end(index, start: int, target_ts: int, max_batch_bytes: int) -> int:
    """The next batch's end as a commit-ts, whole transactions only."""
    return plan_next_batch(index, BatchOffset(start), target_ts, max_batch_bytes, split_transactions=False)[0].ts


def test_batch_ends_at_resolved_ts_when_no_ddl():
    index = FakeIndex([txn(10), txn(20)], resolved=25)
    assert plan_batch_end(index, 5, 0, 1 << 30) == 25


def test_ddl_is_the_last_transaction_of_its_batch():
    index = FakeIndex([txn(10), txn(20, ddl=True), txn(30)], resolved=40)
    assert plan_batch_end(index, 5, 0, 1 << 30) == 20
    assert plan_batch_end(index, 20, 0, 1 << 30) == 40


def test_target_ts_caps_the_batch_and_nothing_new_keeps_start():
    index = FakeIndex([txn(10), txn(20)], resolved=25)
    assert plan_batch_end(index, 5, 15, 1 << 30) == 15
    assert plan_batch_end(index, 25, 0, 1 << 30) == 25


def test_batch_bytes_cap_cuts_on_a_transaction_boundary():
    index = FakeIndex([txn(10, 60), txn(20, 60), txn(30, 60)], resolved=40)
    assert plan_batch_end(index, 5, 0, 100) == 20
    # A single transaction larger than the cap still makes progress.
    assert plan_batch_end(index, 5, 0, 10) == 10


def test_a_failover_backlog_is_replayed_in_bounded_batches_that_cover_it_all():
    # 40 MB of 8 KB transactions waiting at the checkpoint when a capture takes a changefeed over
    # (what the HA e2e saw): the checkpoint must move batch by batch, not after one huge batch.
    backlog = [txn(ts, 8 << 10) for ts in range(1, 5121)]
    index = FakeIndex(backlog, resolved=6000)
    cap = SourceOptions.from_options({"index_path": "x", "upstream_uri": "mysql://u@h/", "start_ts": "0"}).max_batch_bytes
    start, batches = 0, []
    while (end := plan_batch_end(index, start, 0, cap)) > start:
        batches.append(index.txns_between(start, end))
        start = end
    assert start == 6000
    assert [t for batch in batches for t in batch] == backlog
    assert len(batches) >= 4
    assert all(sum(t.size for t in batch) <= cap + (8 << 10) for batch in batches)


@given(st.lists(st.tuples(st.integers(1, 500), st.booleans()), max_size=40), st.integers(1, 8))
def test_split_ranges_keeps_every_dml_txn_once_in_order_and_never_spans_a_ddl(spec, parts):
    txns = [txn(i + 1, size, ddl) for i, (size, ddl) in enumerate(spec)]
    pieces = split_ranges(txns, parts)
    flat = [t for piece in pieces for t in piece]
    assert flat == [t for t in txns if not t.is_ddl]
    for piece in pieces:
        stamps = [t.commit_ts for t in piece]
        assert stamps == list(range(stamps[0], stamps[0] + len(stamps))), "a piece spans a DDL"


class RecordingSink(Sink):
    def __init__(self):
        self.calls = []

    def write_rows(self, table, rows):
        self.calls.append(("rows", table.table, [(r.commit_ts, r.seq) for r in rows]))

    def write_ddl(self, ddl):
        self.calls.append(("ddl", ddl.query))

    def flush(self):
        self.calls.append(("flush",))

    def write_checkpoint(self, ts):
        self.calls.append(("checkpoint", ts))
        return ts


def batch_table(rows):
    names = ["commit_ts", "seq", "schema_name", "table_name", "op", "before", "after"]
    return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)},
                    schema=pa.schema([("commit_ts", pa.int64()), ("seq", pa.int64()),
                                      ("schema_name", pa.string()), ("table_name", pa.string()),
                                      ("op", pa.string()), ("before", pa.list_(pa.string())),
                                      ("after", pa.list_(pa.string()))]))


def test_rows_flush_before_the_ddl_barrier_and_checkpoint_comes_last():
    info = TableInfo("db", "t", 1, (ColumnInfo("id", "int", is_primary_key=True), ColumnInfo("v", "int")),
                     1, ("id",))
    ddl = DDLEvent(30, "db", "t", "ALTER TABLE t ADD c INT", "add column")
    index = FakeIndex([], 30, ddls=[ddl], tables=[info])
    table = batch_table([
        (20, 1, "db", "t", "insert", None, ["2", "0"]),
        (30, 5, "", "", RANGE_MARKER, None, None),
        (10, 0, "db", "t", "insert", None, ["1", "0"]),
        (20, 0, "db", "t", "update", ["1", "0"], ["1", "1"]),
    ])
    sink, checkpoints = RecordingSink(), []
    result = write_batch(table, index, sink, lambda s, t: True, checkpoints.append)
    assert sink.calls == [
        ("rows", "t", [(10, 0), (20, 0), (20, 1)]),
        ("flush",),
        ("ddl", "ALTER TABLE t ADD c INT"),
        ("flush",),
        ("checkpoint", 30),
    ]
    assert checkpoints == [30]
    assert (result.start, result.end, result.rows, result.ddls) == (5, 30, 3, 1)


def test_filtered_ddl_is_not_written_but_checkpoint_advances():
    ddl = DDLEvent(30, "other", "t", "CREATE TABLE t (id INT)", "create table")
    index = FakeIndex([], 30, ddls=[ddl])
    sink, checkpoints = RecordingSink(), []
    write_batch(batch_table([(30, 5, "", "", RANGE_MARKER, None, None)]), index, sink,
                lambda s, t: s == "db", checkpoints.append)
    assert ("ddl", "CREATE TABLE t (id INT)") not in sink.calls
    assert checkpoints == [30]


class HoldingSink(RecordingSink):
    """A sink that holds rows across batches (the storage sink's flush-interval): it writes its
    checkpoint only when the batch writer flushed it."""

    holds_rows = True
    flushed = False

    def flush(self):
        super().flush()
        self.flushed = True

    def write_checkpoint(self, ts):
        covered, self.flushed = (ts if self.flushed else 0), False
        self.calls.append(("checkpoint", covered))
        return covered


def test_a_sink_holding_rows_is_flushed_only_for_ddl_and_the_target_and_its_checkpoint_waits():
    info = TableInfo("db", "t", 1, (ColumnInfo("id", "int", is_primary_key=True), ColumnInfo("v", "int")),
                     1, ("id",))
    ddl = DDLEvent(60, "db", "t", "ALTER TABLE t ADD c INT", "add column")
    index = FakeIndex([], 90, ddls=[ddl], tables=[info])
    sink, checkpoints = HoldingSink(), []
    rows = batch_table([(20, 0, "db", "t", "insert", None, ["1", "0"]), (30, 5, "", "", RANGE_MARKER, None, None)])
    write_batch(rows, index, sink, lambda s, t: True, checkpoints.append, target_ts=90)
    assert sink.calls == [("rows", "t", [(20, 0)]), ("checkpoint", 0)] and checkpoints == []
    write_batch(batch_table([(60, 30, "", "", RANGE_MARKER, None, None)]), index, sink, lambda s, t: True,
                checkpoints.append, target_ts=90)
    assert sink.calls[2:] == [("flush",), ("ddl", "ALTER TABLE t ADD c INT"), ("flush",), ("checkpoint", 60)]
    assert checkpoints == [60]
    sink.calls.clear()
    write_batch(batch_table([(70, 0, "db", "t", "insert", None, ["2", "0"]), (80, 60, "", "", RANGE_MARKER, None, None)]),
                index, sink, lambda s, t: True, checkpoints.append, target_ts=90)
    assert sink.calls[-1] == ("checkpoint", 0) and checkpoints == [60]
    write_batch(batch_table([(90, 80, "", "", RANGE_MARKER, None, None)]), index, sink, lambda s, t: True,
                checkpoints.append, target_ts=90)
    assert sink.calls[-2:] == [("flush",), ("checkpoint", 90)] and checkpoints == [60, 90]


# BatchPacer and plan_next_batch's backlog flag: a backlog runs batch after batch, a caught-up
# changefeed runs one batch per trigger interval, an idle one moves its checkpoint once a second.

class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_backlog_flag_says_whether_more_is_resolved_beyond_the_batch():
    index = FakeIndex([txn(10, 600), txn(20, 600), txn(30, 600)], resolved=40)
    # Cut by size after the second transaction: the third waits.
    assert plan_next_batch(index, BatchOffset(0), 0, 1000) == (BatchOffset(20), True)
    # Everything resolved fits: caught up.
    assert plan_next_batch(index, BatchOffset(0), 0, 10_000) == (BatchOffset(40), False)
    # The size cut on the last resolved transaction leaves nothing behind it.
    assert plan_next_batch(FakeIndex([txn(10, 600), txn(20, 600)], 20), BatchOffset(0), 0, 1000) == (BatchOffset(20), False)
    # Nothing new.
    assert plan_next_batch(index, BatchOffset(40), 0, 1000) == (BatchOffset(40), False)
    # The target-ts is the end of what there is to do.
    assert plan_next_batch(index, BatchOffset(0), 25, 10_000) == (BatchOffset(25), False)


def test_a_ddl_barrier_with_more_resolved_after_it_is_a_backlog():
    index = FakeIndex([txn(10), txn(20, ddl=True), txn(30)], resolved=40)
    assert plan_next_batch(index, BatchOffset(0), 0, 10_000) == (BatchOffset(20), True)
    assert plan_next_batch(index, BatchOffset(20), 0, 10_000) == (BatchOffset(40), False)
    assert plan_next_batch(FakeIndex([txn(10), txn(20, ddl=True)], 20), BatchOffset(0), 0, 10_000) == (BatchOffset(20), False)


def test_a_backlog_runs_at_once_and_a_caught_up_batch_waits_for_the_interval():
    clock, index = Clock(), FakeIndex([txn(10), txn(20)], resolved=30)
    pacer = BatchPacer(1.0, clock)
    assert pacer.ready(index, BatchOffset(0), BatchOffset(10), backlog=False)  # the first batch: at once
    pacer.ran()
    clock.now += 0.1
    assert pacer.ready(index, BatchOffset(10), BatchOffset(20), backlog=True)
    assert not pacer.ready(index, BatchOffset(10), BatchOffset(20), backlog=False)
    clock.now += 0.9
    assert pacer.ready(index, BatchOffset(10), BatchOffset(20), backlog=False)


def test_an_idle_batch_runs_at_most_every_idle_batch_seconds_however_short_the_trigger():
    clock, index = Clock(), FakeIndex([txn(10)], resolved=30)
    pacer = BatchPacer(0.25, clock)
    pacer.ran()
    clock.now += 0.25
    assert pacer.ready(index, BatchOffset(5), BatchOffset(30), backlog=False)  # holds a transaction
    assert not pacer.ready(index, BatchOffset(10), BatchOffset(30), backlog=False)  # resolved-ts only
    clock.now += IDLE_BATCH_SECONDS - 0.25
    assert pacer.ready(index, BatchOffset(10), BatchOffset(30), backlog=False)
    # A longer trigger interval still holds idle batches for the whole interval.
    slow = BatchPacer(5.0, clock)
    slow.ran()
    clock.now += 2
    assert not slow.ready(index, BatchOffset(10), BatchOffset(30), backlog=False)


def test_pieces_the_target_and_nothing_new():
    clock, index = Clock(), FakeIndex([], resolved=30)
    pacer = BatchPacer(1.0, clock)
    pacer.ran()
    assert pacer.ready(index, BatchOffset(10), BatchOffset(20, piece=2), backlog=False)
    assert pacer.ready(index, BatchOffset(20, piece=2), BatchOffset(30), backlog=False)
    assert pacer.ready(index, BatchOffset(10), BatchOffset(30), backlog=False, target_ts=30)
    assert not pacer.ready(index, BatchOffset(10), BatchOffset(30), backlog=False, target_ts=40)
    clock.now += 60
    assert not pacer.ready(index, BatchOffset(30), BatchOffset(30), backlog=True)


def test_a_batch_runs_at_once_while_snapshot_chunks_wait_for_it(tmp_path):
    """The snapshot stage's signal beside the cap file: read chunks wait for the stream to pass
    their positions, so no batch is held for the interval, until the signal is lifted."""
    clock, index = Clock(), FakeIndex([txn(10), txn(20)], resolved=30)
    cap_file = str(tmp_path / "snapshot-cap")
    options = SourceOptions(index_path="", upstream_uri="mysql://u@h:1/", start_ts=0, cap_file=cap_file)
    pacer = BatchPacer(1.0, clock)
    pacer.ran()
    clock.now += 0.1
    assert pacer.plan(index, BatchOffset(10), options) == BatchOffset(10)  # held for the interval
    set_chunks_waiting(cap_file, True)
    assert chunks_waiting(cap_file)
    assert pacer.plan(index, BatchOffset(10), options) == BatchOffset(30)
    assert pacer.plan(index, BatchOffset(30), options) == BatchOffset(30)  # nothing new: nothing to run
    set_chunks_waiting(cap_file, False)
    set_chunks_waiting(cap_file, False)  # lifting it twice is harmless
    assert not chunks_waiting(cap_file) and not chunks_waiting("")
    index.resolved = 40
    assert pacer.plan(index, BatchOffset(30), options) == BatchOffset(30)  # the interval again


def test_planning_reads_the_index_a_page_at_a_time(monkeypatch):
    """A backlog of many transactions is read page by page, only as far as the batch goes."""
    txns = [txn(ts, 100) for ts in range(1, 101)]

    class CountingIndex(FakeIndex):
        read = 0

        def txn_sizes_between(self, lo, hi, limit=None):
            page = super().txn_sizes_between(lo, hi, limit)
            self.read += len(page)
            return page

    whole = plan_next_batch(FakeIndex(txns, resolved=100), BatchOffset(0), 0, 1050)
    monkeypatch.setattr(planning, "_PLAN_PAGE", 4)
    index = CountingIndex(txns, resolved=100)
    assert plan_next_batch(index, BatchOffset(0), 0, 1050) == whole == (BatchOffset(11), True)
    assert index.read == 12  # three pages of 4, not all 100 transactions
    assert plan_next_batch(index, BatchOffset(0), 0, 100_000) == (BatchOffset(100), False)


def test_a_catching_up_changefeed_plans_larger_batches_until_it_is_caught_up():
    clock = Clock()
    index = FakeIndex([txn(ts, 600) for ts in range(10, 210, 10)], resolved=200)  # 20 x 600 bytes
    options = SourceOptions(index_path="x", upstream_uri="mysql://u@h:3306/", start_ts=0, max_batch_bytes=1000)
    pacer = BatchPacer(1.0, clock)
    # The first batch after a start is max-batch-bytes: two transactions (cut by size).
    assert pacer.plan(index, BatchOffset(0), options) == BatchOffset(20) and pacer.catching_up
    # Then, catching up, CATCH_UP_BATCH_FACTOR times that: 4000 bytes hold seven transactions.
    assert CATCH_UP_BATCH_FACTOR == 4
    assert pacer.plan(index, BatchOffset(20), options) == BatchOffset(90) and pacer.catching_up
    assert pacer.plan(index, BatchOffset(90), options) == BatchOffset(160) and pacer.catching_up
    # The rest fits: caught up, and the backlog's tail runs at once (its rows were waiting);
    # the next batch is back to max-batch-bytes and to the trigger interval.
    assert pacer.plan(index, BatchOffset(160), options) == BatchOffset(200) and not pacer.catching_up
    index.txns.append(txn(210, 600))
    index.resolved = 210
    clock.now += 0.5
    assert pacer.plan(index, BatchOffset(200), options) == BatchOffset(200)  # within the interval
    clock.now += 0.5
    assert pacer.plan(index, BatchOffset(200), options) == BatchOffset(210)
    index.txns += [txn(ts, 600) for ts in range(220, 270, 10)]
    index.resolved = 260
    clock.now += 1
    assert pacer.plan(index, BatchOffset(210), options) == BatchOffset(230)


def test_a_batch_the_pacer_holds_back_is_not_planned():
    clock, index = Clock(), FakeIndex([txn(10), txn(20)], resolved=30)
    options = SourceOptions(index_path="x", upstream_uri="mysql://u@h:3306/", start_ts=0)
    pacer = BatchPacer(1.0, clock)
    assert pacer.plan(index, BatchOffset(0), options) == BatchOffset(30)
    index.txns.append(txn(40))
    index.resolved = 40
    clock.now += 0.5
    assert pacer.plan(index, BatchOffset(30), options) == BatchOffset(30)  # within the interval
    clock.now += 0.5
    assert pacer.plan(index, BatchOffset(30), options) == BatchOffset(40)


def test_a_run_that_starts_with_the_rows_of_a_create_table_select_is_read_from_inside_its_group():
    """CREATE TABLE ... SELECT's rows follow its DDL in the DDL's GTID group: a range starting
    with them has no GTID event before its first transaction (BinlogRange.first_txn)."""
    ddl, rows, after = txn(1, 50, ddl=True), txn(2, 300, pos=1050), txn(3, 100, pos=1350)
    rows = TxnRecord(rows.commit_ts, "0-1-7", rows.start, rows.end, rows.size, False, continues_group=True)
    index = FakeIndex([ddl, rows, after], resolved=3)
    spans = planning.batch_spans(index, BatchOffset(1), BatchOffset(3), parts=1)
    assert [(s.commit_ts, s.continues_group) for s in spans] == [((2, 3), True)]
    spans = planning.batch_spans(index, BatchOffset(2), BatchOffset(3), parts=1)
    assert [(s.commit_ts, s.continues_group) for s in spans] == [((3,), False)]
