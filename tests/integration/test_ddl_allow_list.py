"""The DDL document's allow list against a real MariaDB: every DDL kind runs on a table with a
valid index and on one without; the real puller and schema store record them, and the batch
writer (no Spark) hands a recording sink exactly the DDLs of each column of the table.
Rows of tables without a valid index reach the sink only with force-replicate."""

from __future__ import annotations

import itertools
import os
import re

import pyarrow as pa
import pytest

from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.model.events import TableInfo
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.pipeline.planning import replicated_tables
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.rules import DDLPolicy
from sparkcdc.testing.recording_sink import RecordingSink
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

_server_ids = itertools.count(4100)

# A valid index: PK, or a UK of NOT NULL columns. The "no" table has only a plain index and a UK
# over a nullable column, neither of which is valid.
WITH = "(id INT NOT NULL PRIMARY KEY, v INT, w INT, KEY i (v))"
WITHOUT = "(id INT NOT NULL, v INT, w INT, KEY i (v), UNIQUE KEY u (w))"
PARTITIONS = " PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))"
WITH_P = "(id INT NOT NULL PRIMARY KEY, v INT, KEY i (v))" + PARTITIONS
WITHOUT_P = "(id INT NOT NULL, v INT, KEY i (v))" + PARTITIONS

# kind -> (TiCDC type, (create for "with", create for "without") or None for the defaults, setup, the DDL)
# `{t}` is the table. The allow list row is looked up by the type.
KINDS: dict[str, tuple[str, tuple[str, str] | None, list[str], str]] = {
    "CREATE INDEX": (T.CREATE_INDEX, None, [], "CREATE INDEX j ON {t} (w)"),
    "ADD INDEX": (T.CREATE_INDEX, None, [], "ALTER TABLE {t} ADD INDEX j (w)"),
    "DROP INDEX": (T.DROP_INDEX, None, [], "DROP INDEX i ON {t}"),
    "ADD PRIMARY KEY": (T.ADD_PRIMARY_KEY, ("(id INT NOT NULL, v INT, UNIQUE KEY uk (id))", None), [],
                        "ALTER TABLE {t} ADD PRIMARY KEY (id)"),
    # A table without a valid index has no primary key to drop: that column is the note's case of
    # dropping the last valid index (see test_dropping_the_last_valid_index_is_not_replicated).
    "DROP PRIMARY KEY": (T.DROP_PRIMARY_KEY, ("(id INT NOT NULL PRIMARY KEY, w INT NOT NULL, UNIQUE KEY uk (w))",
                                              "(id INT NOT NULL PRIMARY KEY, v INT)"), [],
                         "ALTER TABLE {t} DROP PRIMARY KEY"),
    "CREATE TABLE": (T.CREATE_TABLE, ("", ""), [], "CREATE TABLE {t} {definition}"),
    "DROP TABLE": (T.DROP_TABLE, None, [], "DROP TABLE {t}"),
    "ADD COLUMN": (T.ADD_COLUMN, None, [], "ALTER TABLE {t} ADD COLUMN c VARCHAR(8)"),
    "DROP COLUMN": (T.DROP_COLUMN, None, [], "ALTER TABLE {t} DROP COLUMN v"),
    "TRUNCATE TABLE": (T.TRUNCATE_TABLE, None, [], "TRUNCATE TABLE {t}"),
    "MODIFY COLUMN": (T.MODIFY_COLUMN, None, [], "ALTER TABLE {t} MODIFY v BIGINT"),
    "RENAME TABLE": (T.RENAME_TABLE, None, [], "RENAME TABLE {t} TO {t}_new"),
    "ALTER COLUMN DEFAULT VALUE": (T.SET_DEFAULT_VALUE, None, [], "ALTER TABLE {t} ALTER COLUMN v SET DEFAULT 5"),
    "ALTER TABLE COMMENT": (T.MODIFY_TABLE_COMMENT, None, [], "ALTER TABLE {t} COMMENT 'c'"),
    "RENAME INDEX": (T.RENAME_INDEX, None, [], "ALTER TABLE {t} RENAME INDEX i TO i2"),
    "ADD PARTITION": (T.ADD_PARTITION, (WITH_P, WITHOUT_P), [],
                      "ALTER TABLE {t} ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))"),
    "DROP PARTITION": (T.DROP_PARTITION, (WITH_P, WITHOUT_P), [], "ALTER TABLE {t} DROP PARTITION p1"),
    "TRUNCATE PARTITION": (T.TRUNCATE_PARTITION, (WITH_P, WITHOUT_P), [], "ALTER TABLE {t} TRUNCATE PARTITION p0"),
    "EXCHANGE PARTITION": (T.EXCHANGE_PARTITION, (WITH_P, WITHOUT_P), ["CREATE TABLE {t}_x {plain}"],
                           "ALTER TABLE {t} EXCHANGE PARTITION p0 WITH TABLE {t}_x"),
    "REORGANIZE PARTITION": (T.REORGANIZE_PARTITION, (WITH_P, WITHOUT_P), [],
                             "ALTER TABLE {t} REORGANIZE PARTITION p1 INTO (PARTITION p1a VALUES LESS THAN (15), "
                             "PARTITION p1b VALUES LESS THAN (20))"),
    "ALTER TABLE CHARACTER SET": (T.MODIFY_TABLE_CHARSET, None, [], "ALTER TABLE {t} CHARACTER SET latin1"),
    "REBASE AUTO ID": (T.REBASE_AUTO_ID, None, [], "ALTER TABLE {t} AUTO_INCREMENT = 100"),
    "ALTER TABLE INDEX VISIBILITY": (T.ALTER_INDEX_VISIBILITY, None, [], "ALTER TABLE {t} ALTER INDEX i IGNORED"),
    "CREATE VIEW": (T.CREATE_VIEW, None, [], "CREATE VIEW {t}_v AS SELECT id FROM {t}"),
    "DROP VIEW": (T.DROP_VIEW, None, ["CREATE VIEW {t}_v AS SELECT id FROM {t}"], "DROP VIEW {t}_v"),
}
# Not expressible on MariaDB: RECOVER TABLE, ALTER TABLE [REMOVE] TTL (TiDB only).
# Views: TiCDC's TableInfo.IsEligible returns true for every view, so view DDLs replicate whatever
# the underlying table has; the document's N in that column does not happen in TiCDC's code.
VIEW_ROW = (True, True, True)
DATABASE_KINDS = {
    "CREATE DATABASE": (T.CREATE_DATABASE, "CREATE DATABASE {db}_made"),
    "ALTER DATABASE CHARACTER SET": (T.MODIFY_SCHEMA_CHARSET, "ALTER DATABASE {db}_made CHARACTER SET latin1"),
    "DROP DATABASE": (T.DROP_DATABASE, "DROP DATABASE {db}_made"),
}
PLAIN = {WITH_P: "(id INT NOT NULL PRIMARY KEY, v INT, KEY i (v))", WITHOUT_P: "(id INT NOT NULL, v INT, KEY i (v))"}


