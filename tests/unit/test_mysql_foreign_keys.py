"""Foreign-key cascades on a MySQL sink (sink/mysql/foreign_keys.py): which tables go in binlog
order, which statements run with foreign_key_checks on, what a replay skips, and how the batch
writer hands those tables over (pipeline/batch_sink.ordered_transactions); the warnings for
other sinks (filter/eligibility.py)."""

from __future__ import annotations

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.filter.eligibility import cascaded_tables, declares_cascade, describe_cascade
from sparkcdc.model.events import FK_CHECKS_OFF, ColumnInfo, ForeignKey, RowChange, TableInfo
from sparkcdc.model.position import BinlogPosition
from sparkcdc.pipeline.batch_sink import ordered_transactions
from sparkcdc.sink.contract import Sink
from sparkcdc.sink.mysql.foreign_keys import CHECKS_OFF, CHECKS_ON, CascadeGroups, OrderedWork, Progress, plan_in_order
from sparkcdc.sink.mysql.sql import PlanOptions
from sparkcdc.upstream.txn_index import TxnRecord
from test_pipeline_planning import FakeIndex  # the planning tests' index

KEYS = [
    ForeignKey("db", "child", "fk_c", ("pid",), "db", "parent", ("id",), on_delete="CASCADE"),
    ForeignKey("db", "grandchild", "fk_g", ("cid",), "db", "child", ("id",)),  # RESTRICT, linked to a cascade
    ForeignKey("db", "t6", "fk_r", ("id",), "db", "t5", ("id",), "RESTRICT", "RESTRICT"),  # no cascade at all
    ForeignKey("db", "t4", "fk_n", ("b",), "db", "t3", ("id",), "SET NULL", "SET NULL"),
]


def table(name: str) -> TableInfo:
    return TableInfo("db", name, 1, (ColumnInfo("id", "int", is_primary_key=True), ColumnInfo("v", "int")), 1, ("id",))


def test_groups_hold_every_table_linked_to_a_cascade_and_only_parents_cascade():
    groups = CascadeGroups(KEYS)
    assert [name for name in ("parent", "child", "grandchild", "t3", "t4", "t5", "t6", "other")
            if groups.ordered("db", name)] == ["parent", "child", "grandchild", "t3", "t4"]
    assert groups.cascades(table("parent"), "delete") and not groups.cascades(table("parent"), "update")
    assert groups.cascades(table("t3"), "update") and groups.cascades(table("t3"), "delete")
    assert not groups.cascades(table("child"), "delete") and not groups.cascades(table("parent"), "insert")


def row(name: str, op: str, seq: int, before=None, after=None) -> tuple[TableInfo, RowChange]:
    return table(name), RowChange(7, "db", name, op, before, after, seq)


CHANGES = (
    row("parent", "insert", 0, after=("1", "1")), row("parent", "insert", 1, after=("2", "2")),
    row("child", "insert", 2, after=("5", "1")),
    row("parent", "delete", 3, before=("1", "1")),
    row("parent", "update", 4, before=("2", "2"), after=("2", "3")),
    row("child", "insert", 5, after=("6", "2")),
)


def test_changes_apply_one_by_one_in_binlog_order_with_checks_on_for_cascading_parents():
    groups = CascadeGroups(KEYS)
    statements = plan_in_order(CHANGES, PlanOptions(), groups.cascades)
    assert [s.sql for s in statements] == [
        "INSERT INTO `db`.`parent` (`id`,`v`) VALUES (?,?),(?,?)",
        "INSERT INTO `db`.`child` (`id`,`v`) VALUES (?,?)",
        CHECKS_ON.sql, "DELETE FROM `db`.`parent` WHERE `id` = ? LIMIT 1", CHECKS_OFF.sql,
        "UPDATE `db`.`parent` SET `id` = ?, `v` = ? WHERE `id` = ? LIMIT 1",  # parent has no ON UPDATE action
        "INSERT INTO `db`.`child` (`id`,`v`) VALUES (?,?)",
    ]


def test_idempotent_writes_upsert_in_place_and_never_replace():
    statements = plan_in_order(CHANGES, PlanOptions(split_updates=True, use_replace=True), lambda t, op: False)
    texts = [s.sql for s in statements]
    assert not any("REPLACE" in text for text in texts)
    assert texts[0].endswith("ON DUPLICATE KEY UPDATE `id`=VALUES(`id`), `v`=VALUES(`v`)")
    assert texts[3:5] == ["UPDATE `db`.`parent` SET `id` = ?, `v` = ? WHERE `id` = ? LIMIT 1",
                          "INSERT INTO `db`.`parent` (`id`,`v`) VALUES (?,?) ON DUPLICATE KEY UPDATE "
                          "`id`=VALUES(`id`), `v`=VALUES(`v`)"]


