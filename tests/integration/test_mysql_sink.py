"""The MySQL sink against a real downstream MariaDB: every column type, PK changes, the PK swap
of product document 003, safe mode, replays, DDL replays, parallel writers, long DDLs, and the
TiDB-only background index build (flavour forced). Row tests run both entries: RowChanges
(`write_rows`) and Arrow columns (`write_arrow`, the batch writer's columnar path)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.model.events import DDLEvent, RowChange, TableInfo
from sparkcdc.model.tso import compose
from sparkcdc.model.netting import net_changes_per_key
from sparkcdc.sink.registry import parse_sink_spec
from sparkcdc.sink.mysql.connection import RetryPolicy
from sparkcdc.sink.mysql.sink import MySQLSink
from sparkcdc.upstream.schema_reader import read_table_info

FAST_RETRY = RetryPolicy(base_delay=0.05, max_delay=0.2, max_elapsed=2.0)

ALL_TYPES = """CREATE TABLE all_types (
  id INT NOT NULL, k2 VARCHAR(20) NOT NULL,
  ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED, dec1 DECIMAL(10,2),
  f FLOAT, d DOUBLE, b BIT(10), c CHAR(5), vc VARCHAR(50), tx TEXT, bn BINARY(4), vb VARBINARY(10),
  bl BLOB, dt DATE, dtm DATETIME(3), ts TIMESTAMP(6) NULL DEFAULT NULL, tm TIME(2), yr YEAR,
  en ENUM('a','b','c'), st SET('x','y','z'), js JSON, gen INT AS (id * 2) VIRTUAL,
  PRIMARY KEY (id, k2))"""

ROW_A = ("1", "one", "-128", "65535", "-8388608", "18446744073709551615", "12345678.90",
         "1.5", "0.1", "1023", "abc", "héllo wörld ✓", "long text", "\x00\x01\x02\x03", "\xff\x00\x80",
         "\x00\xffblob\x7f", "2024-02-29", "2024-01-02 03:04:05.678", "2024-06-30 23:59:59.123456",
         "-838:59:59.00", "2155", "b", "x,z", '{"k": [1, 2]}', "2")
ROW_B = ("2", "two", "127", "0", "8388607", "0", "-0.01", "-3.25", "12345.678",
         "0", "", "", "", "\x00\x00\x00\x00", "", "", "0000-00-00", "0000-00-00 00:00:00.000",
         "1970-01-01 00:00:01.000000", "838:59:59.99", "0000", "", "", "null", "4")
ROW_NULLS = ("3", "three") + (None,) * 22 + ("6",)


def ts(n: int) -> int:
    return compose(1_700_000_000_000 + n * 1000)


def ddl(n: int, schema: str, table: str, query: str, kind: str = "create table") -> DDLEvent:
    return DDLEvent(commit_ts=ts(n), schema=schema, table=table, query=query, ddl_type=kind)


def canonical_rows(server, schema: str, info: TableInfo) -> list[tuple]:
    """The downstream table as canonical text (binary values compared as hex)."""
    expressions = []
    for c in info.columns:
        name = f"`{c.name}`"
        if c.mysql_type == "bit":
            expressions.append(f"CAST({name} + 0 AS CHAR)")
        elif c.is_binary:
            expressions.append(f"HEX({name})")
        else:
            expressions.append(f"CAST({name} AS CHAR)")
    conn = server.connect(schema)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT {', '.join(expressions)} FROM `{info.table}` ORDER BY 1, 2")
        rows = cur.fetchall()
    conn.close()
    return sorted((tuple(r) for r in rows), key=lambda r: (int(r[0]), r[1]))


def expected(info: TableInfo, *rows) -> list[tuple]:
    out = []
    for row in rows:
        out.append(tuple(v.encode("latin-1").hex().upper() if c.is_binary and v is not None else v
                         for c, v in zip(info.columns, row)))
    return sorted(out, key=lambda r: (int(r[0]), r[1]))


def normalize_json(rows, position):
    import json
    return [r[:position] + ((json.loads(r[position]) if r[position] is not None else None),) + r[position + 1:]
            for r in rows]


@pytest.fixture
def downstream(mariadb_factory):
    return mariadb_factory()


def open_sink(server, query: str = "", replicating_ts: int = 0) -> MySQLSink:
    uri = server.uri.replace("root@", "root:@") + ("?" + query if query else "")
    return MySQLSink(uri, ReplicaConfig(), replicating_ts=replicating_ts, retry=FAST_RETRY,
                     ddl_retry=FAST_RETRY)


IMAGE = pa.list_(pa.field("element", pa.string()))


def write(sink: MySQLSink, info: TableInfo, rows: list[RowChange], columnar: bool) -> None:
    """`rows` through write_rows, or as the batch writer hands a columnar run: Arrow columns."""
    if not columnar:
        sink.write_rows(info, rows)
        return
    sink.write_arrow(info, pa.array([r.commit_ts for r in rows], pa.int64()), pa.array([r.op for r in rows]),
                     pa.array([r.before for r in rows], IMAGE), pa.array([r.after for r in rows], IMAGE))


ENTRIES = pytest.mark.parametrize("columnar", [False, True], ids=["rowchange", "columnar"])


def setup_table(sink: MySQLSink, server, schema: str, create: str, table: str) -> TableInfo:
    sink.write_ddl(ddl(1, schema, "", f"CREATE DATABASE `{schema}`", "create database"))
    sink.write_ddl(ddl(2, schema, table, create))
    conn = server.connect()
    info = read_table_info(conn, schema, table, version=ts(2), table_id=7)
    conn.close()
    return info


@ENTRIES
def test_every_column_type_with_pk_changes_and_replays(downstream, columnar):
    with open_sink(downstream, "worker-count=4") as sink:
        info = setup_table(sink, downstream, "db1", ALL_TYPES, "all_types")
        assert info.handle_key == ("id", "k2") and info.column("gen").generated
        row_d = ("4", "four") + ROW_B[2:-1] + ("8",)
        rows = [
            RowChange(ts(3), "db1", "all_types", "insert", after=ROW_A, seq=0),
            RowChange(ts(3), "db1", "all_types", "insert", after=ROW_B, seq=1),
            RowChange(ts(3), "db1", "all_types", "insert", after=ROW_NULLS, seq=2),
            RowChange(ts(3), "db1", "all_types", "insert", after=row_d, seq=3),
        ]
        write(sink, info, rows, columnar)
        sink.flush()
        got = canonical_rows(downstream, "db1", info)
        assert normalize_json(got, 23) == normalize_json(expected(info, ROW_A, ROW_B, ROW_NULLS, row_d), 23)

        # A PK-changing update, two plain updates (one upsert statement of every type, NULLs
        # replaced by values among them), a delete, in one transaction; then replay it.
        moved = ("10",) + ROW_A[1:-1] + ("20",)
        changed = ROW_B[:10] + ("new",) + ROW_B[11:]
        filled = ROW_NULLS[:2] + ROW_A[2:-1] + ROW_NULLS[-1:]
        txn = [
            RowChange(ts(4), "db1", "all_types", "update", before=ROW_A, after=moved, seq=0),
            RowChange(ts(4), "db1", "all_types", "update", before=ROW_B, after=changed, seq=1),
            RowChange(ts(4), "db1", "all_types", "update", before=ROW_NULLS, after=filled, seq=2),
            RowChange(ts(4), "db1", "all_types", "delete", before=row_d, seq=3),
        ]
        write(sink, info, txn, columnar)
        sink.flush()
        want = normalize_json(expected(info, moved, changed, filled), 23)
        assert normalize_json(canonical_rows(downstream, "db1", info), 23) == want
    # A new sink that knows everything up to ts(4) may be a replay writes idempotently.
    with open_sink(downstream, replicating_ts=ts(4)) as sink:
        write(sink, info, rows, columnar)
        write(sink, info, txn, columnar)
        sink.flush()
        assert normalize_json(canonical_rows(downstream, "db1", info), 23) == want
    # Outside the window, a duplicate INSERT falls back to idempotent writing instead of failing.
    with open_sink(downstream) as sink:
        write(sink, info, rows + txn, columnar)
        sink.flush()
        assert normalize_json(canonical_rows(downstream, "db1", info), 23) == want


PK_TABLE = "CREATE TABLE t (a INT PRIMARY KEY, b INT, u VARCHAR(10), UNIQUE KEY uk (u))"


def pk_rows(server, schema="db2"):
    conn = server.connect(schema)
    with conn.cursor() as cur:
        cur.execute("SELECT a, b, u FROM t ORDER BY a")
        rows = cur.fetchall()
    conn.close()
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("query, replicating", [("", 0), ("safe-mode=true", 0), ("", 10**30),
                                                 ("multi-stmt-enable=false&batch-dml-enable=false", 0)])
@ENTRIES
def test_pk_swap_example_of_document_003(downstream, query, replicating, columnar):
    with open_sink(downstream, query, replicating_ts=replicating) as sink:
        info = setup_table(sink, downstream, "db2", PK_TABLE, "t")
        write(sink, info, [RowChange(ts(3), "db2", "t", "insert", after=("1", "1", "p"), seq=0),
                           RowChange(ts(4), "db2", "t", "insert", after=("2", "2", "q"), seq=0)], columnar)
        # BEGIN; UPDATE t SET a = 3 WHERE a = 2; UPDATE t SET a = 2 WHERE a = 1; COMMIT;
        write(sink, info, [RowChange(ts(5), "db2", "t", "update", before=("2", "2", "q"), after=("3", "2", "q")),
                           RowChange(ts(5), "db2", "t", "update", before=("1", "1", "p"), after=("2", "1", "p"),
                                     seq=1)], columnar)
        sink.flush()
        assert pk_rows(downstream) == [(2, 1, "p"), (3, 2, "q")]
        # Three-statement swap of two rows' keys, and a unique-key swap through a temporary value,
        # netted to one change per key as the pipeline does before any sink.
        write(sink, info, net_changes_per_key(info, [
            RowChange(ts(6), "db2", "t", "update", before=("2", "1", "p"), after=("9", "1", "p"), seq=0),
            RowChange(ts(6), "db2", "t", "update", before=("3", "2", "q"), after=("2", "2", "q"), seq=1),
            RowChange(ts(6), "db2", "t", "update", before=("9", "1", "p"), after=("3", "1", "p"), seq=2),
            RowChange(ts(6), "db2", "t", "update", before=("3", "1", "p"), after=("3", "1", "tmp"), seq=3),
            RowChange(ts(6), "db2", "t", "update", before=("2", "2", "q"), after=("2", "2", "p"), seq=4),
            RowChange(ts(6), "db2", "t", "update", before=("3", "1", "tmp"), after=("3", "1", "q"), seq=5),
        ]), columnar)
        sink.flush()
        assert pk_rows(downstream) == [(2, 2, "p"), (3, 1, "q")]


@ENTRIES
def test_safe_mode_with_missing_rows(downstream, columnar):
    with open_sink(downstream, "safe-mode=true") as sink:
        info = setup_table(sink, downstream, "db2", PK_TABLE, "t")
        # Updates and deletes of rows the downstream never had: REPLACE creates, DELETE is a no-op.
        write(sink, info, [
            RowChange(ts(3), "db2", "t", "update", before=("1", "1", "a"), after=("1", "5", "a")),
            RowChange(ts(3), "db2", "t", "delete", before=("7", "7", "z"), seq=1),
            RowChange(ts(3), "db2", "t", "insert", after=("8", "8", "h"), seq=2),
            RowChange(ts(4), "db2", "t", "insert", after=("8", "9", "h")),
        ], columnar)
        sink.flush()
        assert pk_rows(downstream) == [(1, 5, "a"), (8, 9, "h")]


def test_ddl_replay_is_idempotent_and_uses_upstream_time(downstream):
    with open_sink(downstream) as sink:
        info = setup_table(sink, downstream, "db3", "CREATE TABLE t (a INT PRIMARY KEY)", "t")
        # The row exists before ADD COLUMN, so its default is the DDL's (upstream) time.
        sink.write_rows(info, [RowChange(ts(3), "db3", "t", "insert", after=("1",))])
        sink.flush()
        add = ddl(4, "db3", "t", "ALTER TABLE t ADD COLUMN created TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
                  "add column")
        index = ddl(5, "db3", "t", "CREATE INDEX ix ON t (created)", "add index")
        sink.write_ddl(add)
        sink.write_ddl(index)
        # Replays of every DDL (and of the database/table creation) are treated as done.
        for event in (ddl(1, "db3", "", "CREATE DATABASE `db3`", "create database"),
                      ddl(2, "db3", "t", "CREATE TABLE t (a INT PRIMARY KEY)"), add, index,
                      ddl(6, "db3", "t", "ALTER TABLE t DROP COLUMN nope", "drop column"),
                      ddl(7, "db3", "gone", "DROP TABLE gone", "drop table")):
            sink.write_ddl(event)
        conn = downstream.connect("db3")
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SELECT a, CAST(created AS CHAR) FROM t")
            assert cur.fetchall() == ((1, "2023-11-14 22:13:24"),)  # ts(4): 1_700_000_004 s
        conn.close()
        with pytest.raises(Exception, match="ErrExecDDLFailed"):
            sink.write_ddl(ddl(8, "db3", "t", "ALTER TABLE t ADD COLUMN bad NOSUCHTYPE", "add column"))


@ENTRIES
def test_parallel_writers_keep_per_key_order(downstream, columnar):
    """Many small transactions over a few hot keys through 8 workers: the last write wins per key."""
    with parse_sink_spec(downstream.uri + "?worker-count=8&max-txn-row=16", ReplicaConfig()).open() as sink:
        info = setup_table(sink, downstream, "db4",
                           "CREATE TABLE t (a INT PRIMARY KEY, v INT, u INT NOT NULL, UNIQUE KEY (u))", "t")
        state: dict[int, tuple[str, str, str]] = {}
        n, batch = 10, []
        for i in range(600):
            key = i % 37
            seq = 0
            rows = []
            old = state.get(key)
            new = (str(key), str(i), str(1000 + key))
            if old is None:
                rows.append(RowChange(ts(n), "db4", "t", "insert", after=new, seq=seq))
                state[key] = new
            elif i % 5 == 0:
                rows.append(RowChange(ts(n), "db4", "t", "delete", before=old, seq=seq))
                del state[key]
            else:
                rows.append(RowChange(ts(n), "db4", "t", "update", before=old, after=new, seq=seq))
                state[key] = new
            batch.extend(rows)
            if len(batch) >= 50 or i == 599:  # columnar: a run of many transactions at once
                write(sink, info, batch, columnar)
                batch = []
            n += 1
        sink.flush()
        conn = downstream.connect("db4")
        with conn.cursor() as cur:
            cur.execute("SELECT a, v, u FROM t ORDER BY a")
            got = [tuple(str(x) for x in r) for r in cur.fetchall()]
        conn.close()
        assert got == [state[k] for k in sorted(state)]


def test_transaction_atomicity_table_keeps_a_large_transaction_whole(downstream):
    with open_sink(downstream, "transaction-atomicity=table&max-txn-row=8") as sink:
        info = setup_table(sink, downstream, "db5", "CREATE TABLE t (a INT PRIMARY KEY)", "t")
        sink.write_rows(info, [RowChange(ts(3), "db5", "t", "insert", after=(str(i),), seq=i) for i in range(100)])
        sink.flush()
        conn = downstream.connect("db5")
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t")
            assert cur.fetchone()[0] == 100
        conn.close()


def test_downstream_restart_is_retried_and_a_dead_one_fails_with_a_coded_error(downstream):
    import threading
    import time

    sink = MySQLSink(downstream.uri, ReplicaConfig(), retry=RetryPolicy(0.05, 0.5, 20.0), ddl_retry=FAST_RETRY)
    info = setup_table(sink, downstream, "db6", "CREATE TABLE t (a INT PRIMARY KEY)", "t")
    sink.write_rows(info, [RowChange(ts(3), "db6", "t", "insert", after=("1",))])
    sink.flush()
    downstream.stop()
    restart = threading.Thread(target=lambda: (time.sleep(1.0), downstream.start()))
    restart.start()
    sink.write_rows(info, [RowChange(ts(4), "db6", "t", "insert", after=("2",))])
    sink.flush()
    restart.join()
    conn = downstream.connect("db6")
    with conn.cursor() as cur:
        cur.execute("SELECT a FROM t ORDER BY a")
        assert cur.fetchall() == ((1,), (2,))
    conn.close()
    sink.close()

    sink = open_sink(downstream)
    sink.table_meta(info)
    downstream.stop()
    sink.write_rows(info, [RowChange(ts(5), "db6", "t", "insert", after=("3",))])
    with pytest.raises(Exception, match="ErrMySQLConnectionError"):
        sink.flush()
    sink.close()


def test_unreachable_or_refusing_downstream_at_construction_is_a_coded_error(downstream):
    from sparkcdc.errors import ErrMySQLConnectionError

    with pytest.raises(ErrMySQLConnectionError, match="Access denied") as refused:
        MySQLSink(downstream.uri.replace("root@", "root:wrong-pw@"), ReplicaConfig(), retry=FAST_RETRY)
    assert "wrong-pw" not in str(refused.value)
    with pytest.raises(ErrMySQLConnectionError, match="unreachable"):
        MySQLSink("mysql://root@127.0.0.1:1/", ReplicaConfig(), retry=FAST_RETRY)


def running_statements(server) -> list[tuple[str, str]]:
    """(state, statement) of every statement the downstream is running."""
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT STATE, INFO FROM information_schema.PROCESSLIST WHERE INFO IS NOT NULL "
                    "AND INFO NOT LIKE '%PROCESSLIST%'")
        rows = [(state or "", info) for state, info in cur.fetchall()]
    conn.close()
    return rows


class BatchIndex:
    """The part of TxnIndex that write_batch reads: table definitions and the DDLs of a range."""

    def __init__(self, tables: list[TableInfo], ddls: list[DDLEvent]):
        self.tables, self.ddls = tables, ddls

    def table_infos_at(self, names: list[tuple[str, str]], ts: int):
        return [next((t for t in self.tables if (t.schema, t.table) == name), None) for name in names]

    def ddls_between(self, low: int, high: int) -> list[DDLEvent]:
        return [d for d in self.ddls if low < d.commit_ts <= high]


def batch_rows(start: int, end: int, *rows) -> pa.Table:
    """A micro-batch as the source hands it over: rows plus the (start, end] range marker."""
    from sparkcdc.model.change_batch import RANGE_MARKER

    rows = [*rows, (end, start, "", "", RANGE_MARKER, None, None)]
    names = ["commit_ts", "seq", "schema_name", "table_name", "op", "before", "after"]
    types = [pa.int64(), pa.int64(), pa.string(), pa.string(), pa.string(), pa.list_(pa.string()),
             pa.list_(pa.string())]
    return pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)},
                    schema=pa.schema(list(zip(names, types))))


def test_index_ddl_builds_in_the_background_on_a_tidb_flavoured_downstream(downstream):
    """TiDB's background ADD INDEX, run against MariaDB by forcing the flavour (TEST-ONLY hook):
    the pipeline's write_batch persists the checkpoint while the index builds, a later DDL on the
    same table waits for it, one on another table does not, and the index exists at the end.
    A reader holding table t's metadata lock stands in for a long index build: the build cannot
    finish until the reader lets go, for as long as the test needs."""
    import threading
    import time

    from sparkcdc.pipeline.batch_sink import write_batch
    from sparkcdc.sink.mysql.connection import DownstreamFlavor

    sink = MySQLSink(downstream.uri, ReplicaConfig(), retry=FAST_RETRY, ddl_retry=FAST_RETRY, async_ddl_grace=0.5,
                     test_only_flavor=DownstreamFlavor.TIDB)
    safety = None
    try:
        t = setup_table(sink, downstream, "db7", "CREATE TABLE t (a INT PRIMARY KEY, v INT)", "t")
        sink.write_ddl(ddl(3, "db7", "u", "CREATE TABLE u (a INT PRIMARY KEY, v INT)"))
        conn = downstream.connect()
        u = read_table_info(conn, "db7", "u", version=ts(3), table_id=8)
        conn.close()
        sink.write_rows(t, [RowChange(ts(4), "db7", "t", "insert", after=(str(i), str(i % 7)), seq=i)
                            for i in range(200)])
        sink.flush()

        reader = downstream.connect("db7", autocommit=False)
        with reader.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT COUNT(*) FROM t")
            cur.execute("SELECT CONNECTION_ID()")
            reader_id = cur.fetchone()[0]
        # If the sink regressed to waiting for the index, the test fails instead of hanging.
        safety = threading.Timer(30, lambda: downstream.connect().cursor().execute(f"KILL {reader_id}"))
        safety.start()
        # Batches go through the pipeline's write_batch, which persists the checkpoint last.
        add_index = ddl(5, "db7", "t", "CREATE INDEX ix_v ON t (v)", "create index")
        add_column_u = ddl(7, "db7", "u", "ALTER TABLE u ADD COLUMN c INT", "add column")
        index = BatchIndex([t, u], [add_index, add_column_u])
        checkpoints: list[int] = []
        started = time.monotonic()
        write_batch(batch_rows(ts(4), ts(5)), index, sink, lambda schema, table: True, checkpoints.append)
        assert checkpoints == [ts(5)] and time.monotonic() - started < 5  # the grace period, not the build
        assert sink.running_index_builds() == [add_index]
        assert any(info == add_index.query for _, info in running_statements(downstream))

        # Rows and DDL of another table go on while the index builds.
        write_batch(batch_rows(ts(5), ts(7), (ts(6), 0, "db7", "u", "insert", None, ["1", "1"])), index, sink,
                    lambda schema, table: True, checkpoints.append)
        assert checkpoints == [ts(5), ts(7)] and sink.running_index_builds() == [add_index]

        # A later DDL on t waits in the sink: it is not even sent while the index builds.
        later = ddl(8, "db7", "t", "ALTER TABLE t ADD COLUMN w INT", "add column")
        waiter = threading.Thread(target=sink.write_ddl, args=(later,), daemon=True)
        waiter.start()
        waiter.join(1.5)
        assert waiter.is_alive()
        assert not any("ADD COLUMN w" in info for _, info in running_statements(downstream))

        reader.commit()  # the build can finish now; then the waiting DDL runs
        waiter.join(30)
        assert not waiter.is_alive() and sink.running_index_builds() == []
        reader.close()
        check = downstream.connect("db7")
        with check.cursor() as cur:
            cur.execute("SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
                        "WHERE TABLE_SCHEMA = 'db7' AND TABLE_NAME = 't' AND INDEX_NAME = 'ix_v'")
            assert cur.fetchall() == (("ix_v", "v"),)
            cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'db7' "
                        "AND TABLE_NAME IN ('t', 'u') ORDER BY TABLE_NAME, ORDINAL_POSITION")
            assert [r[0] for r in cur.fetchall()] == ["a", "v", "w", "a", "v", "c"]
            cur.execute("SELECT COUNT(*), SUM(v) FROM t")
            assert cur.fetchone() == (200, sum(i % 7 for i in range(200)))
        check.close()
    finally:
        if safety is not None:
            safety.cancel()
        sink.close()


def test_long_running_ddl_is_not_cut_by_the_read_timeout(downstream, caplog):
    """TiCDC runs table-rewriting DDLs without a timeout. With read-timeout=1s, an ADD COLUMN that
    waits 3s (a reader holds the table's metadata lock) finishes on the first try."""
    import threading
    import time

    with open_sink(downstream, "read-timeout=1s") as sink:
        setup_table(sink, downstream, "db8", "CREATE TABLE t (a INT PRIMARY KEY)", "t")
        reader = downstream.connect("db8", autocommit=False)
        with reader.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT COUNT(*) FROM t")
        release = threading.Timer(3.0, reader.commit)
        release.start()
        started = time.monotonic()
        sink.write_ddl(ddl(3, "db8", "t", "ALTER TABLE t ADD COLUMN c INT", "add column"))
        assert time.monotonic() - started >= 2.5
        release.join()
        reader.close()
    assert "retrying" not in caplog.text
    conn = downstream.connect("db8")
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'db8' "
                    "AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION")
        assert [r[0] for r in cur.fetchall()] == ["a", "c"]
    conn.close()