def slug(kind: str) -> str:
    return kind.lower().replace(" ", "_")


def marker_only(start: int, end: int) -> pa.Table:
    return pa.table({
        "commit_ts": pa.array([end], pa.int64()), "seq": pa.array([start], pa.int64()),
        "schema_name": [""], "table_name": [""], "op": [RANGE_MARKER],
        "before": pa.array([None], pa.list_(pa.string())), "after": pa.array([None], pa.list_(pa.string())),
    })


@pytest.fixture(scope="module")
def recorded(mariadb, tmp_path_factory):
    """Every kind run on both tables through a real puller; {force_replicate: [DDLEvent]} as the sink got them."""
    db = f"allow{os.getpid()}"
    conn = mariadb.connect()
    index = TxnIndex(str(tmp_path_factory.mktemp("allow") / "index.sqlite"))
    puller = Puller(UpstreamConfig.from_uri(mariadb.uri), index, next(_server_ids), heartbeat_seconds=0.2).start()
    try:
        puller.wait_caught_up(30)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"USE {db}")
            for kind, (_, creates, setup, ddl) in KINDS.items():
                for variant, default in (("with", WITH), ("without", WITHOUT)):
                    t = f"{slug(kind)}_{variant}"
                    definition = default if creates is None else (creates[0 if variant == "with" else 1] or default)
                    if kind == "CREATE TABLE":
                        definition = "(id INT PRIMARY KEY)" if variant == "with" else "(id INT, v INT)"
                    else:
                        cur.execute(f"CREATE TABLE {t} {definition}")
                    for statement in setup:
                        cur.execute(statement.format(t=t, plain=PLAIN.get(definition, definition)))
                    cur.execute(ddl.format(t=t, definition=definition))
            for _, ddl in DATABASE_KINDS.values():
                cur.execute(ddl.format(db=db))
            # The two notes: a valid index created on a keyless table, the last valid index dropped.
            cur.execute("CREATE TABLE note_create (id INT NOT NULL, v INT)")
            cur.execute("CREATE UNIQUE INDEX uq ON note_create (id)")
            cur.execute("CREATE TABLE note_drop (id INT NOT NULL, v INT, UNIQUE KEY uk (id))")
            cur.execute("DROP INDEX uk ON note_drop")
        puller.wait_caught_up(30)
    finally:
        puller.stop()
        conn.close()
    assert puller.error is None
    only_db = TableFilter([f"{db}*.*"]).match_event
    out = {}
    for force in (False, True):
        sink = RecordingSink()
        write_batch(marker_only(index.first_ts(), index.resolved_ts()), index, sink, only_db, lambda ts: None,
                    ddl_policy=DDLPolicy(force_replicate=force))
        out[force] = sink.ddls
    return db, out


def replicated(events, ddl_type: str, table: str) -> bool:
    named = re.compile(rf"\b{table}(_v)?\b")  # a view DDL names the view, {t}_v
    return any(e.ddl_type == ddl_type and named.search(e.query) for e in events)


