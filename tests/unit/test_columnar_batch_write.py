"""The batch writer's columnar path (Arrow rows straight to the storage sink's encoder) writes
byte for byte what the RowChange path (netting, update split, filters, write_rows) writes, and
is taken only for the transactions those steps would pass unchanged."""

from __future__ import annotations

import os
import time

import pyarrow as pa
from hypothesis import HealthCheck, given, settings, strategies as st

from sparkcdc.config.replica import SinkConfig, parse_replica_config
from sparkcdc.filter.change_filters import ChangeFilters
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.pipeline.batch_sink import tables_of, write_batch
from sparkcdc.pipeline.netting import rows_to_rewrite
from sparkcdc.pipeline.snapshot import Placement
from sparkcdc.model.change_batch import marker_batch
from sparkcdc.schema.rules import DDLPolicy
from sparkcdc.sink.storage import StorageSink
from sparkcdc.upstream.range_reader import PythonBatchBuilder

NOW = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))
VERSION = compose(1_700_000_000_000)
PK = TableInfo("db", "pk", 1, (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("code", "varchar", charset="utf8mb4", length=8, is_unique_key=True),
    ColumnInfo("v", "varchar", charset="utf8mb4", length=8),
), VERSION, handle_key=("id",))
UK = TableInfo("db", "uk", 2, (
    ColumnInfo("a", "int", nullable=False, is_unique_key=True),
    ColumnInfo("b", "int", nullable=False, is_unique_key=True),
    ColumnInfo("v", "text", charset="utf8mb4"),
), VERSION, handle_key=("a", "b"))
NO_KEY = TableInfo("db", "nokey", 3, (
    ColumnInfo("x", "int"),
    ColumnInfo("v", "varchar", charset="utf8mb4", length=8),
), VERSION)
TABLES = {t.table: t for t in (PK, UK, NO_KEY)}


def ts(n: int) -> int:
    return compose(1_700_000_001_000 + n)


class FakeIndex:
    def ddls_between(self, low, high):
        return []

    def table_infos_at(self, names, at):
        return [TABLES[table] for _, table in names]


class RowChangeSink(StorageSink):
    """The storage sink without its columnar entry: every row takes the RowChange path."""

    accepts_arrow = False


class CountingSink(StorageSink):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.arrow_rows = self.change_rows = 0

    def write_arrow(self, table, commit_ts, ops, before, after):
        self.arrow_rows += len(ops)
        super().write_arrow(table, commit_ts, ops, before, after)

    def write_rows(self, table, rows):
        self.change_rows += len(rows)
        super().write_rows(table, rows)


def batch(start: int, end: int, changes: list[RowChange]) -> pa.Table:
    builder = PythonBatchBuilder()
    builder.add_changes(changes)
    return pa.Table.from_batches([marker_batch(start, end), builder.finish()])


def files(root) -> dict[str, bytes]:
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def write_both(tmp_path, batches: list[pa.Table], protocol: str = "canal-json", split_updates: bool = False,
               filter_toml: str = "", file_size: int = 64 << 20) -> CountingSink:
    """Writes the batches through both paths; asserts identical storage; returns the columnar sink."""
    outputs = []
    for name, kind in (("rows", RowChangeSink), ("arrow", CountingSink)):
        root = tmp_path / name
        config = parse_replica_config(filter_toml)
        uri = f"file://{root}?protocol={protocol}&date-separator=none"
        sink_config = SinkConfig(protocol=protocol, enable_tidb_extension=True)
        sink_config.cloud_storage_config.file_size = file_size  # below the URI's 1 MiB minimum
        sink = kind(uri, sink_config, clock=lambda: NOW)
        filters = ChangeFilters(config)
        written = []
        for table in batches:
            result = write_batch(table, FakeIndex(), sink, lambda s, t: True, lambda ts: None,
                                 split_updates, filters, DDLPolicy(force_replicate=True))
            written.append(result.rows if result else 0)
        sink.close()
        outputs.append((files(root), written, sink))
    (rows_files, rows_written, _), (arrow_files, arrow_written, arrow_sink) = outputs
    assert any(name.endswith(f".{'csv' if protocol == 'csv' else 'json'}") for name in rows_files) or not any(rows_written)
    assert arrow_files == rows_files
    assert arrow_written == rows_written
    return arrow_sink


def ins(n, table, values, seq):
    return RowChange(ts(n), "db", table, "insert", None, values, seq)


