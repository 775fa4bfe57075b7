"""TiCDC's DDL allow list (every row, three columns), the rename tables row by row, unparseable DDLs."""

import pytest

from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.events import ColumnInfo, DDLEvent, TableInfo
from sparkcdc.schema import ddl_types as T
from sparkcdc.errors import ErrExchangePartition
from sparkcdc.schema.rules import (
    DDLPolicy,
    ErrDDLUnparseable,
    ErrRenameTableNotSupported,
    net_renames,
    replicated_ddls,
    should_replicate,
)
from sparkcdc.schema.store import SchemaStore
from sparkcdc.schema.catalog import Catalog

WITH_INDEX = TableInfo("test", "t1", 1, (ColumnInfo("id", "int", nullable=False, is_primary_key=True),), 1, ("id",))
WITHOUT_INDEX = TableInfo("test", "t1", 1, (ColumnInfo("id", "int"),), 1, ())
ALL = TableFilter(["*.*"]).match_event


@pytest.mark.parametrize("ddl_type,row", sorted(T.ALLOW_LIST.items()))
def test_allow_list_every_row_and_column(ddl_type, row):
    table = "" if ddl_type in T.DATABASE_DDLS else "t1"
    got = []
    for info, force in ((WITH_INDEX, False), (WITHOUT_INDEX, False), (WITHOUT_INDEX, True)):
        ddl = DDLEvent(10, "test", table, "q", ddl_type, table_info=info)
        got.append(should_replicate(ddl, ALL, DDLPolicy(force_replicate=force)))
    assert tuple(got) == row


@pytest.mark.parametrize("ddl_type", [T.ALTER_TABLE, T.OTHER])
def test_types_outside_the_allow_list_never_replicate(ddl_type):
    assert not should_replicate(DDLEvent(10, "test", "t1", "q", ddl_type, table_info=WITH_INDEX), ALL)


def rename_event(query):
    """The store's event for `query`, every table it renames there before it."""
    from sparkcdc.schema.catalog import IndexDef, TableDef
    from sparkcdc.schema.parser import parse

    catalog, made = Catalog(), set()
    for old, new in parse(query, "test").rename_pairs:
        if (old.schema, old.table) not in made:  # not a name an earlier step of the statement made
            catalog.tables[(old.schema, old.table)] = TableDef(
                old.schema, old.table, (ColumnInfo("id", "int", nullable=False),), (IndexDef("PRIMARY", "primary", ("id",)),))
        made.add((new.schema, new.table))
    return SchemaStore(catalog).apply(query, "test", 10, "test").event


FILTER = TableFilter(["test.t*"]).match_event


@pytest.mark.parametrize("query,expected", [
    ("RENAME TABLE test.t1 TO test.t2", True),
    ("RENAME TABLE test.t1 TO ignore.t1", True),
    ("RENAME TABLE ignore.t1 TO ignore.t2", False),
    ("RENAME TABLE test.n1 TO test.t1", "error"),
    ("RENAME TABLE ignore.t1 TO test.t1", "error"),
    ("RENAME TABLE test.t1 TO test.t2, test.t3 TO test.t4", True),
    ("RENAME TABLE test.t1 TO test.ignore1, test.t3 TO test.ignore2", True),
    ("RENAME TABLE test.t1 TO ignore.t1, test.t2 TO test.t22", "error"),
    # The document's swap: TiCDC's new architecture replicates it, every step in order.
    ("RENAME TABLE test.t1 TO test.t4, test.t3 TO test.t1, test.t4 TO test.t3", True),
    # common_1's chain, and a swap through a temporary name the filter does not match.
    ("RENAME TABLE test.t1 TO test.t4, test.t2 TO test.t1, test.t3 TO test.t2", True),
    ("RENAME TABLE test.t1 TO test.tmp_x, test.t2 TO test.t1, test.tmp_x TO test.t2", True),
    ("RENAME TABLE test.t1 TO test.x, test.t2 TO test.t1, test.x TO test.t2", True),
    ("RENAME TABLE ignore.a TO ignore.b, ignore.c TO ignore.a", False),
    # A table from outside the filter takes a replicated name: its rows never reached the sink.
    ("RENAME TABLE test.t1 TO test.t9, ignore.n TO test.t1", "error"),
])
def test_rename_rules_from_the_ddl_document(query, expected):
    ddl = rename_event(query)
    if expected == "error":
        with pytest.raises(ErrRenameTableNotSupported):
            should_replicate(ddl, FILTER, DDLPolicy(force_replicate=True))
    else:
        assert should_replicate(ddl, FILTER, DDLPolicy(force_replicate=True)) is expected


