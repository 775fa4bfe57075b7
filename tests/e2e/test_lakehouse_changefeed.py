"""MariaDB -> changefeeds -> Delta and Iceberg tables (local, and both on the S3 emulator), each
table read back with DuckDB (not the writer) and compared with the upstream row by row.

The workload: the multi-table workload (key changes, deletes, multi-statement transactions),
every column type (alltypes), and DDL mid-stream (ADD COLUMN with a default, widening, RENAME
and DROP COLUMN, CREATE/TRUNCATE/RENAME/DROP TABLE). A second server is SIGKILLed after a
batch's table commits and before its checkpoint; after the restart every table's history has
one commit per batch commit-ts and the data is equal.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from sparkcdc.config.replica import SinkConfig
from sparkcdc.sink.lakehouse.config import parse_lakehouse_uri
from sparkcdc.sink.lakehouse.iceberg import IcebergTables
from sparkcdc import failpoint
from sparkcdc.sink.lakehouse.sink import KILL_AFTER_LAKE_COMMIT
from sparkcdc.testing.alltypes import create_alltypes
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.emulators import EmulatorNotInstalled, start_emulator
from sparkcdc.testing.lakehouse import duckdb_connection, read_delta, read_iceberg, upstream_columns
from sparkcdc.testing.server_process import ServerProcess
from sparkcdc.testing.workload import Workload

pytestmark = pytest.mark.e2e

WORKLOAD_TABLES = ["customers", "orders", "items", "finish_mark"]


@dataclass
class Feed:
    changefeed: str
    uri: str
    toml: str = ""  # more changefeed config

    @property
    def format(self) -> str:
        return self.uri.split(":", 1)[0].split("+", 1)[0]


class LakeReader:
    """A feed's tables through DuckDB's delta / iceberg readers."""

    def __init__(self, feed: Feed, s3_options: dict | None):
        self.feed = feed
        self.target = parse_lakehouse_uri(feed.uri, SinkConfig())
        self.duck = duckdb_connection(s3_options if not self.target.location.is_local else None)
        self.catalog = IcebergTables(self.target, "reader").catalog if feed.format == "iceberg" else None

    def exists(self, schema: str, table: str) -> bool:
        if self.catalog is not None:
            return self.catalog.table_exists((schema, table))
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.target.path(schema, table), storage_options=self.target.storage_options())

    def rows(self, conn, schema: str, table: str):
        columns = upstream_columns(conn, schema, table)
        key = [k for k in read_key(conn, schema, table)]
        if self.catalog is not None:
            location = self.catalog.load_table((schema, table)).metadata_location
            return read_iceberg(self.duck, location, columns, key)
        return read_delta(self.duck, self.target.path(schema, table), columns, key)

    def changelog_state(self, conn, schema: str, table: str):
        """The table rebuilt from a changelog table with old-value (last change per key wins);
        asserts that no change is in it twice."""
        from sparkcdc.testing.lakehouse import canonical_rows

        location = self.catalog.load_table((schema, table)).metadata_location
        result = self.duck.execute(f"SELECT * FROM iceberg_scan('{location}') ORDER BY _commit_ts, _seq")
        names = [d[0] for d in result.description]
        records = result.fetchall()
        changes = Counter((r[names.index("_commit_ts")], r[names.index("_seq")]) for r in records)
        twice = [change for change, count in changes.items() if count > 1]
        assert not twice, f"{self.feed.uri}: {schema}.{table} holds the changes {twice[:5]} twice"
        columns = upstream_columns(conn, schema, table)
        key = read_key(conn, schema, table)
        state: dict = {}
        for record in records:
            row = next(iter(canonical_rows(columns, names, [record], key).values()))
            old = tuple(row[f"_old_{k}"] for k in key)
            new = tuple(row[k] for k in key)
            if row["_op"] != "insert":
                state.pop(old, None)
            if row["_op"] != "delete":
                state[new] = {c.name: row[c.name] for c in columns}
        return state

    def commit_ts_history(self, schema: str, table: str) -> list[str]:
        """The commit-ts each version of the table records, oldest first."""
        if self.catalog is not None:
            table_ = self.catalog.load_table((schema, table))
            return [s.summary.additional_properties["sparkcdc.commit-ts"] for s in table_.snapshots()
                    if "sparkcdc.commit-ts" in s.summary.additional_properties]
        from deltalake import DeltaTable

        history = DeltaTable(self.target.path(schema, table), storage_options=self.target.storage_options()).history()
        return [h["sparkcdc.commit-ts"] for h in reversed(history) if "sparkcdc.commit-ts" in h]


def read_key(conn, schema: str, table: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                    "AND COLUMN_KEY='PRI' ORDER BY ORDINAL_POSITION", (schema, table))
        return [r[0] for r in cur.fetchall()]


def wait_finished(reader: LakeReader, server: ServerProcess, conn, database: str, mark: int = 1,
                  timeout: float = 240.0) -> None:
    """Until the finish mark is in the feed's finish_mark table and the changefeed's checkpoint has
    passed the commit that wrote it: a batch's tables commit side by side (sink/lakehouse/sink.py),
    so the mark's table may show it while another table of the same batch is still committing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if reader.exists(database, "finish_mark") and (str(mark),) in reader.rows(conn, database, "finish_mark"):
                break
        except Exception:  # noqa: BLE001 - a table being created or renamed right now: look again
            pass
        time.sleep(1)
    else:
        raise AssertionError(f"finish mark {mark} of {database} not in {reader.feed.uri} after {timeout}s")
    wait_checkpoint_past_mark(reader, server, database, deadline)