def test_a_transaction_the_upstream_ran_without_checks_cascades_nothing_and_records_its_progress():
    work = OrderedWork("cf@t", 7, BinlogPosition("mysql-bin.000002", 900), FK_CHECKS_OFF, CHANGES, CascadeGroups(KEYS))
    statements = work.plan(PlanOptions())
    assert CHECKS_ON not in statements
    assert statements[-1].sql.startswith("INSERT INTO tidb_cdc.ordered_progress")
    assert statements[-1].args == ("cf@t", "mysql-bin.000002", 900, 5, 7)


def test_progress_skips_what_is_downstream():
    progress = Progress(BinlogPosition("mysql-bin.000002", 900), 3)
    assert progress.pending(BinlogPosition("mysql-bin.000001", 5000), CHANGES) == []
    assert progress.pending(BinlogPosition("mysql-bin.000002", 800), CHANGES) == []
    assert [r.seq for _, r in progress.pending(BinlogPosition("mysql-bin.000002", 900), CHANGES)] == [4, 5]
    assert progress.pending(BinlogPosition("mysql-bin.000003", 4), CHANGES) == list(CHANGES)
    assert progress.pending(BinlogPosition("other-bin.000001", 4), CHANGES) == list(CHANGES)


class _Index:
    def __init__(self, records):
        self.records = {r.commit_ts: r for r in records}

    def txns_at(self, commit_ts):
        return {ts: self.records[ts] for ts in set(commit_ts) if ts in self.records}


def test_the_batch_writer_merges_tables_by_commit_ts_and_seq():
    parent, child = table("parent"), table("child")
    rows = {
        "parent": [RowChange(10, "db", "parent", "insert", after=("1", "1"), seq=0),
                   RowChange(20, "db", "parent", "delete", before=("1", "1"), seq=1)],
        "child": [RowChange(10, "db", "child", "insert", after=("5", "1"), seq=1),
                  RowChange(20, "db", "child", "insert", after=("6", "1"), seq=0)],
    }
    position = BinlogPosition("mysql-bin.000001", 4)
    index = _Index([TxnRecord(10, None, position, BinlogPosition("mysql-bin.000001", 100), 96, False),
                    TxnRecord(20, None, position, BinlogPosition("mysql-bin.000001", 200), 96, False,
                              foreign_key_checks=FK_CHECKS_OFF)])
    transactions = ordered_transactions([(parent, rows["parent"]), (child, rows["child"])], index)
    assert [(t.commit_ts, t.end_position, t.foreign_key_checks) for t in transactions] == \
        [(10, "mysql-bin.000001:100", "on"), (20, "mysql-bin.000001:200", "off")]
    assert [[(info.table, r.seq) for info, r in t.changes] for t in transactions] == \
        [[("parent", 0), ("child", 1)], [("child", 0), ("parent", 1)]]


def test_other_sinks_are_warned_about_replicated_tables_that_cascades_change():
    config = ReplicaConfig()
    config.filter.rules = ["db.*", "!db.t4"]
    assert list(cascaded_tables(KEYS, config)) == [("db", "child")]
    assert describe_cascade(KEYS[0]) == "FOREIGN KEY fk_c (pid) REFERENCES db.parent (id) ON DELETE CASCADE"
    assert declares_cascade("ALTER TABLE t11 ADD CONSTRAINT fk_6 FOREIGN KEY (b) REFERENCES t10 (id) on update\nset null")
    assert not declares_cascade("CREATE TABLE t6 (id INT, FOREIGN KEY (id) REFERENCES t5 (id) ON DELETE RESTRICT)")


def test_the_puller_records_how_each_transaction_ran_foreign_key_checks(tmp_path):
    from sparkcdc.upstream.puller import _OpenTxn
    from sparkcdc.upstream.txn_index import TxnIndex

    def txn(*flags):
        open_txn = _OpenTxn("0-1-1", BinlogPosition("mysql-bin.000001", 4))
        for flags_of_event in flags:  # 0x0002: NO_FOREIGN_KEY_CHECKS_F
            open_txn.see_rows(7, flags_of_event, BinlogPosition("mysql-bin.000001", 50), piece_bytes=1 << 30)
        return open_txn.foreign_key_checks

    assert (txn(), txn(0x1), txn(0x3, 0x2), txn(0x2, 0x1)) == ("on", "on", "off", "mixed")
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    start = BinlogPosition("mysql-bin.000001", 4)
    index.bootstrap(start, 1, [], [], {}, "utf8mb4")
    index.append([TxnRecord(ts, None, start, BinlogPosition("mysql-bin.000001", ts), 1, False, foreign_key_checks=fk)
                  for ts, fk in ((5, "on"), (6, "off"), (7, "mixed"))], [], [], 7)
    assert {ts: r.foreign_key_checks for ts, r in index.txns_at([5, 6, 7, 8]).items()} == \
        {5: "on", 6: "off", 7: "mixed"}