def test_net_renames_follow_the_steps_in_order():
    swap = [("d", "a", "d", "tmp"), ("d", "b", "d", "a"), ("d", "tmp", "d", "b")]
    assert sorted(net_renames(swap)) == [(("d", "a"), ("d", "b")), (("d", "b"), ("d", "a"))]
    chain = [("d", "t1", "d", "t4"), ("d", "t2", "d", "t1"), ("d", "t3", "d", "t2")]
    assert sorted(net_renames(chain)) == [(("d", "t1"), ("d", "t4")), (("d", "t2"), ("d", "t1")),
                                          (("d", "t3"), ("d", "t2"))]
    assert net_renames([("d", "a", "d", "b"), ("d", "b", "e", "c")]) == [(("d", "a"), ("e", "c"))]


def test_a_swap_through_a_temporary_name_goes_downstream_step_by_step():
    store = SchemaStore(Catalog())
    for query in ("CREATE TABLE a (id INT PRIMARY KEY, x INT)", "CREATE TABLE b (id INT PRIMARY KEY, y TEXT)"):
        store.apply(query, "test", 1, "p")
    event = store.apply("RENAME TABLE a TO tmp, b TO a, tmp TO b", "test", 2, "p").event
    only_ab = TableFilter(["test.a", "test.b"]).match_event
    parts = replicated_ddls(event, only_ab)
    assert [p.query for p in parts] == ["RENAME TABLE `test`.`a` TO `test`.`tmp`", "RENAME TABLE `test`.`b` TO `test`.`a`",
                                        "RENAME TABLE `test`.`tmp` TO `test`.`b`"]
    # Each step carries the definition it moves (the storage sink writes it under the new name).
    assert [(p.pre_table_info.table, p.table_info.table, p.table_info.columns[1].name) for p in parts] == [
        ("a", "tmp", "x"), ("b", "a", "y"), ("tmp", "b", "x")]


@pytest.mark.parametrize("query", [
    "ALTER TABLE t1 EXCHANGE PARTITION p0 WITH TABLE t2",
    "ALTER TABLE t1 CONVERT PARTITION p0 TO TABLE t2",
    "ALTER TABLE t1 CONVERT TABLE t2 TO PARTITION p9 VALUES LESS THAN (90)",
])
def test_partition_ddls_that_move_rows_need_both_tables_in_the_filter(query):
    store = SchemaStore(Catalog())
    store.apply("CREATE TABLE t1 (a INT PRIMARY KEY) PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (10))",
                "test", 1, "p")
    if "CONVERT PARTITION" not in query:
        store.apply("CREATE TABLE t2 (a INT PRIMARY KEY)", "test", 2, "p")
    event = store.apply(query, "test", 3, "p").event
    assert event.ddl_type != T.UNPARSEABLE and event.extra["partner"] == ["test", "t2"]
    assert "`test`.`t1`" in event.query and "`test`.`t2`" in event.query  # both named in full
    assert should_replicate(event, TableFilter(["test.*"]).match_event)
    assert not should_replicate(event, TableFilter(["other.*"]).match_event)
    for one_side in (["test.t1"], ["test.t2"]):
        with pytest.raises(ErrExchangePartition, match="moves rows between"):
            should_replicate(event, TableFilter(one_side).match_event)


def test_unparseable_ddl_stops_the_changefeed_unless_skipped():
    store = SchemaStore(Catalog())
    outcome = store.apply("ALTER TABLE t FROBNICATE", "db", 77, "mysql-bin.000003:1234")
    ddl = outcome.event
    assert ddl.ddl_type == T.UNPARSEABLE and ddl.extra["position"] == "mysql-bin.000003:1234"
    with pytest.raises(ErrDDLUnparseable, match="mysql-bin.000003:1234"):
        should_replicate(ddl, ALL)
    assert not should_replicate(ddl, ALL, DDLPolicy(skip_unparseable=True))


