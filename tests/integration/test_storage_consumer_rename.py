"""`sparkcdc consumer storage` replays RENAME TABLE of tables with ENUM/SET columns into a real
MariaDB. A rename's schema file (TiCDC's layout: in the new name's directory) lists the columns
without enum/set members and its query names no types, while canal-json writes enum/set values
as numbers: the members come from the old name's schema files, or from the downstream table."""

from __future__ import annotations

import time

import pytest

from sparkcdc.cli.main import main
from sparkcdc.config.replica import SinkConfig
from sparkcdc.consumer.storage_reader import rebuild_tables
from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.schema.catalog import Catalog, TableDef
from sparkcdc.schema.store import SchemaStore, split_ddl
from sparkcdc.sink.storage import StorageSink

pytestmark = pytest.mark.integration

DAY = time.mktime((2024, 3, 1, 12, 0, 0, 0, 0, -1))
DATABASE = "rename_enum"
SELECT = "SELECT id, tier, tags FROM {} ORDER BY id"


def ts(second: int) -> int:
    return compose(int((DAY + second) * 1000))


class Changefeed:
    """DDL text through the real schema store and rows into a file storage sink, as the pipeline
    writes them (multi-table DDLs split per table)."""

    def __init__(self, uri: str):
        self.store = SchemaStore(Catalog())
        self.sink = StorageSink(uri, SinkConfig(protocol="canal-json", enable_tidb_extension=True), lambda: DAY)
        self.tables: dict[str, TableInfo] = {}

    def ddl(self, second: int, query: str) -> None:
        outcome = self.store.apply(query, DATABASE, ts(second), f"test:{second}")
        for event in split_ddl(outcome.event):
            self.sink.write_ddl(event)
            if event.table and event.table_info is not None:
                self.tables[event.table] = event.table_info

    def rows(self, second: int, table: str, *changes: tuple) -> None:
        self.sink.write_rows(self.tables[table], [
            RowChange(ts(second), DATABASE, table, op, before=before, after=after, seq=seq)
            for seq, (op, before, after) in enumerate(changes)])

    def checkpoint(self, second: int) -> None:
        self.sink.write_checkpoint(ts(second))


def downstream_rows(mariadb, table: str) -> list[tuple]:
    connection = mariadb.connect(DATABASE)
    try:
        with connection.cursor() as cursor:
            cursor.execute(SELECT.format(table))
            return [tuple(r) for r in cursor.fetchall()]
    finally:
        connection.close()


def downstream_tables(mariadb) -> list[str]:
    connection = mariadb.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                           "ORDER BY TABLE_NAME", (DATABASE,))
            return [r[0] for r in cursor.fetchall()]
    finally:
        connection.close()


def in_memory(root: str, table: str, **kwargs) -> list[tuple]:
    rows = rebuild_tables(root, "canal-json", **kwargs)[(DATABASE, table)]
    return sorted((int(r["id"]), r["tier"], r["tags"]) for r in rows.values())