class _BatchIndex(FakeIndex, _Index):
    """What write_batch reads of the index, with the transactions `txns_at` finds."""

    def __init__(self, tables, records):
        FakeIndex.__init__(self, [], 20, tables=tables)
        _Index.__init__(self, records)


class _OrderingSink(Sink):
    """Keeps `ordered` tables in binlog order, as the MySQL sink does for cascade groups."""

    def __init__(self, ordered):
        self.ordered, self.calls = set(ordered), []

    def keeps_binlog_order(self, info):
        return info.table in self.ordered

    def write_ordered(self, transactions):
        self.calls.append(("ordered", [[(info.table, r.op, r.seq) for info, r in t.changes] for t in transactions]))

    def write_rows(self, info, rows):
        self.calls.append(("rows", info.table, [(r.op, r.seq) for r in rows]))

    def write_ddl(self, ddl):
        self.calls.append(("ddl",))

    def flush(self):
        self.calls.append(("flush",))

    def write_checkpoint(self, ts):
        self.calls.append(("checkpoint", ts))
        return ts


def test_write_batch_hands_ordered_tables_over_unnetted_in_binlog_order():
    from sparkcdc.pipeline.batch_sink import write_batch
    from sparkcdc.model.change_batch import RANGE_MARKER
    from test_pipeline_planning import batch_table

    position = BinlogPosition("mysql-bin.000001", 4)
    index = _BatchIndex([table("parent"), table("child"), table("other")],
                  [TxnRecord(ts, None, position, BinlogPosition("mysql-bin.000001", ts * 10), 1, False)
                   for ts in (10, 20)])
    batch = batch_table([
        (20, 9, "", "", RANGE_MARKER, None, None),
        (10, 0, "db", "parent", "insert", None, ["1", "1"]),
        (10, 1, "db", "child", "insert", None, ["5", "1"]),
        (10, 2, "db", "parent", "delete", ["1", "1"], None),  # netting would drop the pair above
        (10, 3, "db", "other", "insert", None, ["1", "1"]),
        (10, 4, "db", "other", "update", ["1", "1"], ["1", "2"]),
        (20, 0, "db", "child", "delete", ["5", "1"], None),
    ])
    sink = _OrderingSink({"parent", "child"})
    write_batch(batch, index, sink, lambda s, t: True, lambda ts: None)
    assert sink.calls == [
        ("rows", "other", [("insert", 3)]),  # netted: the insert with the update's values
        ("ordered", [[("parent", "insert", 0), ("child", "insert", 1), ("parent", "delete", 2)],
                     [("child", "delete", 0)]]),
        ("flush",), ("checkpoint", 20),
    ]


def test_with_a_redo_log_ordered_tables_are_logged_netted_and_reach_the_sink_once_durable():
    from sparkcdc.pipeline.batch_sink import write_batch
    from sparkcdc.model.change_batch import RANGE_MARKER
    from test_pipeline_planning import batch_table
    from test_redo import RecordingRedo

    position = BinlogPosition("mysql-bin.000001", 4)
    index = _BatchIndex([table("parent"), table("other")],
                  [TxnRecord(10, None, position, BinlogPosition("mysql-bin.000001", 100), 1, False)])
    batch = batch_table([
        (20, 9, "", "", RANGE_MARKER, None, None),
        (10, 0, "db", "parent", "insert", None, ["1", "1"]),
        (10, 1, "db", "parent", "update", ["1", "1"], ["1", "2"]),
        (10, 2, "db", "other", "insert", None, ["1", "1"]),
    ])
    sink = _OrderingSink({"parent"})
    write_batch(batch, index, sink, lambda s, t: True, lambda ts: None, redo=RecordingRedo(sink.calls))
    assert sink.calls[sink.calls.index(("redo-durable", 20)):] == [
        ("redo-durable", 20), ("rows", "other", [("insert", 2)]),
        ("ordered", [[("parent", "insert", 0), ("parent", "update", 1)]]),
        ("flush",), ("checkpoint", 20), ("redo-checkpoint", 20)]
    assert ("redo-rows", "parent", 1) in sink.calls  # netted: one insert with the update's values