@pytest.mark.parametrize("kind", list(KINDS))
def test_allow_list_row(recorded, kind):
    _, by_force = recorded
    ddl_type = KINDS[kind][0]
    t = slug(kind)
    got = (
        replicated(by_force[False], ddl_type, f"{t}_with"),
        replicated(by_force[False], ddl_type, f"{t}_without"),
        replicated(by_force[True], ddl_type, f"{t}_without"),
    )
    expected = VIEW_ROW if ddl_type in (T.CREATE_VIEW, T.DROP_VIEW) else T.ALLOW_LIST[ddl_type]
    assert got == expected, f"{kind}: sink got {got}, allow list says {expected}"
    assert replicated(by_force[True], ddl_type, f"{t}_with"), "force-replicate never removes a DDL"


@pytest.mark.parametrize("kind", list(DATABASE_KINDS))
def test_database_ddls_always_replicate(recorded, kind):
    db, by_force = recorded
    ddl_type = DATABASE_KINDS[kind][0]
    for force in (False, True):
        assert f"{db}_made" in [e.schema for e in by_force[force] if e.ddl_type == ddl_type]


def test_creating_a_valid_index_on_a_keyless_table_is_replicated(recorded):
    _, by_force = recorded
    assert replicated(by_force[False], T.CREATE_INDEX, "note_create")


def test_dropping_the_last_valid_index_is_not_replicated(recorded):
    _, by_force = recorded
    assert not replicated(by_force[False], T.DROP_INDEX, "note_drop")
    assert replicated(by_force[True], T.DROP_INDEX, "note_drop")


def test_keyless_tables_rows_reach_the_sink_only_with_force_replicate(mariadb, fresh_db, tmp_path):
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    conn = mariadb.connect(database=fresh_db)
    puller = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2).start()
    try:
        puller.wait_caught_up(30)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE keyed (id INT PRIMARY KEY, v INT)")
            cur.execute("CREATE TABLE keyless (id INT, v INT, UNIQUE KEY u (id))")  # nullable UK: not valid
            cur.execute("INSERT INTO keyed VALUES (1, 1)")
            cur.execute("INSERT INTO keyless VALUES (1, 1)")
        puller.wait_caught_up(30)
    finally:
        puller.stop()
        conn.close()
    assert puller.error is None
    last_ddl = max(d.commit_ts for d in index.ddls_between(index.first_ts(), index.resolved_ts()))
    dml = [t for t in index.txns_between(last_ddl, index.resolved_ts()) if not t.is_ddl]
    table_filter = TableFilter([f"{fresh_db}.*"])
    for force, expected in ((False, ["keyed"]), (True, ["keyed", "keyless"])):
        tables, skipped = replicated_tables(index.tables_at(last_ddl), table_filter.match, force)
        assert [t.table for t in skipped] == ([] if force else ["keyless"])
        rows = list(read_range(BinlogRange(cfg, next(_server_ids), dml[0].start, dml[-1].end,
                                           tuple(t.commit_ts for t in dml), tables)))
        names = ["commit_ts", "seq", "schema_name", "table_name", "op", "before", "after"]
        batch = pa.table({
            "commit_ts": pa.array([r.commit_ts for r in rows] + [dml[-1].commit_ts], pa.int64()),
            "seq": pa.array([r.seq for r in rows] + [last_ddl], pa.int64()),
            "schema_name": [r.schema for r in rows] + [""], "table_name": [r.table for r in rows] + [""],
            "op": [r.op for r in rows] + [RANGE_MARKER],
            "before": pa.array([None] * (len(rows) + 1), pa.list_(pa.string())),
            "after": pa.array([list(r.after) for r in rows] + [None], pa.list_(pa.string())),
        }).select(names)
        sink = RecordingSink()
        write_batch(batch, index, sink, table_filter.match_event, lambda ts: None,
                    ddl_policy=DDLPolicy(force_replicate=force))
        assert sorted(t.table for t, _ in sink.rows) == expected


def test_table_map_that_disagrees_with_the_schema_version_is_an_error(mariadb, fresh_db, tmp_path):
    """The binlog's TABLE_MAP columns are checked against the schema at the row's commit-ts."""
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    conn = mariadb.connect(database=fresh_db)
    puller = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2).start()
    try:
        puller.wait_caught_up(30)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)")
            cur.execute("INSERT INTO t VALUES (1, 2)")
        puller.wait_caught_up(30)
    finally:
        puller.stop()
        conn.close()
    txn = index.txns_between(index.first_ts(), index.resolved_ts())[-1]
    info = index.table_info_at(fresh_db, "t", txn.commit_ts)
    stale = TableInfo(info.schema, info.table, info.table_id, info.columns[:1], info.version - 1, info.handle_key)
    rng = BinlogRange(cfg, next(_server_ids), txn.start, txn.end, (txn.commit_ts,), {f"{fresh_db}.t": stale.to_json()})
    with pytest.raises(Exception, match=r"binlog columns \['id', 'a'\] do not match the schema version"):
        list(read_range(rng))
    rng = BinlogRange(cfg, next(_server_ids), txn.start, txn.end, (txn.commit_ts,), {f"{fresh_db}.t": info.to_json()})
    assert [r.after for r in read_range(rng)] == [("1", "2")]
