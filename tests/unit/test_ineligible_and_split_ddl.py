"""Tables without a valid index are not replicated unless force-replicate; multi-table DROP and
RENAME become one event per table; the sparkcdc-only skip-unparseable-ddl key."""

from __future__ import annotations

import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.errors import SparkCDCError
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.pipeline.planning import replicated_tables
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.catalog import Catalog
from sparkcdc.schema.rules import DDLPolicy, ErrRenameTableNotSupported, replicated_ddls
from sparkcdc.schema.store import SchemaStore

from test_pipeline_planning import FakeIndex, RecordingSink, batch_table

KEYED = TableInfo("db", "keyed", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),), 1, ("id",))
KEYLESS = TableInfo("db", "keyless", 2, (ColumnInfo("id", "int"),), 1, ())
OTHER = TableInfo("other", "keyed", 3, KEYED.columns, 1, ("id",))
ALL = TableFilter(["*.*"]).match_event


def test_source_decodes_only_tables_with_a_valid_index_unless_force_replicate():
    only_db = TableFilter(["db.*"]).match
    chosen, skipped = replicated_tables([KEYED, KEYLESS, OTHER], only_db, force_replicate=False)
    assert list(chosen) == ["db.keyed"] and skipped == [KEYLESS]
    chosen, skipped = replicated_tables([KEYED, KEYLESS, OTHER], only_db, force_replicate=True)
    assert list(chosen) == ["db.keyed", "db.keyless"] and skipped == []


@pytest.mark.parametrize("force,written", [(False, ["keyed"]), (True, ["keyed", "keyless"])])
def test_batch_writer_drops_rows_of_keyless_tables_unless_force_replicate(force, written):
    index = FakeIndex([], 30, tables=[KEYED, KEYLESS])
    table = batch_table([
        (20, 0, "db", "keyed", "insert", None, ["1"]),
        (20, 1, "db", "keyless", "insert", None, ["1"]),
        (30, 5, "", "", RANGE_MARKER, None, None),
    ])
    sink = RecordingSink()
    write_batch(table, index, sink, ALL, lambda ts: None, ddl_policy=DDLPolicy(force_replicate=force))
    assert [c[1] for c in sink.calls if c[0] == "rows"] == written


def store_with(*statements: str) -> SchemaStore:
    store = SchemaStore(Catalog(databases={"db": "utf8mb4", "x": "utf8mb4"}))
    for i, sql in enumerate(statements):
        assert store.apply(sql, "db", i + 1, "f:1").event.ddl_type != T.UNPARSEABLE, sql
    return store


@pytest.mark.parametrize("force,expected", [
    (False, ["DROP TABLE `db`.`a`"]),
    (True, ["DROP TABLE `db`.`a`", "DROP TABLE `db`.`b`"]),
])
def test_drop_of_two_tables_is_one_event_per_table_each_with_its_own_index_rule(force, expected):
    store = store_with("CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (v INT)")
    ddl = store.apply("DROP TABLE a, b", "db", 10, "f:2").event
    events = replicated_ddls(ddl, ALL, DDLPolicy(force_replicate=force))
    assert [e.query for e in events] == expected
    assert all(e.commit_ts == 10 and e.ddl_type == T.DROP_TABLE for e in events)
    assert events[0].table == "a" and events[0].pre_table_info.has_valid_index


def test_drop_if_exists_skips_tables_that_were_not_there():
    store = store_with("CREATE TABLE a (id INT PRIMARY KEY)")
    ddl = store.apply("DROP TABLE IF EXISTS a, nope", "db", 10, "f:2").event
    assert [e.query for e in replicated_ddls(ddl, ALL)] == ["DROP TABLE IF EXISTS `db`.`a`"]


def test_multi_rename_is_one_event_per_table_with_tables_own_infos():
    store = store_with("CREATE TABLE t1 (id INT PRIMARY KEY)", "CREATE TABLE t3 (id INT PRIMARY KEY, v INT)")
    ddl = store.apply("RENAME TABLE t1 TO t2, t3 TO t4", "db", 10, "f:2").event
    events = replicated_ddls(ddl, TableFilter(["db.t*"]).match_event)
    assert [e.query for e in events] == ["RENAME TABLE `db`.`t1` TO `db`.`t2`", "RENAME TABLE `db`.`t3` TO `db`.`t4`"]
    assert [(e.schema, e.table) for e in events] == [("db", "t2"), ("db", "t4")]
    assert events[1].table_info.column_names == ("id", "v") and events[1].pre_table_info.table == "t3"
    assert events[0].extra["renames"] == [["db", "t1", "db", "t2"]]


def test_multi_rename_rule_applies_to_the_whole_statement_before_splitting():
    store = store_with("CREATE TABLE t1 (id INT PRIMARY KEY)", "CREATE TABLE t2 (id INT PRIMARY KEY)")
    ddl = store.apply("RENAME TABLE t1 TO x.t1, t2 TO t22", "db", 10, "f:2").event
    with pytest.raises(ErrRenameTableNotSupported):
        replicated_ddls(ddl, TableFilter(["db.t*"]).match_event)
    store = store_with("CREATE TABLE t1 (id INT PRIMARY KEY)", "CREATE TABLE t2 (id INT PRIMARY KEY)")
    ddl = store.apply("RENAME TABLE t1 TO x.t1, t2 TO x.t2", "db", 10, "f:2").event
    assert replicated_ddls(ddl, TableFilter(["other.*"]).match_event) == []


def test_multi_rename_without_valid_index_follows_force_replicate():
    store = store_with("CREATE TABLE t1 (v INT)", "CREATE TABLE t3 (id INT PRIMARY KEY)")
    ddl = store.apply("RENAME TABLE t1 TO t2, t3 TO t4", "db", 10, "f:2").event
    assert [e.table for e in replicated_ddls(ddl, ALL)] == ["t4"]
    assert [e.table for e in replicated_ddls(ddl, ALL, DDLPolicy(force_replicate=True))] == ["t2", "t4"]


def test_skip_unparseable_ddl_is_a_sparkcdc_config_key():
    assert parse_replica_config("").skip_unparseable_ddl is False
    assert parse_replica_config("skip-unparseable-ddl = true\n").skip_unparseable_ddl is True
    with pytest.raises(SparkCDCError, match="skip-unparseable-ddl"):
        parse_replica_config('skip-unparseable-ddl = "yes"\n')