def upd(n, table, before, after, seq):
    return RowChange(ts(n), "db", table, "update", before, after, seq)


def dele(n, table, values, seq):
    return RowChange(ts(n), "db", table, "delete", values, None, seq)


def test_plain_transactions_of_several_tables_go_columnar(tmp_path):
    changes = [
        ins(1, "pk", ("1", "a", "x"), 0), ins(1, "pk", ("2", "b", None), 1), ins(1, "uk", ("1", "1", "t"), 2),
        upd(2, "pk", ("1", "a", "x"), ("1", "a", "y"), 0), dele(2, "uk", ("1", "1", "t"), 1),
        ins(2, "nokey", ("7", "n"), 2), ins(2, "nokey", ("7", "n"), 3),  # no handle key: no netting
        dele(3, "pk", ("2", "b", None), 0),
    ]
    for protocol in ("canal-json", "csv"):
        sink = write_both(tmp_path / protocol, [batch(0, ts(3), changes)], protocol)
        assert (sink.arrow_rows, sink.change_rows) == (len(changes), 0)


def test_transactions_netting_or_split_would_change_take_the_row_change_path(tmp_path):
    plain = [ins(1, "pk", ("1", "a", "x"), 0), ins(1, "pk", ("2", "b", "x"), 1)]
    rewritten = [
        upd(2, "pk", ("1", "a", "x"), ("9", "a", "x"), 0), ins(2, "pk", ("3", "c", None), 1),  # moves the PK
        ins(3, "pk", ("4", "d", None), 0), upd(3, "pk", ("4", "d", None), ("4", "d", "z"), 1),  # key twice
        ins(4, "pk", ("5", "e", None), 0), dele(4, "pk", ("5", "e", None), 1),  # deletes what it inserted
        upd(5, "pk", ("2", "b", "x"), ("2", "b", "x"), 0), ins(5, "pk", ("6", "f", None), 1),  # a no-op update
        ins(6, "uk", ("1", "1", "v"), 0), upd(6, "uk", ("1", "1", "v"), ("1", "2", "v"), 1),  # moves a UK part
    ]
    tail = [upd(7, "pk", ("3", "c", None), ("3", "c", "w"), 0), dele(7, "uk", ("1", "2", "v"), 1)]
    for protocol in ("canal-json", "csv"):
        sink = write_both(tmp_path / protocol, [batch(0, ts(7), plain + rewritten + tail)], protocol)
        assert sink.arrow_rows == len(plain + tail)


def test_a_malformed_row_sends_its_whole_table_the_row_change_way(tmp_path):
    changes = [
        ins(1, "pk", ("1", "a"), 0),  # one value short: the RowChange path decides what that means
        ins(2, "pk", ("5", "e", None), 0), upd(2, "pk", ("5", "e", None), ("5", "e", "z"), 1),  # key twice
        ins(3, "uk", ("1", "1", "t"), 0),
    ]
    for protocol in ("canal-json", "csv"):
        sink = write_both(tmp_path / protocol, [batch(0, ts(3), changes)], protocol)
        assert (sink.arrow_rows, sink.change_rows) == (1, 2)  # key 5 netted to one insert


def test_split_updates_sends_unique_key_changes_the_row_change_way(tmp_path):
    changes = [
        ins(1, "pk", ("1", "a", "x"), 0),
        upd(2, "pk", ("1", "a", "x"), ("1", "b", "x"), 0),  # a UK value changes: delete + insert
        upd(3, "pk", ("1", "b", "x"), ("1", "b", "y"), 0),
        upd(4, "nokey", ("1", "p"), ("1", "q"), 0),  # no PK/UK: never split
    ]
    for protocol in ("canal-json", "csv"):
        sink = write_both(tmp_path / protocol, [batch(0, ts(4), changes)], protocol, split_updates=True)
        assert (sink.arrow_rows, sink.change_rows) == (3, 2)


def test_filtered_and_projected_tables_take_the_row_change_path(tmp_path):
    toml = ('[[filter.event-filters]]\nmatcher = ["db.pk"]\nignore-event = ["delete"]\n'
            '[[filter.event-filters]]\nmatcher = ["db.nokey"]\nignore-event = ["drop table"]\n'
            '[[sink.column-selectors]]\nmatcher = ["db.uk"]\ncolumns = ["a", "b"]\n')
    changes = [
        ins(1, "pk", ("1", "a", "x"), 0), dele(2, "pk", ("1", "a", "x"), 0),
        ins(1, "uk", ("1", "1", "secret"), 1), ins(3, "nokey", ("1", "p"), 0),
    ]
    sink = write_both(tmp_path, [batch(0, ts(3), changes)], filter_toml=toml)
    assert sink.arrow_rows == 1  # nokey: its rule ignores only a DDL


