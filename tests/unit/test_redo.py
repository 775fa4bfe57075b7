"""Redo log: frame format, writer durability order, meta, cleanup, reader de-duplication and
the apply plan (ts range, update split, DDL barriers)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from sparkcdc.config.replica import ConsistentConfig, parse_replica_config
from sparkcdc.errors import ErrConsistentStorage, ErrInvalidReplicaConfig, ErrRedoFileOp, ErrRedoMetaFileNotFound
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.redo import format as fmt
from sparkcdc.redo.applier import apply_steps, split_updates_for_apply
from sparkcdc.redo.reader import DDLStep, RedoReader, RowStep
from sparkcdc.redo.storage import RedoStorage
from sparkcdc.redo.writer import RedoWriter
from sparkcdc.sink.registry import parse_sink_spec

from test_pipeline_planning import FakeIndex, RecordingSink, batch_table

INFO = TableInfo("db", "t", 7, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),
                                ColumnInfo("uk", "varchar", is_unique_key=True, nullable=False),
                                ColumnInfo("v", "blob", charset="binary")), 3, ("id",))


def row(ts, op, before=None, after=None, seq=0, info=INFO):
    return RowChange(ts, info.schema, info.table, op, tuple(before) if before else None,
                     tuple(after) if after else None, seq)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def storage(tmp_path) -> RedoStorage:
    return RedoStorage.from_uri(f"file://{tmp_path}/redo")


def consistent(**overrides) -> ConsistentConfig:
    return ConsistentConfig(level="eventual", storage="file:///unused", **overrides)


# -- format ----------------------------------------------------------------------------------

@pytest.mark.parametrize("compress", [False, True])
def test_rows_round_trip_through_a_frame_with_nulls_binary_and_unicode(compress):
    rows = [row(10, "insert", after=["1", "ü-ß", "\x00\xff\x80"]),
            row(10, "update", ["2", "a", None], ["3", "b", "x"], seq=1),
            row(11, "delete", ["4", "c", ""])]
    frame = fmt.encode_frame(fmt.KIND_ROW, 9, 5, 11, 0, fmt.encode_rows(INFO, rows), compress)
    (decoded,) = fmt.decode_frames(frame)
    assert (decoded.kind, decoded.run, decoded.start, decoded.end, decoded.part) == (fmt.KIND_ROW, 9, 5, 11, 0)
    info, back = fmt.decode_rows(decoded.payload)
    assert info == INFO and back == rows


def test_a_torn_or_corrupt_frame_ends_the_file():
    good = fmt.encode_frame(fmt.KIND_DDL, 1, 0, 5, 0, fmt.encode_ddls([DDLEvent(5, "db", "t", "DROP TABLE t",
                                                                                  "drop table")]), False)
    second = fmt.encode_frame(fmt.KIND_COMMIT, 1, 0, 5, 1, fmt.encode_commit(1), False)
    assert len(list(fmt.decode_frames(good + second))) == 2
    assert len(list(fmt.decode_frames(good + second[:-1]))) == 1  # torn tail
    corrupt = bytearray(good + second)
    corrupt[fmt.HEADER.size + 3] ^= 0xFF  # a payload byte of the first frame
    assert list(fmt.decode_frames(bytes(corrupt))) == []


# -- writer, meta, cleanup -------------------------------------------------------------------

def test_commit_makes_the_batch_readable_and_sets_resolved_ts(tmp_path):
    writer = RedoWriter(storage(tmp_path), consistent(), "default/cf")
    batch = writer.batch(100, 200)
    batch.add_rows(INFO, [row(150, "insert", after=["1", "a", "x"])])
    batch.add_ddls([DDLEvent(200, "db", "t", "ALTER TABLE t ADD c INT", "add column")])
    batch.commit()
    reader = RedoReader(storage(tmp_path))
    # The run's first batch anchors the checkpoint at its start; the meta file's resolved-ts
    # follows lazily, the log itself proves the batch at once.
    assert (reader.read_meta().checkpoint_ts, reader.read_meta().resolved_ts) == (100, 100)
    meta = reader.effective_meta()
    assert (meta.checkpoint_ts, meta.resolved_ts, meta.changefeed) == (100, 200, "default/cf")
    steps = list(reader.steps(meta))
    assert isinstance(steps[0], RowStep) and steps[0].rows[0].after == ("1", "a", "x")
    assert isinstance(steps[1], DDLStep) and steps[1].ddl.query == "ALTER TABLE t ADD c INT"
    writer.close()


def test_a_batch_without_its_commit_frame_is_never_applied(tmp_path):
    writer = RedoWriter(storage(tmp_path), consistent(), "default/cf")
    done = writer.batch(100, 200)
    done.add_rows(INFO, [row(150, "insert", after=["1", "a", "x"])])
    done.commit()
    torn = writer.batch(200, 300)  # the crash comes before commit()
    torn.add_rows(INFO, [row(250, "insert", after=["2", "b", "y"])])
    writer.close()
    reader = RedoReader(storage(tmp_path))
    assert [b.end for b in reader.batches()] == [200]
    # Even a meta claiming more (it cannot, but a later run's might) does not resurrect it.
    assert reader.effective_meta().resolved_ts == 200
    rows = [r for s in reader.steps(fmt.RedoMeta(100, 300)) for r in s.rows]
    assert [r.commit_ts for r in rows] == [150]


def test_checkpoint_reaches_the_meta_within_the_interval_and_old_files_are_deleted(tmp_path):
    clock = FakeClock()
    store = storage(tmp_path)
    writer = RedoWriter(store, consistent(max_log_size=1, meta_flush_interval=500), "default/cf", clock=clock)
    payload = "p" * (700 * 1024)  # two batches fill a 1 MiB file
    for number in range(4):
        batch = writer.batch(number * 100, number * 100 + 100)
        batch.add_rows(INFO, [row(number * 100 + 50, "insert", after=[str(number), str(number), payload])])
        batch.commit()
    logs = [n for n in store.list() if n.endswith(".log")]
    assert len(logs) == 2, logs  # rotated at max-log-size
    clock.now = 0.1
    writer.checkpoint(200)  # inside the interval: not yet in the meta
    writer._submit(lambda: None).result()
    assert RedoReader(store).read_meta().checkpoint_ts == 0
    clock.now = 1.0
    writer.checkpoint(210)
    writer._submit(lambda: None).result()
    assert RedoReader(store).read_meta().checkpoint_ts == 210
    # The first file holds batches ending at 100 and 200 (<= 210): deleted; the open one stays.
    remaining = [n for n in store.list() if n.endswith(".log")]
    assert remaining == logs[1:]
    writer.close()


def test_a_gap_in_the_log_stops_the_resolved_ts_or_fails_the_apply(tmp_path):
    writer = RedoWriter(storage(tmp_path), consistent(), "default/cf")
    for start, end in ((100, 200), (300, 400)):  # (200, 300] is missing
        batch = writer.batch(start, end)
        batch.add_rows(INFO, [row(end, "insert", after=[str(end), str(end), "x"])])
        batch.commit()
    empty = writer.batch(400, 500)
    empty.seal(durable=False)
    empty.wait()
    writer.close()
    reader = RedoReader(storage(tmp_path))
    with pytest.raises(ErrRedoFileOp, match="no batch between commit-ts 200 and 300"):
        list(reader.steps(reader.effective_meta()))
    # Without the meta's word for 400, the log alone reaches only up to the gap.
    assert reader.effective_meta().resolved_ts == 400
    (store := storage(tmp_path)).put(fmt.META_FILE, fmt.RedoMeta(100, 100, "default/cf").to_bytes())
    reader = RedoReader(store)
    assert reader.effective_meta().resolved_ts == 200


def test_empty_batches_keep_the_chain_unbroken(tmp_path):
    writer = RedoWriter(storage(tmp_path), consistent(), "default/cf")
    for start, end, rows in ((100, 200, 1), (200, 300, 0), (300, 400, 1)):
        batch = writer.batch(start, end)
        if rows:
            batch.add_rows(INFO, [row(end, "insert", after=[str(end), str(end), "x"])])
        batch.seal(durable=bool(rows))
        batch.wait()
    writer.close()
    reader = RedoReader(storage(tmp_path))
    assert reader.effective_meta().resolved_ts == 400
    assert [r.commit_ts for s in reader.steps(reader.effective_meta()) for r in s.rows] == [200, 400]


def test_flush_checkpoint_persists_at_once(tmp_path):
    clock = FakeClock()
    writer = RedoWriter(storage(tmp_path), consistent(meta_flush_interval=60_000), "default/cf", clock=clock)
    writer.flush_checkpoint(99)
    assert RedoReader(storage(tmp_path)).read_meta().checkpoint_ts == 99
    writer.close()


def test_a_restarted_run_overlapping_the_old_one_yields_each_commit_ts_once(tmp_path):
    first = RedoWriter(storage(tmp_path), consistent(), "default/cf")
    for start, end in ((100, 200), (200, 300)):
        batch = first.batch(start, end)
        batch.add_rows(INFO, [row(start + 10, "insert", after=[str(start), str(start), "x"]),
                              row(end, "insert", after=[str(end), str(end), "x"])])
        batch.commit()
    first.close()  # crashed after 300 was logged; the changefeed resumes from checkpoint 150
    second = RedoWriter(storage(tmp_path), consistent(), "default/cf")
    for start, end in ((150, 250), (250, 400)):
        batch = second.batch(start, end)
        rows = [row(ts, "insert", after=[str(ts), str(ts), "x"]) for ts in (200, 210, 300, 310, 400)
                if start < ts <= end]
        batch.add_rows(INFO, rows)
        batch.commit()
    second.close()
    reader = RedoReader(storage(tmp_path))
    meta = reader.effective_meta()
    assert (meta.checkpoint_ts, meta.resolved_ts) == (150, 400)  # the second run anchored at 150
    seen = [r.commit_ts for s in reader.steps(fmt.RedoMeta(105, 400)) for r in s.rows]
    assert seen == [110, 200, 210, 300, 310, 400]


def test_a_storage_holding_another_changefeeds_log_is_refused(tmp_path):
    RedoWriter(storage(tmp_path), consistent(), "default/one").flush_checkpoint(1)
    with pytest.raises(ErrConsistentStorage, match="default/one"):
        RedoWriter(storage(tmp_path), consistent(), "default/two")


def test_reading_a_storage_without_meta_says_what_to_pass(tmp_path):
    with pytest.raises(ErrRedoMetaFileNotFound, match="consistent.storage"):
        RedoReader(storage(tmp_path)).read_meta()


# -- apply plan ------------------------------------------------------------------------------

def test_key_updates_become_delete_plus_deferred_insert_within_each_transaction():
    rows = [row(10, "update", ["1", "a", "x"], ["2", "a", "x"]),   # PK change
            row(10, "update", ["3", "b", "x"], ["3", "b", "y"], 1),  # no key change
            row(10, "update", ["4", "c", "x"], ["4", "d", "x"], 2),  # UK change
            row(10, "insert", after=["5", "e", "x"], seq=3),
            row(10, "delete", ["6", "f", "x"], seq=4),
            row(20, "update", ["2", "a", "x"], ["1", "a", "x"])]
    out = [(r.commit_ts, r.op, (r.before or r.after)[0]) for r in split_updates_for_apply(INFO, rows)]
    assert out == [(10, "delete", "1"), (10, "update", "3"), (10, "delete", "4"), (10, "delete", "6"),
                   (10, "insert", "2"), (10, "insert", "4"), (10, "insert", "5"),
                   (20, "delete", "2"), (20, "insert", "1")]


class ReplaceSink:
    """An in-memory downstream keyed like MySQL in safe mode: deletes by key, inserts replace
    (also on the unique key), updates as delete + replace."""

    def __init__(self, rows=None):
        self.rows = dict(rows or {})
        self.ddls = []

    def write_rows(self, table, rows):
        for change in rows:
            if change.before is not None:
                self.rows.pop(change.before[0], None)
            if change.after is not None:
                for key, value in list(self.rows.items()):
                    if value[1] == change.after[1]:
                        del self.rows[key]
                self.rows[change.after[0]] = change.after

    def write_ddl(self, ddl):
        self.ddls.append(ddl.commit_ts)

    def flush(self):
        pass


transactions = st.lists(st.lists(st.tuples(st.sampled_from(["insert", "update", "delete"]),
                                           st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=4),
                        min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(transactions, st.data())
def test_apply_from_any_mid_batch_state_ends_at_the_upstream_state(txns, data):
    """Replaying (checkpoint, resolved] over any downstream state between the two (a partially
    applied batch, some transactions twice) gives exactly the upstream state at resolved."""
    state: dict[str, tuple] = {}
    history = [dict(state)]
    logged: list[RowChange] = []
    for number, ops in enumerate(txns, start=1):
        ts = number * 10
        touched = set()
        for seq, (op, key, uk) in enumerate(ops):
            key_text, uk_text = str(key), f"u{uk}"
            if key_text in touched:
                continue  # the batch writer nets each key to one change per transaction
            current = state.get(key_text)
            uk_owner = next((k for k, v in state.items() if v[1] == uk_text), None)
            if op == "insert" and current is None and uk_owner is None:
                new = (key_text, uk_text, str(ts))
                logged.append(RowChange(ts, "db", "t", "insert", after=new, seq=seq))
            elif op == "update" and current is not None and uk_owner in (None, key_text):
                new = (key_text, uk_text, str(ts))
                logged.append(RowChange(ts, "db", "t", "update", before=current, after=new, seq=seq))
            elif op == "delete" and current is not None:
                new = None
                logged.append(RowChange(ts, "db", "t", "delete", before=current, seq=seq))
            else:
                continue
            touched.add(key_text)
            if new is None:
                del state[key_text]
            else:
                state[key_text] = new
        history.append(dict(state))
    checkpoint_index = data.draw(st.integers(0, len(txns)))
    # The downstream: the checkpoint's state plus any later transactions applied partially.
    downstream = dict(history[checkpoint_index])
    for change in logged:
        if change.commit_ts > checkpoint_index * 10 and data.draw(st.booleans()):
            ReplaceSink.write_rows(type("S", (), {"rows": downstream})(), INFO, [change])
    sink = ReplaceSink(downstream)
    meta = fmt.RedoMeta(checkpoint_index * 10, len(txns) * 10)
    steps = [RowStep(INFO, [r for r in logged if r.commit_ts > meta.checkpoint_ts])]
    apply_steps(steps, sink, meta)
    assert sink.rows == history[-1]


# -- batch writer hooks ------------------------------------------------------------------------

class RecordingRedo:
    is_local = True

    def __init__(self, calls):
        self.calls = calls

    def batch(self, start, end):
        calls = self.calls

        class Batch:
            def add_rows(self, info, rows):
                calls.append(("redo-rows", info.table, len(rows)))

            def add_ddls(self, ddls):
                calls.append(("redo-ddls", len(ddls)))

            def seal(self, durable=True):
                calls.append(("redo-seal", end))

            def wait(self):
                calls.append(("redo-durable", end))
        return Batch()

    def checkpoint(self, ts):
        self.calls.append(("redo-checkpoint", ts))

    def flush_checkpoint(self, ts):
        self.calls.append(("redo-flush-checkpoint", ts))


class RecordingSyncpoint:
    def __init__(self, calls):
        self.calls = calls

    def due(self, start, end):
        return True

    def record(self, primary_ts, position):
        self.calls.append(("syncpoint", primary_ts, position))


class PositionIndex(FakeIndex):
    def position_at(self, ts):
        return f"mysql-bin.000001:{ts}"


def test_redo_is_committed_before_the_sink_and_persisted_before_a_ddl():
    ddl = DDLEvent(30, "db", "t", "ALTER TABLE t ADD c INT", "add column")
    index = PositionIndex([], 30, ddls=[ddl], tables=[INFO])
    table = batch_table([(20, 1, "db", "t", "insert", None, ["2", "u", "x"]),
                         (30, 5, "", "", RANGE_MARKER, None, None)])
    sink = RecordingSink()
    calls = sink.calls
    write_batch(table, index, sink, TableFilter(["*.*"]).match_event, lambda ts: calls.append(("meta", ts)),
                redo=RecordingRedo(calls), syncpoint=RecordingSyncpoint(calls))
    assert calls == [("redo-rows", "t", 1), ("redo-ddls", 1), ("redo-seal", 30), ("redo-durable", 30),
                     ("rows", "t", [(20, 1)]), ("flush",), ("redo-flush-checkpoint", 29),
                     ("ddl", "ALTER TABLE t ADD c INT"), ("flush",), ("syncpoint", 30, "mysql-bin.000001:30"),
                     ("checkpoint", 30), ("meta", 30), ("redo-checkpoint", 30)]


OTHER = TableInfo("db", "u", 8, INFO.columns, 3, ("id",))


def two_table_batch(stamps) -> tuple[list, object, PositionIndex]:
    """(rows, batch (0, 100], index) of one transaction of 3 rows in tables t and u per stamp."""
    raw = []
    for ts in stamps:
        raw += [(ts, 0, "db", "t", "insert", None, [str(ts), f"u{ts}", "x"]),
                (ts, 1, "db", "t", "insert", None, [str(ts + 1), f"u{ts + 1}", "x"]),
                (ts, 2, "db", "u", "insert", None, [str(ts), f"u{ts}", "x"])]
    table = batch_table(raw + [(100, 5, "", "", RANGE_MARKER, None, None)])
    return raw, table, PositionIndex([], 100, tables=[INFO, OTHER])


def test_a_large_batch_goes_through_the_redo_log_in_pieces_cut_between_transactions(monkeypatch):
    raw, table, index = two_table_batch(range(10, 100, 10))  # 9 transactions of 3 rows in two tables
    sink = RecordingSink()
    calls = sink.calls
    monkeypatch.setattr("sparkcdc.pipeline.batch_sink.REDO_PIECE_ROWS", 7)
    write_batch(table, index, sink, TableFilter(["*.*"]).match_event, lambda ts: None, redo=RecordingRedo(calls))
    seals = [c[1] for c in calls if c[0] == "redo-seal"]
    assert seals == [30, 60, 100]  # about 7 rows each, whole transactions, the last ends at the batch end
    # All pieces are handed to the redo thread first; each is durable before the sink gets its rows.
    assert [c[0] for c in calls[:12]].count("redo-seal") == 3
    for piece_end in seals:
        durable = calls.index(("redo-durable", piece_end))
        rows_of_piece = [i for i, c in enumerate(calls) if c[0] == "rows" and c[2] and c[2][-1][0] <= piece_end
                         and c[2][0][0] > {30: 0, 60: 30, 100: 60}[piece_end]]
        assert rows_of_piece and all(i > durable for i in rows_of_piece)
    written = [ts for c in calls if c[0] == "rows" for ts, _ in c[2]]
    assert sorted(written) == sorted(r[0] for r in raw)


# -- config ----------------------------------------------------------------------------------

def test_consistent_config_defaults_for_zero_and_limits():
    config = parse_replica_config('[consistent]\nlevel = "eventual"\nstorage = "file:///tmp/r"\n'
                                  'max-log-size = 0\nflush-interval = 0\ncompression = "lz4"')
    assert (config.consistent.max_log_size, config.consistent.flush_interval) == (64, 2000)
    assert config.consistent.compression == "lz4"


@pytest.mark.parametrize("text, words", [
    ('level = "eventual"', "consistent.storage"),
    ('level = "strong"', "consistent.level"),
    ('level = "eventual"\nstorage = "file:///r"\ncompression = "zstd"', "consistent.compression"),
    ('level = "eventual"\nstorage = "file:///r"\nflush-interval = 10', "at least 50"),
    ('level = "eventual"\nstorage = "file:///r"\nmeta-flush-interval = 49', "consistent.meta-flush-interval"),
    ('level = "eventual"\nstorage = "ftp://host/r"', "file://"),
    ('level = "eventual"\nstorage = "s3:///no-bucket"', "bucket"),
])
def test_bad_consistent_config_is_refused_naming_the_key(text, words):
    with pytest.raises((ErrInvalidReplicaConfig, ErrConsistentStorage)) as info:
        parse_replica_config("[consistent]\n" + text)
    assert words in info.value.message


@pytest.mark.parametrize("sink_uri", ["file:///tmp/out?protocol=canal-json", "kafka://127.0.0.1:9092/t?protocol=canal-json"])
@pytest.mark.parametrize("setting", ['[consistent]\nlevel = "eventual"\nstorage = "file:///tmp/r"',
                                     "enable-sync-point = true"])
def test_redo_and_syncpoints_need_a_mysql_sink(sink_uri, setting):
    with pytest.raises(ErrInvalidReplicaConfig, match="MySQL-compatible sinks"):
        parse_sink_spec(sink_uri, parse_replica_config(setting))


def test_nfs_storage_is_a_local_path(tmp_path):
    assert RedoStorage.from_uri(f"nfs://{tmp_path}/n").location.root == f"{tmp_path}/n"
    assert os.path.isdir(f"{tmp_path}/n")
