"""The puller against a real MariaDB: transaction cutting, commit-ts, DDL versions, restart, ranges."""

import itertools
import time

import pyarrow as pa
import pytest

from sparkcdc.errors import ErrStartTsInvalid, ErrUpstreamBinlogConfig
from sparkcdc.model import tso
from sparkcdc.model.change_batch import RANGE_MARKER
from sparkcdc.pipeline.planning import BatchOffset, SourceOptions, plan_next_batch, plan_partitions
from sparkcdc.pipeline.stream_reader import BinlogStreamReader
from sparkcdc.pipeline.transport import unpack_changes
from sparkcdc.testing.mariadb import binlog_gtids
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration

_server_ids = itertools.count(2000)


@pytest.fixture
def setup(mariadb, fresh_db, tmp_path):
    """(cfg, index, start_puller, conn) with a puller started on a fresh index."""
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    conn = mariadb.connect(database=fresh_db)
    pullers = []

    def start_puller():
        puller = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2).start()
        pullers.append(puller)
        puller.wait_caught_up(20)
        return puller

    yield cfg, index, start_puller, conn
    for puller in pullers:
        puller.stop()
        assert puller.error is None
    conn.close()


def run(conn, *statements):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def read_txns(cfg, index, txns):
    """All row changes of consecutive `txns`, read as one range."""
    tables = {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(txns[-1].commit_ts)}
    rng = BinlogRange(cfg, next(_server_ids), txns[0].start, txns[-1].end, tuple(t.commit_ts for t in txns), tables)
    return list(read_range(rng))


def assert_contiguous(txns):
    for prev, nxt in zip(txns, txns[1:]):
        assert nxt.commit_ts > prev.commit_ts
        assert nxt.start == prev.end or nxt.start.sequence > prev.end.sequence, (prev, nxt)


def test_transactions_commit_ts_and_ddl(setup, fresh_db):
    cfg, index, start_puller, conn = setup
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
    puller = start_puller()
    first = index.first_ts()
    assert index.table_info_at(fresh_db, "t", first).column_names == ("id", "v")
    run(conn, "INSERT INTO t VALUES (1, 'a')",
        "BEGIN", "INSERT INTO t VALUES (2, 'b')", "UPDATE t SET v='c' WHERE id=1", "DELETE FROM t WHERE id=2", "COMMIT",
        "ALTER TABLE t ADD COLUMN w INT",
        "INSERT INTO t VALUES (3, 'x', 9)",
        "CREATE TABLE u (k INT NOT NULL, UNIQUE KEY (k))")
    # No waiting between DDLs: versions come from the DDL text, not from information_schema.
    run(conn, "RENAME TABLE u TO u2")
    run(conn, "DROP TABLE u2")
    puller.wait_caught_up(20)
    txns = index.txns_between(first, index.resolved_ts())
    assert len(txns) == 7
    assert_contiguous(txns)
    assert [t.is_ddl for t in txns] == [False, False, True, False, True, True, True]
    assert all(t.gtid and t.gtid.startswith("0-1-") for t in txns)
    assert all(t.size == t.end.pos - t.start.pos > 0 for t in txns)

    changes = read_txns(cfg, index, txns[:2])
    assert [(c.op, c.commit_ts, c.seq) for c in changes] == [
        ("insert", txns[0].commit_ts, 0),
        ("insert", txns[1].commit_ts, 0),
        ("update", txns[1].commit_ts, 1),
        ("delete", txns[1].commit_ts, 2),
    ]
    assert changes[2].before == ("1", "a") and changes[2].after == ("1", "c")
    unlisted = BinlogRange(cfg, next(_server_ids), txns[0].start, txns[1].end, (txns[0].commit_ts, txns[1].commit_ts), {})
    assert list(read_range(unlisted)) == []
    after_alter = read_txns(cfg, index, txns[3:4])
    assert after_alter[0].after == ("3", "x", "9")

    ddls = index.ddls_between(first, index.resolved_ts())
    assert [(d.ddl_type, d.table) for d in ddls] == [
        ("add column", "t"), ("create table", "u"), ("rename table", "u2"), ("drop table", "u2")]
    assert ddls[0].table_info.column_names == ("id", "v", "w")
    assert ddls[0].pre_table_info.column_names == ("id", "v")
    assert ddls[1].table_info.handle_key == ("k",)
    assert index.next_ddl_after(first) == txns[2].commit_ts
    assert index.next_ddl_after(txns[2].commit_ts) == txns[4].commit_ts
    assert index.table_info_at(fresh_db, "t", txns[1].commit_ts).column_names == ("id", "v")
    assert index.table_info_at(fresh_db, "t", txns[2].commit_ts).column_names == ("id", "v", "w")
    names_at = lambda ts: {t.table for t in index.tables_at(ts) if t.schema == fresh_db}
    assert names_at(txns[4].commit_ts) == {"t", "u"}
    assert names_at(txns[5].commit_ts) == {"t", "u2"}
    assert names_at(txns[6].commit_ts) == {"t"}
    assert index.table_info_at(fresh_db, "u2", txns[6].commit_ts) is None
    assert index.position_at(txns[1].commit_ts) == txns[1].end
    assert index.position_at(first) == txns[0].start