def test_one_row_transactions_go_columnar_whatever_their_update(tmp_path):
    # Netting keeps a one-row transaction as it is, even a no-op or key-moving update; in a
    # longer transaction the same rows are netted, and only that transaction takes the RowChange path.
    single = [ins(1, "pk", ("1", "a", "x"), 0), upd(2, "pk", ("1", "a", "x"), ("1", "a", "x"), 0),
              upd(3, "pk", ("1", "a", "x"), ("2", "a", "x"), 0), dele(4, "pk", ("2", "a", "x"), 0)]
    longer = [ins(5, "pk", ("3", "c", None), 0), upd(5, "pk", ("3", "c", None), ("3", "c", "y"), 1)]
    tail = [ins(6, "pk", ("4", "d", None), 0)]
    for protocol in ("canal-json", "csv"):
        sink = write_both(tmp_path / protocol, [batch(0, ts(6), single + longer + tail)], protocol)
        assert (sink.arrow_rows, sink.change_rows) == (len(single + tail), 1)


def test_file_size_cuts_right_after_the_transaction_that_reaches_it(tmp_path):
    txns = [[ins(n, "pk", (str(10 * n + i), "c", "v" * n), i) for i in range(n % 3 + 1)] for n in range(1, 9)]
    encoded = [CountingSink(f"file://{tmp_path}/encoder?protocol=canal-json", SinkConfig(
        protocol="canal-json", enable_tidb_extension=True), clock=lambda: NOW)._encoder.encode_rows(PK, txn)
        for txn in txns]
    two = len(encoded[0]) + len(encoded[1])
    for file_size, in_first in ((two, 2), (two + 1, 3)):  # the buffer reaches file-size at txn 2, at txn 3
        root = tmp_path / str(file_size)
        write_both(root, [batch(0, ts(8), [row for txn in txns for row in txn])], file_size=file_size)
        written = files(root / "arrow")
        first = min(name for name in written if name.endswith(".json") and "/meta/" not in name)
        assert written[first] == b"".join(encoded[:in_first])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 300)), min_size=1, max_size=12),
       file_size=st.integers(1, 3000))
def test_files_are_cut_alike_by_both_paths(tmp_path_factory, lengths, file_size):
    changes = [ins(n, "pk", (f"{n}-{i}", "c", "v" * length), i)
               for n, (rows, length) in enumerate(lengths, 1) for i in range(rows)]
    write_both(tmp_path_factory.mktemp("cuts"), [batch(0, ts(len(lengths)), changes)], file_size=file_size)


def test_a_transaction_over_two_batches_and_file_size_cuts(tmp_path):
    first = [ins(1, "pk", (str(i), str(i), "v" * 5), i) for i in range(30)]
    second = [ins(1, "pk", (str(i), str(i), "w"), i) for i in range(30, 40)] + [
        ins(2, "pk", (str(i), str(i), "z"), i - 40) for i in range(40, 60)]
    sink = write_both(tmp_path, [batch(0, ts(1), first), batch(ts(1), ts(2), second)], file_size=2000)
    assert sink.arrow_rows == 60
    assert len([name for name in files(tmp_path / "arrow") if name.endswith(".json")]) > 2


def test_tables_in_first_appearance_order():
    changes = [ins(2, "uk", ("1", "1", "t"), 1), ins(2, "pk", ("1", "a", None), 0), ins(1, "nokey", ("1", "p"), 0),
               ins(2, "nokey", ("2", "p"), 2)]
    _, groups = tables_of(batch(0, ts(2), changes))
    assert [g.table for g in groups] == ["nokey", "pk", "uk"]
    assert [c.seq for c in groups[0].changes()] == [0, 2]


_IDS = st.sampled_from(["1", "2", "3"])
_VALUES = st.sampled_from([None, "x", "y"])


