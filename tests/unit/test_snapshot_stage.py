"""Where the snapshot puts a chunk into the stream (pipeline/snapshot.py), on a real transaction
index in a temp dir and a store in memory: at the free commit-ts right after the last transaction
its read saw, or at the start of a batch beyond it; never before the index has read that far; a
chunk read with another table version than its position's goes back to be read again; a table
without a key has its changes dropped until its chunk is in; done chunks survive in the store."""

from dataclasses import replace

import pyarrow as pa
import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.model import tso
from sparkcdc.model.change_batch import CHANGE_SCHEMA, marker_batch
from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.model.snapshot import ChunkKey, ChunkState, SnapshotState, TableSnapshot
from sparkcdc.pipeline.batch_sink import tables_of
from sparkcdc.pipeline.snapshot import PendingChunk, SnapshotStage, _Wave
from sparkcdc.upstream.snapshot_reader import _marker, rows_batch
from sparkcdc.upstream.txn_index import TableVersion, TxnIndex, TxnRecord

FILE = "mysql-bin.000001"


class MemoryStore:
    def __init__(self):
        self.snapshot, self.requests = None, []

    def get_snapshot(self, namespace, changefeed_id):
        return self.snapshot

    def put_snapshot(self, namespace, changefeed_id, document):
        self.snapshot = document

    def snapshot_requests(self, namespace, changefeed_id):
        return self.requests


def info(name, version, keyed=True):
    columns = (ColumnInfo("id", "int", nullable=False, is_primary_key=keyed), ColumnInfo("v", "varchar"))
    return TableInfo("db", name, 1, columns, version, ("id",) if keyed else ())


def txn(ts, start, end):
    return TxnRecord(ts, None, BinlogPosition(FILE, start), BinlogPosition(FILE, end), end - start, False)


@pytest.fixture
def index(tmp_path):
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    index.bootstrap(BinlogPosition(FILE, 4), 100, [info("t", 100), info("nokey", 100, keyed=False)])
    # Transactions at 200 (ends at 300), 202 (ends at 400), and a resolved-ts of 300, read to 400.
    index.append([txn(200, 4, 300), txn(202, 300, 400)], [], [], 300, position=BinlogPosition(FILE, 400))
    return index


def stage(index, store=None, tables=None):
    config = parse_replica_config('force-replicate = true\n[snapshot]\nmode = "initial"\n')
    store = store or MemoryStore()
    state = SnapshotState(tables or [TableSnapshot("db", "t", ChunkKey("PRIMARY", ("id",)), [ChunkState(0, None, None)])],
                          True, 100)
    store.snapshot = state.to_json()
    return SnapshotStage("default", "cf", config, "mysql://root@127.0.0.1:1/", index, store, lambda reads: None, 2)


def rows(n, table="t"):
    return pa.table({"commit_ts": [0] * n, "seq": list(range(n)), "schema_name": ["db"] * n,
                     "table_name": [table] * n, "op": ["insert"] * n, "before": pa.nulls(n, CHANGE_SCHEMA.field("before").type),
                     "after": [[str(i), "x"] for i in range(n)]}, schema=CHANGE_SCHEMA)


def pend(snapshot, position, version=100, n=3, table=0):
    table_state = snapshot.state.tables[table]
    chunk = PendingChunk(table_state, table_state.chunks[0], BinlogPosition(FILE, position), version,
                         rows(n, table_state.table))
    snapshot._pending.append(chunk)
    return chunk


def test_free_slot_after_every_commit_ts():
    assert tso.next_after(10, 0) == 12 and tso.free_slot_after(10) == 11
    later = tso.compose(5_000)
    assert tso.next_after(later - 1, 5) == later + 1  # the candidate would leave no free slot
    assert tso.next_after(10, 5) == later


def test_chunk_goes_right_after_the_last_transaction_its_read_saw(index):
    snapshot = stage(index)
    pend(snapshot, 300)  # consistent with everything up to the end of the transaction at 200
    assert snapshot.placements(100, 150) == []  # its place is after 200
    [placement] = snapshot.placements(100, 300)
    assert placement.commit_ts == 201  # after 200, before 202
    merged = snapshot.merge(pa.concat_tables([pa.Table.from_batches([marker_batch(100, 300)]), rows(0)]), [placement])
    _, [table] = tables_of(merged)
    assert table.rows["commit_ts"].to_pylist() == [201] * 3