def test_rename_of_enum_and_set_tables_replays_in_rounds_and_after_a_restart(mariadb, tmp_path):
    root = tmp_path / "out"
    uri = f"file://{root}?protocol=canal-json&enable-tidb-extension=true"
    with mariadb.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        cursor.execute("DROP DATABASE IF EXISTS sparkcdc_consumer")
    command = ["consumer", "storage", "--upstream-uri", uri,
               "--downstream-uri", mariadb.uri + "?safe-mode=true", "--once"]
    feed = Changefeed(uri)
    feed.ddl(0, f"CREATE DATABASE {DATABASE}")
    feed.ddl(1, "CREATE TABLE customers (id INT PRIMARY KEY, "
                "tier ENUM('basic','gold','platinum') NOT NULL DEFAULT 'basic', tags SET('a','b','c'))")
    feed.rows(2, "customers", ("insert", None, ("1", "gold", "a,c")), ("insert", None, ("2", "basic", None)))
    feed.checkpoint(2)
    assert main(command) == 0
    assert downstream_rows(mariadb, "customers") == [(1, "gold", "a,c"), (2, "basic", None)]

    # Round 2: the rename and rows of the new name in one round, then an ALTER ... RENAME TO
    # (another spelling) and rows under the third name.
    feed.ddl(3, "RENAME TABLE customers TO clients")
    feed.rows(4, "clients", ("insert", None, ("3", "platinum", "b")),
              ("update", ("1", "gold", "a,c"), ("1", "platinum", "a,b,c")))
    feed.ddl(5, "ALTER TABLE clients RENAME TO members")
    feed.rows(6, "members", ("delete", ("2", "basic", None), None), ("insert", None, ("4", "gold", "c")))
    feed.checkpoint(6)
    assert main(command) == 0
    expected = [(1, "platinum", "a,b,c"), (3, "platinum", "b"), (4, "gold", "c")]
    assert downstream_rows(mariadb, "members") == expected
    assert downstream_tables(mariadb) == ["members"]

    # Round 3, a restarted consumer (checkpoint saved downstream): only the two-table rename is
    # new; the old names no longer exist downstream, so their members come from storage alone.
    feed.ddl(7, "CREATE TABLE plain (id INT PRIMARY KEY, tier VARCHAR(8), tags VARCHAR(8))")
    feed.ddl(8, "RENAME TABLE members TO vips, plain TO members")
    feed.rows(9, "vips", ("insert", None, ("5", "basic", "a,b")))
    feed.rows(9, "members", ("insert", None, ("1", "x", "y")))
    feed.checkpoint(9)
    assert main(command) == 0
    assert downstream_rows(mariadb, "vips") == expected + [(5, "basic", "a,b")]
    assert downstream_rows(mariadb, "members") == [(1, "x", "y")]
    assert downstream_tables(mariadb) == ["members", "vips"]

    # The in-memory reader has no downstream to ask: it follows the renames back through
    # storage (vips <- members <- clients <- customers). It replays no DDLs, so each name holds
    # the rows written under it.
    assert in_memory(str(root), "clients") == [(1, "platinum", "a,b,c"), (3, "platinum", "b")]
    assert in_memory(str(root), "vips") == [(5, "basic", "a,b")]


def test_rename_of_a_table_from_before_the_changefeed(mariadb, tmp_path):
    """A table that existed before the changefeed has a query-less first schema file: its members
    come from the table the user created downstream, before and after its rename (also when a
    restarted consumer finds only the new name downstream)."""
    root = tmp_path / "out"
    uri = f"file://{root}?protocol=canal-json&enable-tidb-extension=true"
    with mariadb.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        cursor.execute("DROP DATABASE IF EXISTS sparkcdc_consumer")
        cursor.execute(f"CREATE DATABASE {DATABASE}")
        cursor.execute(f"CREATE TABLE {DATABASE}.legacy (id INT PRIMARY KEY, "
                       "tier ENUM('basic','gold') NOT NULL, tags SET('x','y'))")
    command = ["consumer", "storage", "--upstream-uri", uri,
               "--downstream-uri", mariadb.uri + "?safe-mode=true", "--once"]
    feed = Changefeed(uri)
    legacy = TableInfo(DATABASE, "legacy", 1, (
        ColumnInfo("id", "int", nullable=False, is_primary_key=True),
        ColumnInfo("tier", "enum", nullable=False, elements=("basic", "gold")),
        ColumnInfo("tags", "set", elements=("x", "y"))), ts(0), handle_key=("id",))
    feed.store.catalog.databases[DATABASE] = "utf8mb4"
    feed.store.catalog.tables[(DATABASE, "legacy")] = TableDef.from_table_info(legacy, "utf8mb4")
    feed.tables["legacy"] = legacy
    feed.rows(1, "legacy", ("insert", None, ("1", "gold", "x,y")))
    feed.ddl(2, "RENAME TABLE legacy TO heritage")
    feed.rows(3, "heritage", ("insert", None, ("2", "basic", "y")))
    feed.checkpoint(3)
    assert main(command) == 0
    assert downstream_rows(mariadb, "heritage") == [(1, "gold", "x,y"), (2, "basic", "y")]

    feed.rows(4, "heritage", ("update", ("2", "basic", "y"), ("2", "gold", "x")))
    feed.checkpoint(4)
    assert main(command) == 0  # restarted: `legacy` is gone downstream, `heritage` is there
    assert downstream_rows(mariadb, "heritage") == [(1, "gold", "x,y"), (2, "gold", "x")]