def wait_checkpoint_past_mark(reader: LakeReader, server: ServerProcess, database: str, deadline: float) -> None:
    """Until the changefeed's checkpoint has passed the last commit of its finish_mark table."""
    committed = max(int(ts) for ts in reader.commit_ts_history(database, "finish_mark"))
    while server.checkpoint(reader.feed.changefeed) < committed:
        assert time.monotonic() < deadline, f"{reader.feed.changefeed}'s checkpoint did not pass {committed}"
        time.sleep(0.5)


def assert_equal(reader: LakeReader, conn, database: str, tables: list[str]) -> None:
    for table in tables:
        expected = read_upstream_table(conn, database, table)
        assert expected, f"the workload left {database}.{table} empty"
        problems = diff_tables(expected, reader.rows(conn, database, table))
        assert not problems, f"{reader.feed.uri}: {database}.{table}: " + "\n".join(problems)


def assert_one_commit_per_commit_ts(reader: LakeReader, database: str, tables: list[str]) -> None:
    for table in tables:
        history = reader.commit_ts_history(database, table)
        twice = [ts for ts, count in Counter(history).items() if count > 1]
        assert history and not twice, f"{reader.feed.uri}: {database}.{table} committed {twice} twice"
        assert history == sorted(history, key=int)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    try:
        emulator = start_emulator("s3", str(tmp_path_factory.mktemp("moto")))
    except EmulatorNotInstalled as exc:
        pytest.fail(f"{exc}")
    yield emulator
    emulator.stop()


def s3_options(s3) -> dict:
    return {"endpoint": s3.endpoint, **s3.credentials}


def create_changefeeds(server: ServerProcess, database: str, tmp_path, feeds: list[Feed]) -> None:
    for feed in feeds:
        config = tmp_path / f"{feed.changefeed}.toml"
        config.write_text(f'[filter]\nrules = ["{database}.*"]\n{feed.toml}')
        server.cli("changefeed", "create", "-c", feed.changefeed, "--config", str(config), "--sink-uri", feed.uri)