def test_chunks_after_the_same_transaction_stay_in_commit_order(index):
    """Two chunks placed in the same free slot get seq that go on from one to the other, so the
    batch writer finds the batch in (commit_ts, seq) order and copies nothing to sort it."""
    snapshot = stage(index)
    pend(snapshot, 300, n=3)
    pend(snapshot, 300, n=2)
    placements = snapshot.placements(100, 300)
    assert [p.commit_ts for p in placements] == [201, 201]
    merged = snapshot.merge(pa.Table.from_batches([marker_batch(100, 300)]), placements)
    assert merged["seq"].to_pylist()[1:] == [0, 1, 2, 3, 4]
    _, [table] = tables_of(merged)
    assert table.rows["after"].to_pylist() == [["0", "x"], ["1", "x"], ["2", "x"], ["0", "x"], ["1", "x"]]


def test_a_chunk_goes_among_the_streams_rows_of_its_table_in_commit_order(index):
    """The writes to a table during its copy and its chunk's rows in one batch: merged in
    commit-ts order, so the batch writer takes them in that order as they are (tables_of copies
    and sorts a batch out of order)."""
    snapshot = stage(index)
    pend(snapshot, 300)
    placements = snapshot.placements(100, 300)
    stream = pa.concat_tables([pa.Table.from_batches([marker_batch(100, 300)]),
                               rows(2).set_column(0, "commit_ts", pa.array([200, 202], pa.int64()))])
    merged = snapshot.merge(stream, placements)
    assert merged["commit_ts"].to_pylist() == [300, 200, 201, 201, 201, 202]  # the range marker first
    sorted_rows, [table] = tables_of(merged)
    assert sorted_rows["after"].to_pylist() == merged["after"].to_pylist()
    assert table.rows["commit_ts"].to_pylist() == [200, 201, 201, 201, 202]


def test_a_chunk_goes_last_when_the_stream_is_out_of_commit_order_and_the_writer_sorts(index):
    snapshot = stage(index)
    pend(snapshot, 300)
    placements = snapshot.placements(100, 300)
    stream = pa.concat_tables([rows(2).set_column(0, "commit_ts", pa.array([202, 200], pa.int64())),
                               pa.Table.from_batches([marker_batch(100, 300)])])
    merged = snapshot.merge(stream, placements)
    assert merged["commit_ts"].to_pylist() == [202, 200, 300, 201, 201, 201]
    _, [table] = tables_of(merged)
    assert table.rows["commit_ts"].to_pylist() == [200, 201, 201, 201, 202]


def test_chunk_older_than_the_batch_goes_at_its_start(index):
    snapshot = stage(index)
    pend(snapshot, 400)  # the upstream was idle since 202; the stream is already past it
    [placement] = snapshot.placements(300, 500)
    assert placement.commit_ts == 301


def test_chunk_waits_until_the_index_has_read_its_position(index):
    snapshot = stage(index)
    pend(snapshot, 450)
    assert snapshot.placements(100, 10_000) == []
    index.append([], [], [], 310, position=BinlogPosition(FILE, 460))
    assert [p.commit_ts for p in snapshot.placements(300, 10_000)] == [301]


def test_chunk_of_another_table_version_is_read_again(index):
    snapshot = stage(index)
    index.append([txn(204, 400, 500)], [], [TableVersion("db", "t", 204, info("t", 204))], 320,
                 position=BinlogPosition(FILE, 500))
    stale = pend(snapshot, 500, version=100)  # read with the version before the DDL at 204
    assert snapshot.placements(300, 10_000) == []
    assert stale not in snapshot._pending
    pend(snapshot, 500, version=204)
    assert [p.commit_ts for p in snapshot.placements(300, 10_000)] == [301]


