"""Planning micro-batches that end inside a large transaction (its pieces), with an in-memory index."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.model.position import BinlogPosition
from sparkcdc.pipeline.planning import (
    DEFAULT_MAX_BATCH_BYTES,
    BatchOffset,
    BatchPacer,
    MarkerPartition,
    RangePartition,
    SourceOptions,
    batch_marker,
    plan_next_batch,
    plan_partitions,
)
from sparkcdc.sink.registry import parse_sink_spec
from sparkcdc.upstream.txn_index import DEFAULT_PIECE_BYTES, PieceStart, TxnRecord, TxnSize

FILE = "mysql-bin.000001"


def txn(ts: int, start: int, size: int, cuts: tuple[int, ...] = (), ddl: bool = False) -> TxnRecord:
    """A transaction at binlog [start, start + size) cut at the offsets `cuts` (its pieces 1..)."""
    pieces = tuple(PieceStart(start + cut, (start + 10,)) for cut in cuts)
    return TxnRecord(ts, None, BinlogPosition(FILE, start), BinlogPosition(FILE, start + size), size, ddl, pieces)


class FakeIndex:
    def __init__(self, txns, resolved):
        self.txns, self.resolved = list(txns), resolved

    def resolved_ts(self):
        return self.resolved

    def txns_between(self, lo, hi, limit=None):
        return [t for t in self.txns if lo < t.commit_ts <= hi][:limit]

    def txn_sizes_between(self, lo, hi, limit=None):
        return [TxnSize(t.commit_ts, t.size, bool(t.pieces), t.is_ddl, t.skip_replication, t.epoch, t.breaks)
                for t in self.txns_between(lo, hi, limit)]

    def next_ddl_after(self, ts):
        return min((t.commit_ts for t in self.txns if t.is_ddl and t.commit_ts > ts), default=None)

    def tables_at(self, ts):
        return []

    def source(self, epoch):
        return None


def options(**overrides) -> SourceOptions:
    return SourceOptions(index_path="x", upstream_uri="mysql://u@h:3306/", start_ts=0, parallelism=2, **overrides)


def test_the_puller_cuts_pieces_the_size_of_a_batch():
    assert DEFAULT_PIECE_BYTES == DEFAULT_MAX_BATCH_BYTES


def test_offsets_order_pieces_between_the_transactions_and_old_checkpoints_parse():
    assert BatchOffset.of({"ts": 7}) == BatchOffset(7) and BatchOffset(7).to_json() == {"ts": 7}
    assert BatchOffset.of({"ts": 7, "piece": 2}).to_json() == {"ts": 7, "piece": 2}
    order = [BatchOffset(6), BatchOffset(7, 1), BatchOffset(7, 2), BatchOffset(7), BatchOffset(8, 1)]
    assert sorted(order, key=BatchOffset.key) == order
    assert [o.checkpoint_ts for o in order] == [6, 6, 6, 7, 7]


def test_a_large_transaction_is_planned_piece_by_piece_with_checkpoint_bounds_below_it():
    index = FakeIndex([txn(10, 1000, 50), txn(20, 2000, 400, cuts=(100, 200, 300)), txn(30, 3000, 50)], resolved=40)
    ends, start = [], BatchOffset(5)
    while (end := plan_next_batch(index, start, 0, 120)[0]).key() > start.key():
        ends.append(end)
        start = end
    # Pieces of 20 that do not fit go to the next batch; 30 rides with the last piece.
    assert ends == [BatchOffset(19), BatchOffset(20, 1), BatchOffset(20, 2), BatchOffset(20, 3), BatchOffset(30),
                    BatchOffset(40)]
    marker, first = batch_marker(plan_partitions(index, options(), BatchOffset(5), BatchOffset(20, 2), set()))
    assert marker == MarkerPartition(5, 19)
    ranges = [p.binlog_range for p in first]
    assert [(r.commit_ts, r.piece, r.start.pos, r.end.pos) for r in ranges] == [
        ((10,), 0, 1000, 1050), ((20,), 0, 2000, 2100), ((20,), 1, 2100, 2200)]
    middle = plan_partitions(index, options(), BatchOffset(20, 1), BatchOffset(20, 2), set())
    assert len(middle) == 1 and middle[0].marker == MarkerPartition(19, 19)  # one piece: one read task
    (piece,) = [p.binlog_range for p in batch_marker(middle)[1]]
    assert (piece.piece, piece.start.pos, piece.end.pos, piece.table_maps) == (
        1, 2100, 2200, (BinlogPosition(FILE, 2010),))
    assert piece.first_seq() == 1 << 32
    last = plan_partitions(index, options(), BatchOffset(20, 3), BatchOffset(30), set())
    assert batch_marker(last)[0] == MarkerPartition(19, 30)


def test_without_splitting_a_large_transaction_is_one_batch():
    index = FakeIndex([txn(10, 1000, 50), txn(20, 2000, 400, cuts=(100, 200, 300))], resolved=40)
    assert plan_next_batch(index, BatchOffset(5), 0, 120, split_transactions=False)[0] == BatchOffset(20)
    assert plan_next_batch(index, BatchOffset(10), 0, 120, split_transactions=False)[0] == BatchOffset(20)
    # A start inside a transaction (planned before splitting was turned off) never re-reads its pieces.
    assert plan_next_batch(index, BatchOffset(20, 2), 0, 120, split_transactions=False)[0] == BatchOffset(20, 3)


@st.composite
def workloads(draw):
    txns, position = [], 1000
    for number in range(draw(st.integers(1, 8))):
        size = draw(st.integers(10, 600))
        cuts = sorted(draw(st.sets(st.integers(1, size - 1), max_size=6))) if size > 1 else []
        txns.append(txn(10 * (number + 1), position, size, tuple(cuts), ddl=draw(st.booleans()) and not cuts))
        position += size
    return txns


@settings(max_examples=150, deadline=None)
@given(workloads(), st.integers(1, 700), st.booleans())
def test_batches_cover_every_piece_once_in_order_and_checkpoints_never_pass_an_unfinished_transaction(
        txns, cap, split):
    index = FakeIndex(txns, resolved=txns[-1].commit_ts + 5)
    start, covered, checkpoints = BatchOffset(0), [], []
    while (end := plan_next_batch(index, start, 0, cap, split)[0]).key() > start.key():
        marker, partitions = batch_marker(plan_partitions(index, options(max_batch_bytes=cap), start, end, set()))
        assert (marker.start, marker.end) == (start.checkpoint_ts, end.checkpoint_ts)
        for partition in partitions:
            assert isinstance(partition, RangePartition)
            covered.append((partition.binlog_range.start.pos, partition.binlog_range.end.pos))
        checkpoints.append(end.checkpoint_ts)
        if end.piece:  # a batch that ends inside a transaction holds none of a later one
            assert all(p.binlog_range.start.pos < index.txns_between(end.ts - 1, end.ts)[0].end.pos
                       for p in partitions)
        start = end
    assert start == BatchOffset(index.resolved)
    assert checkpoints == sorted(checkpoints)
    # The ranges tile the binlog without gap or overlap, DDL transactions (no rows) aside.
    dml = sorted(covered)
    expected = [(t.start.pos, t.end.pos) for t in txns if not t.is_ddl]
    assert [dml[0][0], dml[-1][1]] == [expected[0][0], expected[-1][1]] if expected else dml == []
    assert all(a[1] <= b[0] for a, b in zip(dml, dml[1:]))
    assert sum(e - s for s, e in dml) == sum(e - s for s, e in expected)


@settings(max_examples=150, deadline=None)
@given(workloads(), st.integers(1, 700), st.booleans())
def test_partitions_planned_from_the_pacers_rows_are_those_read_from_the_index(txns, cap, split):
    # The pacer keeps the TxnSize rows it planned a batch with, so the batch's partitions need not
    # read them again; they must be exactly the batch's rows, whatever the cut (a piece, the
    # transaction before a piece, a DDL, a size cut while catching up).
    index = FakeIndex(txns, resolved=txns[-1].commit_ts + 5)
    opts = options(max_batch_bytes=cap, split_transactions=split)
    pacer, start, reads = BatchPacer(0.0), BatchOffset(0), []
    while (end := pacer.plan(index, start, opts)).key() > start.key():
        sizes = pacer.sizes_of(start, end)
        assert sizes == index.txn_sizes_between(start.checkpoint_ts, end.ts)
        assert plan_partitions(index, opts, start, end, set(), sizes) == plan_partitions(index, opts, start, end, set())
        reads.append(sizes)
        start = end
    assert pacer.sizes_of(BatchOffset(0), BatchOffset(1)) is None  # any other batch reads the index
    assert len(reads) >= 1


def splits_large_transactions(sink_uri: str, config: ReplicaConfig) -> bool:
    return parse_sink_spec(sink_uri, config).splits_large_transactions


def test_sinks_that_need_whole_transactions_do_not_get_them_split():
    config = ReplicaConfig()
    assert splits_large_transactions("file:///tmp/out?protocol=canal-json", config)
    assert splits_large_transactions("kafka://127.0.0.1:9092/t?protocol=canal-json", config)
    assert splits_large_transactions("mysql://root@127.0.0.1:3306/", config)
    assert not splits_large_transactions("mysql://root@127.0.0.1:3306/?transaction-atomicity=table", config)
    config.consistent.level = "eventual"
    assert not splits_large_transactions("mysql://root@127.0.0.1:3306/", config)
    config = ReplicaConfig()
    config.enable_sync_point = True
    assert not splits_large_transactions("mysql://root@127.0.0.1:3306/", config)


def test_storage_readers_keep_a_transaction_that_goes_on_in_the_next_file_and_drop_replays():
    from sparkcdc.consumer.storage_reader import new_rows_filter

    def kept(keep, stamps):
        return [ts for ts in stamps if keep(ts)]

    # The newest transaction of the files before was 20: a file that starts with it continues it.
    assert kept(new_rows_filter(20, 40), [20, 20, 30]) == [20, 20, 30]
    # A replay (it starts before 20) keeps only what is new; nothing past the checkpoint.
    assert kept(new_rows_filter(20, 40), [10, 20, 30, 50]) == [30]
    # Rows of an earlier round are never applied again, continuation or not.
    assert kept(new_rows_filter(20, 40, applied_before=20), [20, 30]) == [30]


def test_the_puller_cuts_at_rows_events_with_the_table_maps_of_their_statement():
    from sparkcdc.upstream.puller import _OpenTxn

    open_txn = _OpenTxn("0-1-1", BinlogPosition(FILE, 100))
    at = lambda pos: BinlogPosition(FILE, pos)  # noqa: E731
    open_txn.see_table_map(7, 150)
    open_txn.see_table_map(8, 180)
    open_txn.see_rows(7, 0, at(200), piece_bytes=1000)  # too early for a cut
    open_txn.see_rows(8, 0, at(1100), piece_bytes=1000)  # 1000 bytes in: cut, both maps needed
    open_txn.see_rows(7, 1, at(1500), piece_bytes=1000)  # statement end: its maps no longer apply
    open_txn.see_rows(7, 0, at(2200), piece_bytes=1000)  # a ROWS event without its TABLE_MAP: no cut
    open_txn.see_table_map(9, 2300)
    open_txn.see_rows(9, 0, at(2400), piece_bytes=1000)
    assert open_txn.pieces == [PieceStart(1100, (150, 180)), PieceStart(2400, (2300,))]


def test_pieces_keep_their_own_budget_in_a_larger_batch():
    """A catching-up batch may span more than max-batch-bytes, but a large transaction's pieces
    are planned within piece_batch_bytes: their memory bound."""
    index = FakeIndex([txn(10, 0, 100), txn(20, 100, 500, cuts=(100, 200, 300, 400))], resolved=20)
    # Up to 1000 bytes of whole transactions, pieces within 250: the first transaction and one
    # piece, then two pieces per batch.
    assert plan_next_batch(index, BatchOffset(5), 0, 1000, piece_batch_bytes=250) == (BatchOffset(20, 1), True)
    assert plan_next_batch(index, BatchOffset(20, 1), 0, 1000, piece_batch_bytes=250) == (BatchOffset(20, 3), True)
    assert plan_next_batch(index, BatchOffset(20, 3), 0, 1000, piece_batch_bytes=250) == (BatchOffset(20), False)
    # Without the piece budget all of it is one batch.
    assert plan_next_batch(index, BatchOffset(5), 0, 1000) == (BatchOffset(20), False)


def test_after_a_failover_ranges_never_mix_servers_and_each_reads_from_its_own():
    """Transactions of epoch 0 were indexed from server a, the rest (re-mapped or new) are in
    server b's binlog; txn 50 follows 40 in commit order but not in b's binlog (`breaks`)."""
    from dataclasses import replace

    from sparkcdc.upstream.txn_index import Source

    on_a = [txn(10, 1000, 50), txn(20, 1050, 50)]
    on_b = [replace(txn(30, 500, 50), epoch=1, breaks=True), replace(txn(40, 550, 50), epoch=1),
            replace(txn(50, 700, 50), epoch=1, breaks=True), replace(txn(60, 750, 50), epoch=1)]

    class TwoServers(FakeIndex):
        def source(self, epoch):
            return Source(epoch, "a" if epoch == 0 else "b", 3306 + epoch, 1 + epoch, None, "mariadb", 0)

    index = TwoServers(on_a + on_b, resolved=70)
    partitions = plan_partitions(index, replace(options(), parallelism=1), BatchOffset(5), BatchOffset(60), set())
    ranges = [(p.binlog_range.upstream.address, p.binlog_range.commit_ts) for p in partitions]
    assert ranges == [("a:3306", (10, 20)), ("b:3307", (30, 40)), ("b:3307", (50, 60))]
    assert all(p.binlog_range.upstream.user == "u" for p in partitions)