def test_sequences_and_non_transactional_tables_are_cut_at_their_commit(setup, fresh_db, mariadb):
    """A sequence's NEXT VALUE/SETVAL and a MyISAM table's rows are event groups that MariaDB ends
    with a COMMIT query instead of an XID, and opens with a GTID event without a BEGIN: the puller
    cut them nowhere, took the next GTID for a broken transaction and stopped (issue 21 item 1).
    Sequences are not replicated (TiCDC's rule); the other tables' rows are, in order."""
    cfg, index, start_puller, conn = setup
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
    puller = start_puller()
    first = index.first_ts()
    run(conn, "CREATE SEQUENCE seq0 START WITH 1 MINVALUE 1 MAXVALUE 999999999999999 INCREMENT BY 1 NOCACHE CYCLE",
        "SELECT NEXT VALUE FOR seq0", "SELECT NEXT VALUE FOR seq0",
        "INSERT INTO t VALUES (NEXT VALUE FOR seq0, 1)",
        "INSERT INTO m VALUES (1, 1), (2, 2)", "UPDATE m SET v = 20 WHERE id = 2",
        "BEGIN", "INSERT INTO t VALUES (10, 10)", "INSERT INTO m VALUES (3, 3)", "COMMIT",
        "BEGIN", "INSERT INTO t VALUES (11, 11)", "INSERT INTO m VALUES (4, 4)", "ROLLBACK",
        "ALTER SEQUENCE seq0 RESTART WITH 100", "SELECT SETVAL(seq0, 500)", "SELECT NEXT VALUE FOR seq0",
        "DROP SEQUENCE seq0",
        "INSERT INTO t VALUES (12, 12)")
    puller.wait_caught_up(20)
    assert puller.health().state == "running" and puller.error is None
    txns = index.txns_between(first, index.resolved_ts())
    assert [t.gtid for t in txns] == binlog_gtids(mariadb.connect(), txns[0].start)
    assert_contiguous(txns)
    changes = read_txns(cfg, index, txns)
    assert {c.table for c in changes} == {"t", "m"}, "the sequence's own rows are not replicated"
    assert [(c.table, c.op, (c.after or c.before)) for c in changes] == [
        ("t", "insert", ("3", "1")),
        ("m", "insert", ("1", "1")), ("m", "insert", ("2", "2")), ("m", "update", ("2", "20")),
        # A transaction that changed both: MariaDB logs the MyISAM row in a group of its own first.
        ("m", "insert", ("3", "3")), ("t", "insert", ("10", "10")),
        ("m", "insert", ("4", "4")),  # rolled back, but a MyISAM table keeps it
        ("t", "insert", ("12", "12")),
    ]
    assert {d.ddl_type for d in index.ddls_between(first, index.resolved_ts())} == {"other"}