def test_a_batch_cannot_slip_between_a_wave_read_and_its_chunks_pending(index):
    """wait_for_reads lets a batch through once the wave no longer reads; by then its chunks must
    be pending, or a batch holding their positions would be written without them."""
    snapshot = stage(index)
    table = snapshot.state.tables[0]
    wave = _Wave(300, 0)
    wave.chunks.append((table, table.chunks[0], None))
    snapshot._reading = wave
    snapshot._read_wave = lambda reads: pa.Table.from_batches([
        _marker(0, info("t", 100), str(BinlogPosition(FILE, 400)), ""),
        rows_batch(0, info("t", 100), 0, [["1", "2"], ["x", "y"]])])
    reading_while_sliced = []
    slice_chunks = snapshot._pending_chunks
    snapshot._pending_chunks = lambda wave, rows: (reading_while_sliced.append(snapshot._reading is wave),
                                                   slice_chunks(wave, rows))[1]
    snapshot._read(wave)
    assert reading_while_sliced == [True]
    assert snapshot._reading is None and [p.position.pos for p in snapshot._pending] == [400]
    assert [p.commit_ts for p in snapshot.placements(300, 10_000)] == [301]


def test_done_chunks_are_stored_and_tables_finish(index):
    store = MemoryStore()
    snapshot = stage(index, store)
    pend(snapshot, 300, n=5)
    assert snapshot.copying_tables() == frozenset({("db", "t")})
    assert snapshot.placed(snapshot.placements(100, 300)) is True
    stored = SnapshotState.from_json(store.snapshot)
    assert stored.finished and stored.tables[0].done_rows == 5 and stored.tables[0].done_chunks == 1
    assert snapshot.copying_tables() == frozenset()
    progress = stored.progress(1000)
    assert progress["state"] == "done" and progress["tables"][0]["chunks_total"] == 1


def test_changes_of_a_table_without_key_are_dropped_until_its_chunk_is_in(index):
    keyless = TableSnapshot("db", "nokey", None, [ChunkState(0, None, None)])
    snapshot = stage(index, tables=[keyless])
    stream = pa.concat_tables([pa.Table.from_batches([marker_batch(100, 300)]),
                               rows(2, "nokey").set_column(0, "commit_ts", pa.array([200, 202], pa.int64()))])
    assert snapshot.merge(stream, [])["op"].to_pylist() == ["range"]  # both changes dropped: no chunk yet
    pend(snapshot, 300, table=0)
    placements = snapshot.placements(100, 300)
    merged = snapshot.merge(stream, placements)
    # The change at 200 is in the chunk's rows; the one at 202 follows them.
    assert sorted(merged["commit_ts"].to_pylist()) == [201, 201, 201, 202, 300]
    snapshot.placed(placements)
    assert snapshot.dropped_before() == {("db", "nokey"): 200}  # a replay drops what the chunk holds


def fail_over(index):
    """The index switches to a promoted replica (epoch 1): transactions 200 and 202 re-mapped onto
    its binlog, whose file has the same name and other offsets."""
    from sparkcdc.upstream.txn_index import Remapped

    index.record_source("127.0.0.1", 1, 1, None, "mariadb", new_epoch=False)
    new = index.record_source("127.0.0.1", 2, 2, None, "mariadb", new_epoch=True)
    index.remap(new.epoch, [Remapped(200, BinlogPosition(FILE, 1000), BinlogPosition(FILE, 1300), (), True),
                            Remapped(202, BinlogPosition(FILE, 1300), BinlogPosition(FILE, 1400), (), False)])
    return new.epoch


def test_a_chunk_read_before_a_failover_is_read_again_on_the_new_primary(index):
    """A chunk's position is one server's binlog: after the switch it maps to nothing, so the
    chunk goes back to be read on the new primary, whose chunk is placed by the new positions."""
    snapshot = stage(index)
    old = pend(snapshot, 300)  # after 200 on the old primary; FILE:300 is before 200 on the new one
    assert fail_over(index) == 1
    assert snapshot.placements(100, 10_000) == []
    assert old not in snapshot._pending
    new = pend(snapshot, 1300)
    new.epoch = 1
    assert [p.commit_ts for p in snapshot.placements(100, 10_000)] == [201]
    index.append([], [], [], 330, position=BinlogPosition(FILE, 1500))
    later = pend(snapshot, 1500)
    later.epoch = 1
    assert [p.commit_ts for p in snapshot.placements(300, 10_000) if p.pending is later] == [301]