def ddl_mid_stream(conn, database: str) -> None:
    """Schema changes the lake tables must follow, with rows before and after each."""
    with conn.cursor() as cur:
        cur.execute(f"USE `{database}`")
        cur.execute("CREATE TABLE evolve (id INT PRIMARY KEY, a INT, b VARCHAR(10), c FLOAT, d DECIMAL(6,2))")
        cur.execute("INSERT INTO evolve VALUES (1, 10, 'one', 1.5, 1.25), (2, 20, 'two', NULL, NULL)")
        cur.execute("ALTER TABLE customers ADD COLUMN loyalty INT NOT NULL DEFAULT 7")
        cur.execute("ALTER TABLE evolve MODIFY a BIGINT, MODIFY d DECIMAL(9,2)")
        cur.execute("INSERT INTO evolve VALUES (3, 9000000000, 'three', 3.5, 1234567.89)")
        cur.execute("ALTER TABLE evolve RENAME COLUMN b TO b2")
        cur.execute("ALTER TABLE evolve DROP COLUMN c, ADD COLUMN e VARCHAR(8) NOT NULL DEFAULT 'dflt'")
        cur.execute("BEGIN")
        cur.execute("UPDATE evolve SET b2 = 'deux', e = 'changed' WHERE id = 2")
        cur.execute("UPDATE evolve SET id = 4 WHERE id = 1")
        cur.execute("COMMIT")
        cur.execute("CREATE TABLE tr (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO tr VALUES (1, 'a'), (2, 'b')")
        cur.execute("TRUNCATE TABLE tr")
        cur.execute("INSERT INTO tr VALUES (3, 'c')")
        cur.execute("CREATE TABLE ren (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO ren VALUES (1, 'r')")
        cur.execute("RENAME TABLE ren TO renamed")
        cur.execute("INSERT INTO renamed VALUES (2, 's')")
        cur.execute("CREATE TABLE gone (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO gone VALUES (1)")
        cur.execute("DROP TABLE gone")
        # Partition DDLs that keep every row change nothing; TRUNCATE PARTITION ALL empties the table.
        cur.execute("CREATE TABLE part (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
                    "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))")
        cur.execute("INSERT INTO part VALUES (1, 1), (11, 11)")
        cur.execute("ALTER TABLE part ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))")
        cur.execute("ALTER TABLE part REORGANIZE PARTITION p1, p2 INTO (PARTITION p1 VALUES LESS THAN (30))")
        cur.execute("INSERT INTO part VALUES (21, 21)")
        cur.execute("ALTER TABLE part TRUNCATE PARTITION ALL")
        cur.execute("INSERT INTO part VALUES (2, 2), (12, 12)")


@pytest.fixture(scope="module")
def server(mariadb, tmp_path_factory):
    process = ServerProcess(str(tmp_path_factory.mktemp("cdc")), mariadb.uri).start()
    yield process
    process.stop()


def test_delta_and_iceberg_tables_equal_the_upstream(server, mariadb, s3, tmp_path):
    database = "e2e_lake"
    s3.create_bucket("lake")
    feeds = [Feed("delta", f"delta://{tmp_path}/delta"),
             Feed("iceberg", f"iceberg://{tmp_path}/iceberg"),
             Feed("delta-s3", s3.uri("lake", "tables").replace("s3://", "delta+s3://", 1)),
             Feed("iceberg-s3", s3.uri("lake", "warehouse").replace("s3://", "iceberg+s3://", 1)
                  + f"&catalog-uri=sqlite:///{tmp_path}/catalog.sqlite")]
    create_changefeeds(server, database, tmp_path, feeds)
    conn = mariadb.connect()
    workload = Workload(conn, database, seed=25)
    workload.create_tables()
    create_alltypes(conn, database)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE `{database}`.alltypes SET vc = CONCAT(vc, '!'), i = i + 1 WHERE i = 7")
    workload.run(80)
    ddl_mid_stream(conn, database)
    workload.run(80)
    workload.finish()

    tables = WORKLOAD_TABLES + ["alltypes", "evolve", "tr", "renamed", "part"]
    readers = [LakeReader(feed, s3_options(s3)) for feed in feeds]
    for reader in readers:
        wait_finished(reader, server, conn, database)
        assert_equal(reader, conn, database, tables)
        assert not reader.exists(database, "ren") and not reader.exists(database, "gone")
        assert_one_commit_per_commit_ts(reader, database, tables)

    # Bad input: an unknown catalog is refused at create; a DDL the formats cannot express fails
    # every changefeed with its coded error and leaves the table as it was.
    refused = server.cli("changefeed", "create", "-c", "bad", "--sink-uri", f"iceberg://{tmp_path}/x?catalog=nessie",
                         check=False)
    assert refused.returncode != 0 and "ErrLakehouseCatalog" in refused.stdout + refused.stderr

    def wait_failed(feed: Feed) -> str:
        deadline = time.monotonic() + 120
        while (state := server.query(feed.changefeed))["state"] != "failed":
            assert time.monotonic() < deadline, f"{feed.changefeed} did not fail at the DDL: {state}"
            time.sleep(1)
        assert "ErrLakehouseSchemaChange" in json.dumps(state["error"]), state
        return state["error"]["message"]

    # A partition DDL that removes rows without row events stops every lake changefeed, the table
    # as it was; the way on its message names (resume after it) goes on to the next DDL.
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE `{database}`.part TRUNCATE PARTITION p0")
    for feed, reader in zip(feeds, readers):
        message = wait_failed(feed)
        assert f"{database}.part" in message and "TRUNCATE PARTITION p0" in message, message
        assert set(reader.rows(conn, database, "part")) == {("2",), ("12",)}
        resume = re.search(r"--overwrite-checkpoint-ts (\d+)", message)
        server.cli("changefeed", "resume", "-c", feed.changefeed, "--no-confirm", "--overwrite-checkpoint-ts",
                   resume.group(1))
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE `{database}`.tr MODIFY id VARCHAR(10)")
    for feed in feeds:
        assert "MODIFY id VARCHAR" in wait_failed(feed)
    for reader in readers:
        assert reader.rows(conn, database, "tr") == {("3",): {"id": "3", "v": "c"}}