@pytest.mark.parametrize("query, schema, table", [
    ("ALTER TABLE t FROBNICATE", "db", "t"),
    ("ALTER ONLINE TABLE other.t ADD PERIOD FOR p(a, b)", "other", "t"),
    ("CREATE TABLE IF NOT EXISTS `we ird` (a INT, ???)", "db", "we ird"),
    ("CREATE UNIQUE INDEX i ON other.t3 ((a + 1))", "other", "t3"),
    ("DROP DATABASE IF EXISTS gone FROBNICATE", "gone", ""),
])
def test_unparseable_ddl_names_its_target(query, schema, table):
    ddl = SchemaStore(Catalog()).apply(query, "db", 3, "f:1").event
    assert ddl.ddl_type == T.UNPARSEABLE
    assert (ddl.schema, ddl.table, ddl.extra.get("target_known")) == (schema, table, True)


def test_unparseable_ddl_outside_the_filter_does_not_stop_the_changefeed():
    ddl = SchemaStore(Catalog()).apply("ALTER TABLE other.t FROBNICATE", "db", 77, "f:9").event
    only_db = TableFilter(["db.*"]).match_event
    assert should_replicate(ddl, only_db) is False  # another database: ignored, the changefeed goes on
    with pytest.raises(ErrDDLUnparseable, match="f:9"):
        should_replicate(ddl, TableFilter(["other.*"]).match_event)
    # A database-level DDL is held against the database: excluded only when no rule can match it.
    dropped = SchemaStore(Catalog()).apply("DROP DATABASE other FROBNICATE", "db", 78, "f:10").event
    assert should_replicate(dropped, only_db) is False
    with pytest.raises(ErrDDLUnparseable):
        should_replicate(dropped, TableFilter(["other.t"]).match_event)


def test_unparseable_ddl_without_a_readable_target_stops_every_changefeed():
    ddl = SchemaStore(Catalog()).apply("ALTER TABLE", "db", 79, "f:11").event
    assert ddl.ddl_type == T.UNPARSEABLE and not ddl.extra.get("target_known")
    with pytest.raises(ErrDDLUnparseable):
        should_replicate(ddl, TableFilter(["nothing.*"]).match_event)


def test_ddl_on_an_unknown_table_is_reported_not_guessed():
    outcome = SchemaStore(Catalog()).apply("ALTER TABLE nowhere ADD COLUMN c INT", "db", 5, "f:1")
    assert outcome.event.ddl_type == T.UNPARSEABLE and "not in the schema store" in outcome.event.extra["error"]
    assert outcome.tables == {}


def test_dropping_a_table_the_store_does_not_hold_is_no_gap():
    # MariaDB logs `DROP TABLE s1, t1` when s1 is a SEQUENCE (suite/rpl/t/sequence.test).
    store = SchemaStore(Catalog())
    store.apply("CREATE TABLE t1 (id INT PRIMARY KEY)", "db", 1, "f:1")
    store.apply("CREATE SEQUENCE s1", "db", 2, "f:2")
    outcome = store.apply("DROP TABLE `s1`,`t1` /* generated by server */", "db", 3, "f:3")
    assert outcome.event.ddl_type == T.DROP_TABLE and outcome.tables == {("db", "t1"): None}


def test_renaming_a_table_the_store_does_not_hold_sends_nothing():
    # RENAME TABLE of a SEQUENCE (suite/sql_sequence/kill.test) or a TEMPORARY table.
    store = SchemaStore(Catalog())
    store.apply("CREATE TABLE t1 (id INT PRIMARY KEY)", "db", 1, "f:1")
    event = store.apply("RENAME TABLE s TO s1", "db", 2, "f:2").event
    assert event.ddl_type == T.RENAME_TABLE and replicated_ddls(event, ALL) == []
    event = store.apply("RENAME TABLE s1 TO s2, t1 TO t2", "db", 3, "f:3").event
    assert [p.query for p in replicated_ddls(event, ALL)] == ["RENAME TABLE `db`.`t1` TO `db`.`t2`"]
    assert ("db", "t2") in store.catalog.tables


def test_a_parser_crash_is_an_unparseable_ddl_not_a_puller_crash():
    # Valid MariaDB the grammar does not cover; the parser used to raise AttributeError here.
    outcome = SchemaStore(Catalog()).apply("ALTER TABLE t ADD PERIOD FOR p(a, b)", "db", 9, "mysql-bin.000001:42")
    assert outcome.event.ddl_type == T.UNPARSEABLE and outcome.event.extra["position"] == "mysql-bin.000001:42"
    with pytest.raises(ErrDDLUnparseable, match="ADD PERIOD"):
        should_replicate(outcome.event, ALL)