def test_create_table_select_rows_are_a_transaction_after_their_ddl(setup, fresh_db, mariadb):
    """MariaDB logs CREATE TABLE ... SELECT as one GTID group: the CREATE TABLE (with the columns
    the SELECT made), the rows, the XID (a COMMIT query for MyISAM, or when no row came). The DDL
    is a record of its own (a barrier) and the rest of the group the next one: the puller ended the
    group at the DDL and the rows reached no sink. A GTID resolves after the whole group."""
    cfg, index, start_puller, conn = setup
    run(conn, "CREATE TABLE src (id INT PRIMARY KEY, v VARCHAR(20))")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO src VALUES (%s, %s)", [(i, f"v{i}") for i in range(300)])
    puller = start_puller()
    first = index.first_ts()
    run(conn, "INSERT INTO src VALUES (1000, 'before')",
        "CREATE TABLE big (PRIMARY KEY (id)) SELECT * FROM src WHERE id < 300",
        "UPDATE big SET v = 'after' WHERE id = 7",
        "CREATE TABLE empty_one (PRIMARY KEY (id)) SELECT * FROM src WHERE id < 0",
        "CREATE TABLE mine (PRIMARY KEY (id)) ENGINE=MyISAM SELECT * FROM src WHERE id < 5",
        "CREATE OR REPLACE TABLE big (PRIMARY KEY (id)) SELECT id, v FROM src WHERE id BETWEEN 290 AND 299",
        "CREATE TABLE lk LIKE src", "INSERT INTO lk SELECT * FROM src WHERE id < 3",
        "INSERT INTO src VALUES (1001, 'last')")
    puller.wait_caught_up(20)
    txns = index.txns_between(first, index.resolved_ts())
    assert_contiguous(txns)
    assert [t.gtid for t in txns if not t.continues_group] == binlog_gtids(mariadb.connect(), txns[0].start)
    kinds = [("ddl" if t.is_ddl else "rows after ddl" if t.continues_group else "dml") for t in txns]
    assert kinds == ["dml", "ddl", "rows after ddl", "dml", "ddl", "rows after ddl", "ddl", "rows after ddl",
                     "ddl", "rows after ddl", "ddl", "dml", "dml"]
    for ddl, rest in zip(txns, txns[1:]):
        if rest.continues_group:  # the rest of the DDL's group: same GTID, right after it, later ts
            assert rest.gtid == ddl.gtid and rest.start == ddl.end and rest.commit_ts > ddl.commit_ts
            assert index.resolve_start(rest.gtid) == rest.commit_ts
            assert index.resolve_start(str(rest.end)) == rest.commit_ts

    # Read as the source plans them: batches end at each DDL, the rows come after it.
    options = SourceOptions(index_path=index.path, upstream_uri=mariadb.uri, start_ts=first,
                            server_id_base=next(_server_ids) * 10, filter_rules=(f"{fresh_db}.*",))
    reader, start, rows = BinlogStreamReader(options), BatchOffset(first), []
    while (end := plan_next_batch(index, start, 0, options.max_batch_bytes)[0]).key() > start.key():
        batches = [b for p in plan_partitions(index, options, start, end, set()) for b in reader.read(p)]
        rows += [r for r in unpack_changes(pa.Table.from_batches(batches)).to_pylist() if r["op"] != RANGE_MARKER]
        start = end
    by_txn = {t.commit_ts: i for i, t in enumerate(txns)}
    got = [(by_txn[r["commit_ts"]], r["table_name"], r["op"], r["after"][0]) for r in rows]
    assert got == ([(0, "src", "insert", "1000")] + [(2, "big", "insert", str(i)) for i in range(300)]
                   + [(3, "big", "update", "7")] + [(7, "mine", "insert", str(i)) for i in range(5)]
                   + [(9, "big", "insert", str(i)) for i in range(290, 300)]
                   + [(11, "lk", "insert", str(i)) for i in range(3)] + [(12, "src", "insert", "1001")])
    # The pure-Python reader reads the same ranges.
    rest = txns[2]
    rng = BinlogRange(cfg, next(_server_ids), rest.start, rest.end, (rest.commit_ts,),
                      {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(rest.commit_ts)},
                      continues_group=True)
    assert [c.after[0] for c in read_range(rng)] == [str(i) for i in range(300)]


def test_resolved_ts_advances_while_idle(setup):
    cfg, index, start_puller, conn = setup
    start_puller()
    before = index.resolved_ts()
    time.sleep(1.0)
    assert index.resolved_ts() > before