def test_a_failover_while_the_copy_starts_is_retryable_not_a_minute_of_waiting(index):
    """The start's binlog end was read on the old primary: it never maps into the new epoch, so
    the changefeed starts again (a retryable upstream error) rather than wait and fail."""
    from sparkcdc.errors import ErrUpstreamUnreachable
    from sparkcdc.pipeline.failure import is_retryable_failure

    snapshot = stage(index)
    fail_over(index)
    with pytest.raises(ErrUpstreamUnreachable, match="failed over while the copy's start was read from 127.0.0.1:1") \
            as raised:
        snapshot._wait_covered(BinlogPosition(FILE, 5000), 0, timeout=30)
    assert is_retryable_failure(str(raised.value))


def test_a_table_without_key_keeps_its_anchor_across_a_failover(index):
    keyless = TableSnapshot("db", "nokey", None, [ChunkState(0, None, None)])
    snapshot = stage(index, tables=[keyless])
    pend(snapshot, 300)
    snapshot.placed(snapshot.placements(100, 300))
    assert snapshot.dropped_before() == {("db", "nokey"): 200}
    fail_over(index)
    restarted = stage(index, MemoryStore(), tables=SnapshotState.from_json(snapshot._store.snapshot).tables)
    assert restarted.dropped_before() == {("db", "nokey"): 200}, "the stored commit-ts, not the old server's position"


def test_the_stream_is_capped_at_a_wave_start_while_the_wave_reads(index, tmp_path):
    """While a wave reads, the source plans batches only up to the wave's start (they hold no
    chunk position of the wave, so they are written meanwhile); the cap goes with the read."""
    from sparkcdc.pipeline.planning import SourceOptions, stream_cap

    cap_file = str(tmp_path / "snapshot-cap")
    snapshot = stage(index)
    snapshot._cap_file = cap_file
    options = SourceOptions(str(tmp_path / "index.sqlite"), "mysql://root@127.0.0.1:1/", 0, cap_file=cap_file)
    assert options.capped() is options
    wave = snapshot._next_wave()
    assert wave is not None and snapshot._reading is wave
    assert stream_cap(cap_file) == wave.since == index.resolved_ts()
    assert options.capped().target_ts == wave.since
    assert replace(options, target_ts=wave.since - 5).capped().target_ts == wave.since - 5  # a changefeed's own target
    snapshot._read_wave = lambda reads: pa.Table.from_batches([
        _marker(0, info("t", 100), str(BinlogPosition(FILE, 400)), ""),
        rows_batch(0, info("t", 100), 0, [["1"], ["x"]])])
    snapshot._read(wave)
    assert stream_cap(cap_file) is None and options.capped() is options and len(snapshot._pending) == 1
    snapshot._pending.clear()  # as if the stream had taken it, unwritten: the chunk is read again
    snapshot._reading = snapshot._next_wave()
    assert stream_cap(cap_file) == snapshot._reading.since  # a failed read lifts the cap too
    snapshot._read_wave = lambda reads: (_ for _ in ()).throw(OSError("the upstream closed the connection"))
    with pytest.raises(OSError):
        snapshot._read(snapshot._reading)
    assert stream_cap(cap_file) is None


def test_the_source_hurries_while_read_chunks_wait_for_the_stream(index, tmp_path):
    """While read chunks wait for a batch past their positions, the snapshot stage says so beside
    the cap file (the source then plans batches at once); written, or dropped to read again, they
    wait no more, and a stopped stage leaves no signal behind."""
    from sparkcdc.pipeline.planning import chunks_waiting

    cap_file = str(tmp_path / "snapshot-cap")
    snapshot = stage(index)
    snapshot._cap_file = cap_file
    wave = snapshot._next_wave()
    assert not chunks_waiting(cap_file)
    snapshot._read_wave = lambda reads: pa.Table.from_batches([
        _marker(0, info("t", 100), str(BinlogPosition(FILE, 400)), ""),
        rows_batch(0, info("t", 100), 0, [["1"], ["x"]])])
    snapshot._read(wave)
    assert len(snapshot._pending) == 1 and chunks_waiting(cap_file)
    assert snapshot.placements(100, 150) == [] and chunks_waiting(cap_file)  # its place is after 200
    snapshot.placed(snapshot.placements(100, 300))
    assert not snapshot._pending and not chunks_waiting(cap_file)
    with snapshot._lock:
        snapshot._pending.append(object())  # another read chunk waits
        snapshot._tell_waiting()
    assert chunks_waiting(cap_file)
    snapshot.stop()
    assert not chunks_waiting(cap_file)