@st.composite
def _change(draw, n: int, seq: int) -> RowChange:
    table = draw(st.sampled_from(sorted(TABLES)))
    image = {"pk": st.tuples(_IDS, st.sampled_from(["a", "b"]), _VALUES),
             "uk": st.tuples(_IDS, _IDS, _VALUES),
             "nokey": st.tuples(_VALUES, _VALUES)}[table]
    op = draw(st.sampled_from(["insert", "update", "delete"]))
    before = draw(image) if op != "insert" else None
    after = draw(image) if op != "delete" else None
    if op == "update" and draw(st.booleans()):
        after = before if draw(st.booleans()) else before[:-1] + (draw(_VALUES),)
    return RowChange(ts(n), "db", table, op, before, after, seq)


def transactions_in_batches(draw, change, max_transactions: int) -> list[pa.Table]:
    """Up to `max_transactions` transactions of 1-4 rows drawn from `change(n, seq)` (commit-ts
    ts(n)), as one micro-batch or cut into two."""
    txn_sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=max_transactions))
    changes = [draw(change(n, seq)) for n, size in enumerate(txn_sizes, 1) for seq in range(size)]
    cut = draw(st.integers(1, len(txn_sizes)))
    early = [c for c in changes if c.commit_ts <= ts(cut)]
    late = [c for c in changes if c.commit_ts > ts(cut)]
    return [batch(0, ts(cut), early)] + ([batch(ts(cut), ts(len(txn_sizes)), late)] if late else [])


@st.composite
def _batches(draw):
    return transactions_in_batches(draw, _change, 8)


_FILTERS = ["", '[[filter.event-filters]]\nmatcher = ["db.pk"]\nignore-insert-value-expr = "v = \'x\'"\n',
            '[[sink.column-selectors]]\nmatcher = ["db.uk"]\ncolumns = ["a", "b"]\n']


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_batches(), split_updates=st.booleans(), protocol=st.sampled_from(["canal-json", "csv"]),
       filter_toml=st.sampled_from(_FILTERS))
def test_any_batch_is_written_alike_by_both_paths(tmp_path_factory, batches, split_updates, protocol, filter_toml):
    write_both(tmp_path_factory.mktemp("both"), batches, protocol, split_updates, filter_toml)


class OneChunk:
    """The batch writer's view of a snapshot (BatchSnapshot) with one chunk placed at `commit_ts`."""

    def __init__(self, changes: list[RowChange], commit_ts: int):
        builder = PythonBatchBuilder()
        builder.add_changes(changes)
        self.rows, self.commit_ts, self.placed_ts = pa.Table.from_batches([builder.finish()]), commit_ts, []

    def wait_for_reads(self, end):
        pass

    def placements(self, start, end):
        return [Placement(None, self.commit_ts)] if start < self.commit_ts <= end else []

    def merge(self, table, placements):
        rows = self.rows.set_column(0, "commit_ts", pa.array([self.commit_ts] * self.rows.num_rows, pa.int64()))
        return pa.concat_tables([table, rows]) if placements else table

    def copying_tables(self):
        return frozenset({("db", "pk")})

    def placed(self, placements):
        self.placed_ts += [placement.commit_ts for placement in placements]


def test_snapshot_chunks_are_written_as_columns_unless_the_sink_marks_them(tmp_path):
    # The chunk's rows as the reader gives them (commit_ts is the read's chunk number); a stream
    # transaction before its place that netting changes (it moves the key), one after that it keeps.
    chunk = OneChunk([RowChange(0, "db", "pk", "insert", None, (str(i), f"c{i}", "x"), i) for i in range(1, 6)],
                     ts(2) + 1)
    stream = [upd(1, "pk", ("1", "c1", "x"), ("9", "c1", "x"), 0), ins(1, "pk", ("7", "c7", None), 1),
              ins(3, "pk", ("8", "c8", None), 0), ins(3, "pk", ("6", "c6", None), 1)]
    outputs, written = {}, {}
    for name, kind in (("rows", RowChangeSink), ("arrow", CountingSink)):
        sink = kind(f"file://{tmp_path / name}?protocol=canal-json&date-separator=none",
                    SinkConfig(protocol="canal-json", enable_tidb_extension=True), clock=lambda: NOW)
        result = write_batch(batch(0, ts(3), stream), FakeIndex(), sink, lambda s, t: True, lambda ts: None,
                             snapshot=chunk)
        sink.close()
        outputs[name], written[name] = files(tmp_path / name), result.rows
    assert outputs["arrow"] == outputs["rows"] and written["arrow"] == written["rows"]
    assert sink.arrow_rows == 2 + 5  # the chunk and the last transaction as columns; the key move the RowChange way
    assert sink.change_rows > 0
    assert chunk.placed_ts == [ts(2) + 1, ts(2) + 1]  # once per sink


