"""`sparkcdc redo apply` against a real MariaDB: a downstream left mid-batch ends exactly at the
upstream state as of the redo resolved-ts (rows compared with an upstream database that ran the
same transactions), across a DDL, a unique-key swap and a primary-key change; on file, S3, GCS
and Azure storage."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from sparkcdc.config.replica import ConsistentConfig
from sparkcdc.model.events import DDLEvent, RowChange
from sparkcdc.redo.storage import RedoStorage
from sparkcdc.redo.writer import RedoWriter
from sparkcdc.testing.compare import diff_tables, read_upstream_table
from sparkcdc.testing.emulators import EmulatorNotInstalled, binary_for, start_emulator
from sparkcdc.upstream.schema_reader import read_table_info

pytestmark = pytest.mark.integration

SCHEMA = [
    "CREATE TABLE accounts (id INT PRIMARY KEY, email VARCHAR(50) NOT NULL, balance INT, UNIQUE KEY uk_email (email))",
    "CREATE TABLE audit (id INT PRIMARY KEY, note VARCHAR(20))",
]
CHECKPOINT_STATE = [
    "INSERT INTO accounts VALUES (1, 'a@x', 100), (2, 'b@x', 200), (5, 'e@x', 500)",
    "INSERT INTO audit VALUES (9, 'old')",
]
DDL = "ALTER TABLE audit ADD COLUMN extra INT NULL"


def execute(conn, statements):
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def snapshot(conn, database):
    return {t: read_upstream_table(conn, database, t) for t in ("accounts", "audit")}


def row_changes(database, before_state, after_state, table, commit_ts, seq_start=0):
    """The row changes that turn one table state into another, as the capture would log them."""
    changes, seq = [], seq_start
    for key in sorted(set(before_state) | set(after_state), key=repr):
        old, new = before_state.get(key), after_state.get(key)
        if old == new:
            continue
        before = tuple(old.values()) if old else None
        after = tuple(new.values()) if new else None
        op = "update" if old and new else "insert" if new else "delete"
        changes.append(RowChange(commit_ts, database, table, op, before, after, seq))
        seq += 1
    return changes


@pytest.fixture(params=["file", "s3", "gcs", "azblob"])
def redo_uri(request, tmp_path):
    if request.param == "file":
        yield f"file://{tmp_path}/redo"
        return
    try:
        binary_for(request.param)
    except EmulatorNotInstalled as exc:
        pytest.skip(f"{request.param} emulator not installed ({exc})")
    server = start_emulator(request.param, str(tmp_path / request.param))
    bucket = f"redo-{uuid.uuid4().hex[:8]}"
    server.create_bucket(bucket)
    yield server.uri(bucket, "changefeed-redo")
    server.stop()


def redo_cli(*args):
    return subprocess.run([sys.executable, "-m", "sparkcdc.cli.main", "redo", *args],
                          capture_output=True, text=True, timeout=180)


def test_apply_restores_a_mid_batch_downstream_to_the_resolved_ts(mariadb, redo_uri, tmp_path):
    up_db, down_db = f"redo_up_{uuid.uuid4().hex[:6]}", f"redo_down_{uuid.uuid4().hex[:6]}"
    up, down = mariadb.connect(), mariadb.connect()
    for conn, db in ((up, up_db), (down, down_db)):
        execute(conn, [f"CREATE DATABASE {db}", f"USE {db}", *SCHEMA, *CHECKPOINT_STATE])
    infos = {t: read_table_info(up, up_db, t, 1, n) for n, t in enumerate(("accounts", "audit"), start=1)}
    infos = {t: i.__class__(down_db, t, i.table_id, i.columns, i.version, i.handle_key) for t, i in infos.items()}

    # The upstream runs transactions; each one's row changes go to the redo log (schema: down_db).
    writer = RedoWriter(RedoStorage.from_uri(redo_uri), ConsistentConfig(level="eventual", storage=redo_uri,
                                                                         compression="lz4"), "default/cf")
    writer.flush_checkpoint(100)
    transactions = [
        (150, ["UPDATE accounts SET balance = 90 WHERE id = 1", "INSERT INTO audit VALUES (1, 'debit')"]),
        (160, ["UPDATE accounts SET email = 'tmp' WHERE id = 1", "UPDATE accounts SET email = 'a@x' WHERE id = 2",
               "UPDATE accounts SET email = 'b@x' WHERE id = 1"]),  # a unique-key swap in one transaction
        (170, ["UPDATE accounts SET id = 3 WHERE id = 2", "DELETE FROM audit WHERE id = 9"]),
        (250, ["INSERT INTO accounts VALUES (4, 'd@x', 40)", "DELETE FROM accounts WHERE id = 5"]),
    ]
    batches = [(100, 200, transactions[:3]), (200, 300, transactions[3:])]
    for start, end, txns in batches:
        batch = writer.batch(start, end)
        per_table = {"accounts": [], "audit": []}
        for commit_ts, statements in txns:
            before = snapshot(up, up_db)
            execute(up, [f"USE {up_db}", "BEGIN", *statements, "COMMIT"])
            after = snapshot(up, up_db)
            for table in per_table:
                per_table[table] += row_changes(down_db, before[table], after[table], table, commit_ts)
        for table, rows in per_table.items():
            batch.add_rows(infos[table], rows)
        if end == 300:  # the batch ends with a DDL
            execute(up, [f"USE {up_db}", DDL])
            batch.add_ddls([DDLEvent(300, down_db, "audit", DDL, "add column")])
        batch.commit()
    audit_v2 = read_table_info(up, up_db, "audit", 300, 2)
    audit_v2 = audit_v2.__class__(down_db, "audit", 2, audit_v2.columns, 300, audit_v2.handle_key)
    before = snapshot(up, up_db)
    execute(up, [f"USE {up_db}", "INSERT INTO audit VALUES (2, 'credit', 7)", "UPDATE accounts SET balance = 0 WHERE id = 4"])
    after = snapshot(up, up_db)
    batch = writer.batch(300, 400)
    batch.add_rows(audit_v2, row_changes(down_db, before["audit"], after["audit"], "audit", 350))
    batch.add_rows(infos["accounts"], row_changes(down_db, before["accounts"], after["accounts"], "accounts", 360))
    batch.commit()
    writer.close()

    # The downstream crashed mid-batch: the first transaction half applied, nothing after it.
    execute(down, [f"USE {down_db}", "UPDATE accounts SET balance = 90 WHERE id = 1"])
    assert snapshot(down, down_db) != snapshot(up, up_db)

    meta = redo_cli("meta", "--storage", redo_uri)
    assert meta.returncode == 0, meta.stderr
    assert meta.stdout.strip() == "checkpoint-ts:100, resolved-ts:400"
    sink_uri = f"mysql://root@127.0.0.1:{mariadb.port}/"
    for attempt in range(2):  # applying twice changes nothing: the apply is idempotent
        result = redo_cli("apply", "--storage", redo_uri, "--tmp-dir", str(tmp_path / "staging"),
                          "--sink-uri", sink_uri)
        assert result.returncode == 0, result.stderr
        assert "applied" in result.stdout and "1 DDLs" in result.stdout
        expected, actual = snapshot(up, up_db), snapshot(down, down_db)
        for table in expected:
            assert diff_tables(expected[table], actual[table]) == [], (attempt, table)
    assert expected["accounts"][("3",)]["email"] == "a@x" and expected["audit"][("2",)]["extra"] == "7"


def test_apply_refuses_a_storage_without_a_redo_log(tmp_path, mariadb):
    result = redo_cli("apply", "--storage", f"file://{tmp_path}/empty", "--tmp-dir", str(tmp_path),
                      "--sink-uri", f"mysql://root@127.0.0.1:{mariadb.port}/")
    assert result.returncode == 1
    assert "SPARKCDC:ErrRedoMetaFileNotFound" in result.stderr


def test_apply_refuses_a_non_mysql_sink(tmp_path):
    result = redo_cli("apply", "--storage", f"file://{tmp_path}/r", "--tmp-dir", str(tmp_path),
                      "--sink-uri", "kafka://127.0.0.1:9092/t?protocol=canal-json")
    assert result.returncode == 1 and "mysql://" in result.stderr
