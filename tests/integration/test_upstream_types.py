"""Every column type: the canonical values read from the binlog equal what MariaDB itself returns."""

import numpy
import pytest

from sparkcdc.testing.alltypes import ALL_BYTES, COLUMN_NAMES, COLUMNS, create_alltypes, insert_alltypes
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import Puller
from sparkcdc.upstream.range_reader import BinlogRange, read_range
from sparkcdc.upstream.txn_index import TxnIndex

pytestmark = pytest.mark.integration


def _select_expression(name, sql_type):
    t = sql_type.upper()
    if t.startswith(("BINARY", "VARBINARY", "BLOB")):
        return f"HEX(`{name}`)"
    if t.startswith("BIT"):
        return f"CAST(`{name}` + 0 AS CHAR)"
    if t.startswith("YEAR"):
        return f"LPAD(CAST(`{name}` AS CHAR), 4, '0')"
    return f"CAST(`{name}` AS CHAR)"


def _expected_rows(conn, db):
    expressions = ", ".join(_select_expression(n, t) for n, t in COLUMNS)
    with conn.cursor() as cur:
        cur.execute("SET time_zone='+00:00'")
        cur.execute(f"SELECT {expressions} FROM `{db}`.alltypes ORDER BY i")
        return {row[COLUMN_NAMES.index("i")]: row for row in cur.fetchall()}



def _assert_same(actual, expected):
    assert len(actual) == len(expected) == len(COLUMNS)
    for (name, sql_type), got, want in zip(COLUMNS, actual, expected):
        t = sql_type.upper()
        if want is None or got is None:
            assert got == want, name
        elif t.startswith(("BINARY", "VARBINARY", "BLOB")):
            assert got.encode("latin-1").hex().upper() == want, name
        elif t == "FLOAT":
            assert numpy.float32(float(got)) == numpy.float32(float(want)), name
            assert "e" not in got
        elif t == "DOUBLE":
            assert float(got) == float(want), name
            assert "e" not in got
        else:
            assert got == want, (name, got, want)


def test_every_type_round_trips(mariadb, fresh_db, tmp_path):
    conn = mariadb.connect(database=fresh_db)
    create_alltypes(conn, fresh_db, rows=False)
    cfg = UpstreamConfig.from_uri(mariadb.uri)
    index = TxnIndex(str(tmp_path / "index.sqlite"))
    puller = Puller(cfg, index, server_id=1001, heartbeat_seconds=0.2).start()
    try:
        puller.wait_caught_up(20)
        start_ts = index.resolved_ts()
        insert_alltypes(conn, fresh_db)
        with conn.cursor() as cur:
            inserted = _expected_rows(conn, fresh_db)
            cur.execute("UPDATE alltypes SET vc=CONCAT(vc, 'é'), d2=d2+1, tm3='-00:00:00.250' WHERE i=-2147483648")
            updated = _expected_rows(conn, fresh_db)
            cur.execute("DELETE FROM alltypes WHERE i=7")
        puller.wait_caught_up(20)
    finally:
        puller.stop()
    assert puller.error is None

    info = index.table_info_at(fresh_db, "alltypes", index.resolved_ts())
    assert info.column("en").elements == ("a", "b,c", "it's", "")
    assert info.column("st").elements == ("x", "y", "z'q")
    assert info.column("js").mysql_type == "json"
    assert info.column("bn").charset == "binary" and info.column("bn").length == 4
    assert info.column("b64").length == 64
    assert info.column("d").precision == 65 and info.column("d").scale == 30
    assert info.column("dtm6").scale == 6
    txns = index.txns_between(start_ts, index.resolved_ts())
    assert len(txns) == 5
    rng = BinlogRange(cfg, 1002, txns[0].start, txns[-1].end, tuple(t.commit_ts for t in txns),
                      {f"{fresh_db}.alltypes": info.to_json()})
    changes = list(read_range(rng))
    assert [c.op for c in changes] == ["insert"] * 3 + ["update", "delete"]
    assert [c.commit_ts for c in changes] == [t.commit_ts for t in txns]
    for change in changes[:3]:
        _assert_same(change.after, inserted[change.after[COLUMN_NAMES.index("i")]])
    update = changes[3]
    _assert_same(update.before, inserted["-2147483648"])
    _assert_same(update.after, updated["-2147483648"])
    _assert_same(changes[4].before, inserted["7"])
    # exact canonical forms the table in model/events.py fixes
    first = dict(zip(COLUMN_NAMES, changes[0].after))
    assert first["d2"] == "-0.05"
    assert first["f"] == "3.14159"
    assert first["db"] == "2.718281828459045"
    assert first["tm3"] == "-00:00:01.500"
    assert first["dtm1"] == "2024-02-29 23:59:59.9"
    assert first["bn"] == "\x00\x01\x00\x00"
    assert first["vb"].encode("latin-1") == ALL_BYTES
    assert first["b64"] == "18446744073709551615"
    second = dict(zip(COLUMN_NAMES, changes[1].after))
    assert second["db"] == "1" + "0" * 300
    assert second["st"] == ""
    assert second["en"] == "it's"