def test_snapshot_rows_are_never_checked_for_netting_or_split():
    """Rows at a snapshot commit-ts are not checked: even a key on two of them and a key-moving
    update (which a chunk never has) keep them columnar, unless the sink marks snapshot rows."""
    changes = [ins(1, "pk", ("1", "a", "x"), 0), ins(1, "pk", ("1", "a", "y"), 1),
               upd(1, "pk", ("2", "b", "x"), ("3", "b", "x"), 2),
               ins(2, "pk", ("4", "d", None), 0), ins(2, "pk", ("4", "d", "z"), 1)]
    rows, [table] = tables_of(batch(0, ts(2), changes))
    tables = [(PK, table.low, table.low + table.rows.num_rows)]
    expected = [False, True, True, True, True, True]  # the range marker first, then both transactions
    assert list(rows_to_rewrite(rows, tables, True)) == expected
    assert list(rows_to_rewrite(rows, tables, True, frozenset({ts(1)}))) == [False] * 4 + [True, True]
    assert list(rows_to_rewrite(rows, tables, True, frozenset({ts(1)}), marks_snapshot=True)) == expected


@settings(max_examples=60, deadline=None)
@given(data=st.data(), split_updates=st.booleans())
def test_rows_to_rewrite_reads_chunked_and_sliced_columns_alike(data, split_updates):
    """The batch as Spark hands it over (several record batches, slices of larger ones) gives the
    same answer as one contiguous batch."""
    tables_batches = transactions_in_batches(data.draw, _change, 8)
    rows, groups = tables_of(pa.concat_tables(tables_batches))
    tables = [(TABLES[group.table], group.low, group.low + group.rows.num_rows) for group in groups]
    whole = rows_to_rewrite(rows.combine_chunks(), tables, split_updates)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, rows.num_rows), max_size=4))) | {0, rows.num_rows})
    padded = [pa.concat_tables([rows.slice(0, 1), rows.slice(low, high - low)]).combine_chunks().slice(1)
              for low, high in zip(cuts, cuts[1:])]  # each piece a slice whose list offsets do not start at 0
    chunked = pa.Table.from_batches([b for piece in padded for b in piece.to_batches()], rows.schema)
    assert chunked.num_rows == rows.num_rows
    assert list(rows_to_rewrite(chunked, tables, split_updates)) == list(whole)


def test_transaction_pieces_end_at_transaction_boundaries():
    import numpy as np
    from sparkcdc.pipeline.batch_sink import transaction_pieces

    commit_ts = np.array([1, 1, 1, 2, 3, 3, 3, 3, 3, 4, 5, 5])
    assert transaction_pieces(commit_ts, 2) == [(0, 3), (3, 4), (4, 9), (9, 10), (10, 12)]
    assert transaction_pieces(commit_ts, 4) == [(0, 4), (4, 9), (9, 12)]
    assert transaction_pieces(commit_ts, 100) == [(0, 12)]
    assert transaction_pieces(np.array([], dtype=np.int64), 4) == []
    # A snapshot's rows at one commit-ts are cut anywhere; the transactions around them are not.
    assert transaction_pieces(commit_ts, 2, frozenset({3})) == [(0, 3), (3, 5), (5, 7), (7, 9), (9, 10), (10, 12)]


def test_a_table_written_in_pieces_is_written_as_in_one(tmp_path, monkeypatch):
    import sparkcdc.pipeline.batch_sink as batch_sink

    monkeypatch.setattr(batch_sink, "WRITE_PIECE_ROWS", 3)
    changes = [ins(1, "pk", (str(i), f"c{i}", "x"), i) for i in range(1, 8)]  # longer than a piece
    changes += [upd(2, "pk", ("1", "c1", "x"), ("1", "c1", "y"), 0),
                upd(3, "pk", ("2", "c2", "x"), ("20", "c2", "x"), 0), ins(3, "pk", ("30", "c30", None), 1),  # moves a key
                dele(4, "pk", ("3", "c3", "x"), 0), ins(4, "pk", ("40", "c40", "z"), 1),
                ins(5, "pk", ("50", "c50", None), 0), ins(6, "uk", ("1", "1", "t"), 0)]
    for protocol in ("canal-json", "csv"):
        sink = write_both(tmp_path / protocol, [batch(0, ts(6), changes)], protocol, file_size=600)
        assert sink.arrow_rows == len(changes) - 2 and sink.change_rows > 0
