"""BatchPacer and plan_next_batch's backlog flag: a backlog runs batch after batch, a caught-up
changefeed runs one batch per trigger interval, an idle one moves its checkpoint once a second."""

from __future__ import annotations

from sparkcdc.model.position import BinlogPosition
from sparkcdc.pipeline import source
from sparkcdc.pipeline.source import IDLE_BATCH_SECONDS, BatchOffset, BatchPacer, plan_next_batch
from sparkcdc.upstream.txn_index import TxnRecord

FILE = "mysql-bin.000001"


def txn(ts: int, size: int = 100, ddl: bool = False) -> TxnRecord:
    return TxnRecord(ts, None, BinlogPosition(FILE, ts * 1000), BinlogPosition(FILE, ts * 1000 + size), size, ddl)


class FakeIndex:
    def __init__(self, txns, resolved):
        self.txns, self.resolved = list(txns), resolved

    def resolved_ts(self):
        return self.resolved

    def txns_between(self, lo, hi, limit=None):
        return [t for t in self.txns if lo < t.commit_ts <= hi][:limit]

    def next_ddl_after(self, ts):
        return min((t.commit_ts for t in self.txns if t.is_ddl and t.commit_ts > ts), default=None)


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


def test_an_idle_batch_runs_once_a_second_whatever_the_trigger():
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


def test_planning_reads_the_index_a_page_at_a_time(monkeypatch):
    """A backlog of many transactions is read page by page, only as far as the batch goes."""
    txns = [txn(ts, 100) for ts in range(1, 101)]

    class CountingIndex(FakeIndex):
        read = 0

        def txns_between(self, lo, hi, limit=None):
            page = super().txns_between(lo, hi, limit)
            self.read += len(page)
            return page

    whole = plan_next_batch(FakeIndex(txns, resolved=100), BatchOffset(0), 0, 1050)
    monkeypatch.setattr(source, "_PLAN_PAGE", 4)
    index = CountingIndex(txns, resolved=100)
    assert plan_next_batch(index, BatchOffset(0), 0, 1050) == whole == (BatchOffset(11), True)
    assert index.read == 12  # three pages of 4, not all 100 transactions
    assert plan_next_batch(index, BatchOffset(0), 0, 100_000) == (BatchOffset(100), False)
