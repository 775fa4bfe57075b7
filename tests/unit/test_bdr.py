"""Bidirectional replication without a server: the transaction index's mark, the planner dropping
marked transactions, the batch writer's DDL rules by BDR role, and the config and sink checks."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.errors import ErrBDRDDLRefused, ErrInvalidReplicaConfig, ErrSinkURIInvalid
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.model.events import ColumnInfo, DDLEvent, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.pipeline.planning import (
    BatchOffset,
    MarkerPartition,
    RangePartition,
    SourceOptions,
    batch_marker,
    plan_next_batch,
    plan_partitions,
    split_ranges,
)
from sparkcdc.schema.bdr import bdr_ddls, non_replicable_reason
from sparkcdc.schema.rules import DDLPolicy
from sparkcdc.schema.store import SchemaStore
from sparkcdc.schema.catalog import Catalog
from sparkcdc.sink.registry import parse_sink_spec
from sparkcdc.upstream.txn_index import PieceStart, TxnIndex, TxnRecord, TxnSize
from test_pipeline_planning import RecordingSink, batch_table

FILE = "mysql-bin.000001"
INFO = TableInfo("db", "t", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),
                                ColumnInfo("v", "int")), 1, ("id",))


def txn(ts: int, marked: bool = False, ddl: bool = False, size: int = 100, pieces: tuple = ()) -> TxnRecord:
    start = ts * 1000
    return TxnRecord(ts, f"0-1-{ts}", BinlogPosition(FILE, start), BinlogPosition(FILE, start + size), size, ddl,
                     pieces, skip_replication=marked)


def make_index(tmp_path, txns, resolved, ddls=()) -> TxnIndex:
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    index.bootstrap(BinlogPosition(FILE, 4), 1, [INFO])
    index.append(txns, list(ddls), [], resolved)
    return index


def options(bdr_mode: bool) -> SourceOptions:
    return SourceOptions(index_path="x", upstream_uri="mysql://u@h:3306/", start_ts=0, parallelism=4,
                         bdr_mode=bdr_mode)


def read_commit_ts(partitions) -> list[int]:
    """The commit-ts the executors would decode, in order, checking each range is contiguous binlog."""
    stamps = []
    for partition in partitions:
        if isinstance(partition, RangePartition):
            stamps.extend(partition.binlog_range.commit_ts)
    return stamps


# -- planning: marked transactions are never read, the batch still ends where it would ------------

def test_a_bdr_changefeed_reads_around_marked_transactions_and_its_batch_still_covers_them(tmp_path):
    index = make_index(tmp_path, [txn(10), txn(20, marked=True), txn(30), txn(40), txn(50, marked=True),
                                  txn(60, marked=True), txn(70)], resolved=80)
    end, _ = plan_next_batch(index, BatchOffset(0), 0, 1 << 30, drop_marked=True)
    assert end == BatchOffset(80)
    marker, partitions = batch_marker(plan_partitions(index, options(bdr_mode=True), 0, 80, set()))
    assert marker == MarkerPartition(0, 80)
    assert read_commit_ts(partitions) == [10, 30, 40, 70]
    for partition in partitions:
        rng = partition.binlog_range
        # One contiguous stretch of binlog: from its first transaction's start to its last one's end.
        assert (rng.start.pos, rng.end.pos) == (rng.commit_ts[0] * 1000, rng.commit_ts[-1] * 1000 + 100)
        assert not set(rng.commit_ts) & {20, 50, 60}
    # Any other changefeed of the capture reads everything.
    assert read_commit_ts(plan_partitions(index, options(bdr_mode=False), 0, 80, set())) == [10, 20, 30, 40, 50, 60, 70]


def test_a_batch_of_marked_transactions_only_moves_the_checkpoint(tmp_path):
    index = make_index(tmp_path, [txn(10, marked=True), txn(20, marked=True)], resolved=25)
    assert plan_partitions(index, options(bdr_mode=True), 0, 25, set()) == [MarkerPartition(0, 25)]


def test_a_marked_large_transaction_costs_a_bdr_batch_nothing(tmp_path):
    big = txn(20, marked=True, size=30_000, pieces=(PieceStart(21_000 + 10_000, (21_000,)),
                                                    PieceStart(21_000 + 20_000, (21_000,))))
    index = make_index(tmp_path, [txn(10), big, txn(60)], resolved=70)
    # Its pieces would cut the batch (10 kB each against 15 kB), but it is not read at all.
    assert plan_next_batch(index, BatchOffset(0), 0, 15_000, drop_marked=True) == (BatchOffset(70), False)
    assert plan_next_batch(index, BatchOffset(0), 0, 15_000)[0] == BatchOffset(20, 1)
    assert read_commit_ts(plan_partitions(index, options(bdr_mode=True), 0, 70, set())) == [10, 60]


@given(st.lists(st.sampled_from(["dml", "ddl", "marked"]), max_size=40), st.integers(1, 8))
def test_split_ranges_drops_marked_transactions_and_no_run_spans_one(kinds, parts):
    txns = [TxnSize(i + 1, 50 + i, False, kind == "ddl", kind == "marked") for i, kind in enumerate(kinds)]
    runs = split_ranges(txns, parts, drop_marked=True)
    assert [t for run in runs for t in run] == [t for t in txns if not (t.is_ddl or t.skip_replication)]
    for run in runs:
        stamps = [t.commit_ts for t in run]
        assert stamps == list(range(stamps[0], stamps[0] + len(stamps))), "a run spans a DDL or a marked transaction"


# -- the batch writer: the peer's DDLs are dropped, the upstream's own go by the BDR role -------------

ADD_NULLABLE = DDLEvent(30, "db", "t", "ALTER TABLE t ADD COLUMN c INT NULL", "add column", INFO, INFO,
                        {"default_schema": "db"})
DROP_COLUMN = DDLEvent(30, "db", "t", "ALTER TABLE t DROP COLUMN v", "drop column", INFO, INFO,
                       {"default_schema": "db"})


def run_batch(tmp_path, ddl: DDLEvent, marked: bool, policy: DDLPolicy):
    index = make_index(tmp_path, [txn(10), txn(30, ddl=True, marked=marked)], resolved=30, ddls=[ddl])
    sink, checkpoints = RecordingSink(), []
    table = batch_table([(10, 0, "db", "t", "insert", None, ["1", "0"]), (30, 5, "", "", RANGE_MARKER, None, None)])
    try:
        write_batch(table, index, sink, lambda s, t: True, checkpoints.append, ddl_policy=policy)
    finally:
        assert sink.calls[:2] == [("rows", "t", [(10, 0)]), ("flush",)]  # the rows before the DDL are downstream first
    return sink.calls[2:], checkpoints


def test_the_peers_ddl_is_dropped_and_the_checkpoint_moves(tmp_path):
    calls, checkpoints = run_batch(tmp_path, ADD_NULLABLE, True, DDLPolicy(bdr_mode=True, bdr_role="primary"))
    assert calls == [("checkpoint", 30)] and checkpoints == [30]


def test_a_primarys_replicable_ddl_is_replicated(tmp_path):
    calls, checkpoints = run_batch(tmp_path, ADD_NULLABLE, False, DDLPolicy(bdr_mode=True, bdr_role="primary"))
    assert calls == [("ddl", ADD_NULLABLE.query), ("flush",), ("checkpoint", 30)] and checkpoints == [30]


def test_without_a_role_no_ddl_is_replicated(tmp_path):
    calls, checkpoints = run_batch(tmp_path, DROP_COLUMN, False, DDLPolicy(bdr_mode=True))
    assert calls == [("checkpoint", 30)] and checkpoints == [30]


@pytest.mark.parametrize("role, ddl, says", [
    ("primary", DROP_COLUMN, "DROP COLUMN is a non-replicable DDL"),
    ("secondary", ADD_NULLABLE, "a secondary runs no DDL"),
])
def test_a_ddl_the_role_forbids_fails_the_changefeed_before_its_checkpoint(tmp_path, role, ddl, says):
    with pytest.raises(ErrBDRDDLRefused) as info:
        run_batch(tmp_path, ddl, False, DDLPolicy(bdr_mode=True, bdr_role=role))
    assert says in info.value.message and "bdr-role" in info.value.message
    assert ErrBDRDDLRefused.retryable is False


def test_outside_bdr_mode_a_marked_ddl_is_replicated(tmp_path):
    calls, _ = run_batch(tmp_path, DROP_COLUMN, True, DDLPolicy())
    assert ("ddl", DROP_COLUMN.query) in calls


# -- which DDLs are replicable (TiDB's lists), as the schema store records them ---------------------

def events_of(*queries: str) -> list[DDLEvent]:
    store = SchemaStore(Catalog("utf8mb4", {"db": "utf8mb4"}, {}))
    store.apply("CREATE TABLE t (id INT PRIMARY KEY, v INT NULL DEFAULT 1, w VARCHAR(10), KEY kw (w))", "db", 1, "p")
    return [store.apply(query, "db", 2 + n, "p").event for n, query in enumerate(queries)]


@pytest.mark.parametrize("query", [
    "CREATE DATABASE d2",
    "CREATE TABLE t2 (id INT PRIMARY KEY)",
    "CREATE VIEW vw AS SELECT id FROM t",
    "ALTER TABLE t ADD COLUMN a INT",
    "ALTER TABLE t ADD COLUMN a INT NOT NULL DEFAULT 0",
    "ALTER TABLE t ADD INDEX kv (v)",
    "CREATE INDEX kv ON t (v)",
    "ALTER TABLE t DROP INDEX kw",
    "ALTER TABLE t ALTER COLUMN v SET DEFAULT 5",
    "ALTER TABLE t MODIFY COLUMN v INT NULL DEFAULT 7 COMMENT 'seven'",
    "ALTER TABLE t COMMENT = 'a table'",
    "ALTER TABLE t RENAME INDEX kw TO kw2",
    "ALTER TABLE t ADD COLUMN a INT, ADD INDEX ka (a)",
    "ALTER TABLE t DROP PRIMARY KEY",
])
def test_replicable_ddls(query):
    (event,) = events_of(query)
    assert non_replicable_reason(event) is None, event.ddl_type


@pytest.mark.parametrize("query, says", [
    ("DROP TABLE t", "DROP TABLE"),
    ("TRUNCATE TABLE t", "TRUNCATE TABLE"),
    ("RENAME TABLE t TO t3", "RENAME TABLE"),
    ("DROP DATABASE db", "DROP DATABASE"),
    ("ALTER TABLE t DROP COLUMN w", "DROP COLUMN"),
    ("ALTER TABLE t ADD COLUMN a INT NOT NULL", "NOT NULL without a default"),
    ("ALTER TABLE t ADD COLUMN a INT UNIQUE", "as a key"),
    ("ALTER TABLE t ADD UNIQUE KEY uv (v)", "unique key"),
    ("CREATE UNIQUE INDEX uv ON t (v)", "unique key"),
    ("ALTER TABLE t MODIFY COLUMN v BIGINT", "beyond its default"),
    ("ALTER TABLE t MODIFY COLUMN v INT NOT NULL DEFAULT 1", "beyond its default"),
    ("ALTER TABLE t MODIFY COLUMN v INT NULL DEFAULT 1 FIRST", "moves column"),
    ("ALTER TABLE t CHANGE COLUMN v v2 INT", "renames column"),
    ("ALTER TABLE t AUTO_INCREMENT = 100", "REBASE AUTO ID"),
    ("ALTER TABLE t ADD COLUMN a INT, AUTO_INCREMENT = 100", "AUTO_INCREMENT"),
    ("ALTER TABLE t ADD COLUMN a INT, DROP COLUMN w", "DropColumn"),
    ("ALTER TABLE t CONVERT TO CHARACTER SET latin1", "CHARSET"),
])
def test_non_replicable_ddls(query, says):
    (event,) = events_of(query)
    reason = non_replicable_reason(event)
    assert reason is not None and says.lower() in reason.lower(), (event.ddl_type, reason)


def test_no_ddls_is_no_error_whatever_the_role():
    assert bdr_ddls([], "secondary") == []


# -- config and sink kinds ------------------------------------------------------------------------

def test_bdr_mode_and_role_parse_and_a_role_needs_bdr_mode():
    config = parse_replica_config('bdr-mode = true\nbdr-role = "primary"')
    assert (config.bdr_mode, config.bdr_role) == (True, "primary")
    with pytest.raises(ErrInvalidReplicaConfig, match="bdr-mode"):
        parse_replica_config('bdr-role = "secondary"')
    with pytest.raises(ErrInvalidReplicaConfig, match="bdr-role"):
        parse_replica_config('bdr-mode = true\nbdr-role = "leader"')


@pytest.mark.parametrize("uri", ["kafka://127.0.0.1:9092/topic?protocol=canal-json",
                                 "file:///tmp/cdc?protocol=canal-json", "blackhole://"])
def test_bdr_mode_is_refused_for_sinks_other_than_mysql(uri):
    with pytest.raises(ErrSinkURIInvalid) as info:
        parse_sink_spec(uri, parse_replica_config("bdr-mode = true"))
    assert "bdr-mode works only with MySQL sinks" in info.value.message


def test_a_bdr_mysql_sink_marks_its_sessions():
    spec = parse_sink_spec("mysql://u:secret@127.0.0.1:3306/", parse_replica_config("bdr-mode = true"))
    assert spec.settings.bdr_mode and spec.kind.check_bdr is not None
    assert not parse_sink_spec("mysql://u@127.0.0.1:3306/", parse_replica_config("")).settings.bdr_mode
