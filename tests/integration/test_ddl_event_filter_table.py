"""The DDL document's event-filter table, row by row, against a real MariaDB.

The document's changefeed config is

    [filter]
    rules = ['test.t*']
    [[filter.event-filters]]
    matcher = ["test.t1"]
    ignore-event = ["create table", "drop table", "truncate table", "rename table"]

and each row runs one DDL, then a row change on the table the DDL leaves. Each row gets its own
database standing in for `test`. A real puller records the binlog; the rows are decoded by the
real range reader for the tables the source would decode, and the batch writer (no Spark) hands a
recording sink what the changefeed would write: the test checks both the DDL and the DML column.
"""

from __future__ import annotations

import itertools
import os

import pyarrow as pa
import pytest

from sparkcdc.config.replica import parse_replica_config
from sparkcdc.filter.change_filters import ChangeFilters
from sparkcdc.filter.table_filter import TableFilter
from sparkcdc.pipeline.batch_sink import write_batch
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.pipeline.planning import replicated_tables
from sparkcdc.testing.recording_sink import RecordingSink
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

_server_ids = itertools.count(4300)
CREATE = "CREATE TABLE {db}.{t} (id INT PRIMARY KEY, name VARCHAR(50))"

# (the DDL, setup run before it, the table the row change goes to afterwards or None,
#  DDL replicated?, DML replicated? (None: the table is gone, the document's "-"))
ROWS = [
    ("CREATE TABLE {db}.t1 (id INT PRIMARY KEY, name VARCHAR(50))", [], "t1", False, True),
    ("CREATE TABLE {db}.t2 (id INT PRIMARY KEY, name VARCHAR(50))", [], "t2", True, True),
    ("CREATE TABLE {db}.ignore (id INT PRIMARY KEY, name VARCHAR(50))", [], "ignore", False, False),
    ("DROP TABLE {db}.t1", [CREATE.replace("{t}", "t1")], None, False, None),
    ("TRUNCATE TABLE {db}.t1", [CREATE.replace("{t}", "t1")], "t1", False, True),
    ("RENAME TABLE {db}.t1 TO {db}.t2", [CREATE.replace("{t}", "t1")], "t2", False, True),
    ("RENAME TABLE {db}.t1 TO {db}.ignore", [CREATE.replace("{t}", "t1")], "ignore", False, False),
]


def batch_of(rows, start: int, end: int) -> pa.Table:
    """A micro-batch as the source makes it: the rows plus the range marker for (start, end]."""
    return pa.table({
        "commit_ts": pa.array([r.commit_ts for r in rows] + [end], pa.int64()),
        "seq": pa.array([r.seq for r in rows] + [start], pa.int64()),
        "schema_name": [r.schema for r in rows] + [""], "table_name": [r.table for r in rows] + [""],
        "op": [r.op for r in rows] + [RANGE_MARKER],
        "before": pa.array([list(r.before) if r.before else None for r in rows] + [None], pa.list_(pa.string())),
        "after": pa.array([list(r.after) if r.after else None for r in rows] + [None], pa.list_(pa.string())),
    })


def replicate(cfg: UpstreamConfig, index: TxnIndex, start: int, end: int, config_text: str) -> RecordingSink:
    """What the changefeed writes for (start, end]: one batch per DDL-ended run of transactions,
    rows decoded only for the tables the source decodes at the batch start."""
    config = parse_replica_config(config_text)
    table_filter = TableFilter(config.filter.rules)
    filters = ChangeFilters(config)
    sink = RecordingSink()
    txns = index.txns_between(start, end)
    batch_start = start
    run = []
    for txn in txns:
        run.append(txn)
        if txn.is_ddl or txn is txns[-1]:
            dml = [t for t in run if not t.is_ddl]
            rows = []
            if dml:
                tables, _ = replicated_tables(index.tables_at(batch_start), table_filter.match, False)
                rows = list(read_range(BinlogRange(cfg, next(_server_ids), dml[0].start, dml[-1].end,
                                                   tuple(t.commit_ts for t in dml), tables)))
            write_batch(batch_of(rows, batch_start, txn.commit_ts), index, sink, table_filter.match_event,
                        lambda ts: None, filters=filters)
            batch_start, run = txn.commit_ts, []
    return sink


@pytest.fixture(scope="module")
def recorded(mariadb, tmp_path_factory):
    """Each row's DDL and row change through a real puller: [(db, start, end)] per row."""
    index = TxnIndex(str(tmp_path_factory.mktemp("evf") / "index.sqlite"))
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    conn = mariadb.connect()
    puller = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2).start()
    ranges = []
    try:
        puller.wait_caught_up(30)
        with conn.cursor() as cur:
            for number, (ddl, setup, target, _, _) in enumerate(ROWS):
                db = f"evf{os.getpid()}_{number}"
                cur.execute(f"CREATE DATABASE {db}")
                for statement in setup:
                    cur.execute(statement.format(db=db))
                puller.wait_caught_up(30)
                start = index.resolved_ts()
                cur.execute(ddl.format(db=db))
                if target is not None:
                    cur.execute(f"INSERT INTO {db}.`{target}` VALUES (1, 'after the DDL')")
                puller.wait_caught_up(30)
                ranges.append((db, start, index.resolved_ts()))
    finally:
        puller.stop()
        conn.close()
    assert puller.error is None
    return cfg, index, ranges


@pytest.mark.parametrize("number", range(len(ROWS)), ids=[r[0].split(" (")[0].replace("{db}.", "") for r in ROWS])
def test_event_filter_table_row(recorded, number):
    cfg, index, ranges = recorded
    db, start, end = ranges[number]
    ddl, _, target, ddl_expected, dml_expected = ROWS[number]
    config = (f"[filter]\nrules = ['{db}.t*']\n[[filter.event-filters]]\nmatcher = [\"{db}.t1\"]\n"
              'ignore-event = ["create table", "drop table", "truncate table", "rename table"]\n')
    sink = replicate(cfg, index, start, end, config)
    queries = [d.query for d in sink.ddls]
    assert any(ddl.format(db=db).split()[0] in q.upper() and db in q for q in queries) == ddl_expected, \
        f"DDL: sink got {queries}"
    if dml_expected is not None:
        assert ((db, target) in sink.tables_written()) == dml_expected, f"DML: sink got rows of {sink.tables_written()}"
    else:
        assert sink.rows == []
