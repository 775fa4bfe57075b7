"""Storage consumer and reader across RENAME TABLE: the order of a multi-table rename's parts
(stored in separate directories) and enum/set members taken over from the old name."""

from __future__ import annotations

import time

from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.storage_consumer import _Step, order_steps
from sparkcdc.consumer.storage_reader import rebuild_tables
from sparkcdc.model.events import RowChange
from sparkcdc.model.tso import compose
from sparkcdc.schema.catalog import Catalog
from sparkcdc.schema.store import SchemaStore, split_ddl
from sparkcdc.sink.storage import StorageSink

DAY = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))


def ts(second: int) -> int:
    return compose(int((DAY + second) * 1000))


def step(version, phase, table, source=None, drops=False, ensures=False):
    return _Step(version, phase, ("db", table), ("db", source) if source else None, lambda: None, drops, ensures)


def names(steps):
    return [(s.version, s.phase, s.table[1]) for s in steps]


def test_the_parts_of_a_rename_run_in_an_order_that_is_a_valid_sequence():
    # RENAME TABLE a TO tmp, b TO a, tmp TO b: three schema files at one commit-ts; a and b have
    # earlier schema files, tmp has none.
    steps = [step(5, 1, "a"), step(5, 0, "a", "b"), step(5, 0, "b", "tmp"), step(5, 0, "tmp", "a"),
             step(1, 0, "a"), step(2, 0, "b"), step(3, 1, "b"), step(7, 0, "z")]
    assert names(order_steps(steps)) == [
        (1, 0, "a"), (2, 0, "b"), (3, 1, "b"), (5, 0, "tmp"), (5, 0, "a"), (5, 0, "b"), (5, 1, "a"),
        (7, 0, "z")]
    # The same swap of two tables with no schema files yet (no rows before it); tmp was dropped
    # before, so it is the new name.
    swap = [step(5, 0, "a", "b"), step(5, 0, "b", "tmp"), step(5, 0, "tmp", "a")]
    assert names(order_steps(swap + [step(1, 0, "tmp"), step(2, 0, "tmp", drops=True)])) == [
        (1, 0, "tmp"), (2, 0, "tmp"), (5, 0, "tmp"), (5, 0, "a"), (5, 0, "b")]
    # RENAME TABLE members TO vips, plain TO members
    assert names(order_steps([step(8, 0, "members", "plain"), step(8, 0, "vips", "members")])) == [
        (8, 0, "vips"), (8, 0, "members")]
    # RENAME TABLE a TO b, c TO a with b dropped before: a moves away before c takes its name.
    chain = [step(9, 0, "b", "a"), step(9, 0, "a", "c"), step(1, 0, "b"), step(2, 0, "b", drops=True),
             step(1, 0, "a"), step(1, 0, "c")]
    assert names(order_steps(chain))[-2:] == [(9, 0, "b"), (9, 0, "a")]


def test_a_query_less_schema_file_runs_after_the_ddl_of_its_commit_ts():
    # CONVERT PARTITION p TO TABLE a_new: the new table's schema file has no query; creating it
    # from its columns before the DDL runs would make the DDL fail downstream.
    steps = [step(5, 0, "a_new", ensures=True), step(5, 0, "b"), step(5, 1, "a_new"), step(1, 0, "b")]
    assert names(order_steps(steps)) == [(1, 0, "b"), (5, 0, "b"), (5, 0, "a_new"), (5, 1, "a_new")]


def test_members_follow_a_swap_through_a_temporary_name(tmp_path):
    store = SchemaStore(Catalog())
    sink = StorageSink(f"file://{tmp_path}/out?protocol=canal-json",
                       SinkConfig(protocol="canal-json", enable_tidb_extension=True), lambda: DAY)
    tables = {}

    def ddl(second, query):
        for event in split_ddl(store.apply(query, "db", ts(second), "test").event):
            sink.write_ddl(event)
            if event.table and event.table_info is not None:
                tables[event.table] = event.table_info

    def insert(second, table, *values):
        sink.write_rows(tables[table], [RowChange(ts(second), "db", table, "insert", after=values)])

    ddl(0, "CREATE DATABASE db")
    ddl(1, "CREATE TABLE a (id INT PRIMARY KEY, e ENUM('x','y'), s SET('x','y'))")
    ddl(2, "CREATE TABLE b (id INT PRIMARY KEY, e ENUM('p','q','r'), s SET('p','q','r'))")
    ddl(3, "RENAME TABLE a TO tmp, b TO a, tmp TO b")
    insert(4, "a", "1", "r", "p,r")
    insert(4, "b", "2", "y", "x,y")
    ddl(5, "CREATE TABLE c LIKE b")
    insert(6, "c", "3", "x", "y")
    sink.write_checkpoint(ts(6))
    tables_read = rebuild_tables(str(tmp_path / "out"), "canal-json")
    assert list(tables_read[("db", "a")].values()) == [{"id": "1", "e": "r", "s": "p,r"}]
    assert list(tables_read[("db", "b")].values()) == [{"id": "2", "e": "y", "s": "x,y"}]
    assert list(tables_read[("db", "c")].values()) == [{"id": "3", "e": "x", "s": "y"}]