def test_idle_resolved_ts_follows_the_clock_with_the_default_heartbeat(mariadb, tmp_path):
    """With the server's default heartbeat, an idle upstream's resolved-ts moves again and again
    and each move takes it to the clock (not merely past its last value). How far behind it stays
    between heartbeats is a figure, taken on a quiet machine by bench/latency_bench.py (idle
    checkpoint lag); a loaded CI machine delays heartbeats by a second and more."""
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = Puller(UpstreamConfig.from_uri(mariadb.uri), index, next(_server_ids)).start()
    try:
        puller.wait_caught_up(20)
        seen, lags = [], []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            resolved = index.resolved_ts()
            if not seen or resolved != seen[-1]:
                seen.append(resolved)
                lags.append(time.time() - tso.physical_ms(resolved) / 1000)
            time.sleep(0.02)
    finally:
        puller.stop()
    assert puller.error is None
    assert seen == sorted(seen) and len(seen) >= 4, f"resolved-ts moved only {len(seen) - 1} times in 3 s while idle"
    assert min(lags[1:]) < 0.5, f"no heartbeat took resolved-ts near the clock (lags {lags})"


def test_restart_resumes_without_gaps_or_duplicates(setup, fresh_db):
    cfg, index, start_puller, conn = setup
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY)")
    puller = start_puller()
    first = index.first_ts()
    run(conn, *[f"INSERT INTO t VALUES ({i})" for i in range(5)])
    puller.wait_caught_up(20)
    puller.stop()
    resolved_at_stop = index.resolved_ts()
    run(conn, *[f"INSERT INTO t VALUES ({i})" for i in range(5, 10)])
    puller = start_puller()
    run(conn, *[f"INSERT INTO t VALUES ({i})" for i in range(10, 12)])
    puller.wait_caught_up(20)
    txns = index.txns_between(first, index.resolved_ts())
    assert len(txns) == 12
    assert_contiguous(txns)
    assert txns[5].commit_ts > resolved_at_stop
    ids = [c.after[0] for c in read_txns(cfg, index, txns)]
    assert ids == [str(i) for i in range(12)]


def test_resolve_start(setup):
    cfg, index, start_puller, conn = setup
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY)")
    puller = start_puller()
    first = index.first_ts()
    run(conn, *[f"INSERT INTO t VALUES ({i})" for i in range(3)])
    puller.wait_caught_up(20)
    txns = index.txns_between(first, index.resolved_ts())
    assert index.resolve_start("") == index.resolved_ts()
    assert index.resolve_start("0") == index.resolved_ts()
    assert index.resolve_start(str(txns[1].commit_ts)) == txns[1].commit_ts
    assert index.resolve_start(txns[1].gtid) == txns[1].commit_ts
    assert index.resolve_start(f"{txns[0].gtid},{txns[1].gtid}") == txns[1].commit_ts
    assert index.resolve_start(str(txns[1].end)) == txns[1].commit_ts
    # The previous transaction's end or the free commit-ts before txns[1]: both start right before it.
    assert txns[0].commit_ts <= index.resolve_start(str(txns[1].start)) < txns[1].commit_ts
    assert index.resolve_start(str(index.start_position())) == first
    # replicating commit_ts > resolved start begins exactly at the next transaction
    assert index.txns_between(index.resolve_start(str(txns[1].start)), index.resolved_ts())[0] == txns[1]
    with pytest.raises(ErrStartTsInvalid, match="before the first"):
        index.resolve_start(str(first - 1))
    with pytest.raises(ErrStartTsInvalid, match="not in the binlog index"):
        index.resolve_start("0-1-999999")
    with pytest.raises(ErrStartTsInvalid, match="not a transaction boundary"):
        index.resolve_start(f"{txns[1].start.file}:{txns[1].start.pos + 1}")