def test_sigkill_after_the_table_commits_applies_nothing_twice(mariadb, tmp_path, monkeypatch):
    database = "e2e_lake_kill"
    # A changelog table shows any change applied twice; the upsert table's history any batch.
    feeds = [Feed("kd", f"delta://{tmp_path}/delta"),
             Feed("ki", f"iceberg://{tmp_path}/iceberg", '[sink.iceberg]\nmode = "changelog"\nold-value = true\n')]
    # The server kills itself in the third batch that commits rows, between the table commits
    # and the checkpoint; the restart replays that batch.
    monkeypatch.setenv(failpoint.ENV, f"{KILL_AFTER_LAKE_COMMIT}=return(3)")
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    monkeypatch.delenv(failpoint.ENV)
    try:
        create_changefeeds(server, database, tmp_path, feeds)
        conn = mariadb.connect()
        workload = Workload(conn, database, seed=26)
        workload.create_tables()
        deadline = time.monotonic() + 240
        while server.process.poll() is None and time.monotonic() < deadline:
            workload.run(5)  # batches of a few transactions each, until the kill
            time.sleep(0.5)
        assert server.process.wait(timeout=10) == -9, "the server did not kill itself after a commit"
        with open(os.path.join(server.data_dir, "server.log"), encoding="utf-8", errors="replace") as log:
            assert f"FAILPOINT {KILL_AFTER_LAKE_COMMIT}: killing the server after lakehouse batch 3" in log.read()
        server.start()
        workload.run(40)
        workload.finish()
        delta, changelog = (LakeReader(feed, None) for feed in feeds)
        wait_finished(delta, server, conn, database)
        assert_equal(delta, conn, database, WORKLOAD_TABLES)
        assert_one_commit_per_commit_ts(delta, database, WORKLOAD_TABLES)
        deadline = time.monotonic() + 240
        while (1,) not in {tuple(int(v) for v in key) for key in changelog.changelog_state(conn, database, "finish_mark")} \
                if changelog.exists(database, "finish_mark") else True:
            assert time.monotonic() < deadline, "the changelog feed did not reach the finish mark"
            time.sleep(1)
        wait_checkpoint_past_mark(changelog, server, database, deadline)  # the other tables of its batch
        for table in WORKLOAD_TABLES:
            problems = diff_tables(read_upstream_table(conn, database, table),
                                   changelog.changelog_state(conn, database, table))
            assert not problems, f"changelog {database}.{table}: " + "\n".join(problems)
        assert_one_commit_per_commit_ts(changelog, database, WORKLOAD_TABLES)
    finally:
        server.stop()