def test_range_across_rotation_and_adjacent_ranges(setup):
    cfg, index, start_puller, conn = setup
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY, v TEXT)")
    puller = start_puller()
    first = index.first_ts()
    run(conn, "INSERT INTO t VALUES (1, 'a'), (2, 'b')", "INSERT INTO t VALUES (3, 'c')")
    run(conn, "FLUSH BINARY LOGS")
    run(conn, "INSERT INTO t VALUES (4, 'd')", "UPDATE t SET v='z'", "DELETE FROM t WHERE id > 2")
    puller.wait_caught_up(20)
    txns = [t for t in index.txns_between(first, index.resolved_ts())]
    assert len(txns) == 5
    assert txns[2].start.sequence == txns[1].end.sequence + 1
    assert_contiguous(txns)
    whole = read_txns(cfg, index, txns)
    assert [c.op for c in whole] == ["insert"] * 4 + ["update"] * 4 + ["delete"] * 2
    # the range across the rotation holds exactly its rows
    across = read_txns(cfg, index, txns[1:3])
    assert [(c.op, c.after) for c in across] == [("insert", ("3", "c")), ("insert", ("4", "d"))]
    # split anywhere: adjacent ranges give every row exactly once
    for cut in range(1, len(txns)):
        parts = read_txns(cfg, index, txns[:cut]) + read_txns(cfg, index, txns[cut:])
        assert parts == whole


def test_compressed_binlog_fails_loudly(mariadb_factory, tmp_path):
    """The puller checks the upstream's settings at every (re)connection; a compressed event met
    anyway (the setting turned on later) is in test_puller_supervision.py."""
    server = mariadb_factory(extra_config={"log_bin_compress": "ON", "log_bin_compress_min_len": "10"})
    cfg = UpstreamConfig.from_uri(server.uri)
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = Puller(cfg, index, next(_server_ids), heartbeat_seconds=0.2).start()
    with pytest.raises(ErrUpstreamBinlogConfig) as info:
        puller.wait_caught_up(20)
    puller.stop()
    assert "log_bin_compress=OFF" in str(info.value)
    assert puller.error is info.value and puller.health().problem is info.value


def test_ddls_run_while_the_puller_is_down_get_their_own_versions(setup, fresh_db):
    """The original bug: a restart re-read information_schema and gave earlier DDLs later columns."""
    cfg, index, start_puller, conn = setup
    puller = start_puller()
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY, a INT)", "INSERT INTO t VALUES (1, 2)")
    puller.wait_caught_up(20)
    puller.stop()
    run(conn, "ALTER TABLE t ADD COLUMN b INT", "INSERT INTO t VALUES (2, 3, 4)", "ALTER TABLE t DROP COLUMN a",
        "INSERT INTO t VALUES (3, 5)", "RENAME TABLE t TO t2", "INSERT INTO t2 VALUES (4, 6)")
    start_puller()
    txns = index.txns_between(index.first_ts(), index.resolved_ts())
    changes = read_txns_at_each_version(cfg, index, txns)
    assert [c.after for c in changes] == [("1", "2"), ("2", "3", "4"), ("3", "5"), ("4", "6")]
    ddls = index.ddls_between(index.first_ts(), index.resolved_ts())
    assert [d.ddl_type for d in ddls] == ["create table", "add column", "drop column", "rename table"]
    assert index.table_info_at(fresh_db, "t2", ddls[-1].commit_ts).column_names == ("id", "b")


def read_txns_at_each_version(cfg, index, txns):
    out = []
    for txn in txns:
        if txn.is_ddl:
            continue
        tables = {f"{t.schema}.{t.table}": t.to_json() for t in index.tables_at(txn.commit_ts)}
        rng = BinlogRange(cfg, next(_server_ids), txn.start, txn.end, (txn.commit_ts,), tables)
        out.extend(read_range(rng))
    return out


def test_tso_is_between_the_upstreams_past_and_its_future(setup):
    # As PD's TSO: a transaction committed before the call is at or below it, one after it above,
    # even right after a commit the puller has not read yet (binlog times are whole seconds, so
    # the clock is no such boundary).
    cfg, index, start_puller, conn = setup
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY)")
    puller = start_puller()
    for n in range(5):
        run(conn, f"INSERT INTO t VALUES ({2 * n})")
        answer = puller.tso()
        run(conn, f"INSERT INTO t VALUES ({2 * n + 1})")
        puller.wait_caught_up(20)
        before, after = index.txns_between(0, index.resolved_ts())[-2:]
        assert before.commit_ts <= answer < after.commit_ts, (n, before.commit_ts, answer, after.commit_ts)
