"""Event filters and a column selector through real changefeeds (TiCDC's `event_filter` test).

One upstream MariaDB feeds a MySQL-sink changefeed with several event filters (ignored drop
table, truncate table, delete, an insert expression over a VIRTUAL column, update expressions)
and a storage-sink changefeed whose column selector drops a column; the downstream must hold
exactly the rows the filters let through.
"""

from __future__ import annotations

import glob
import os
import time

import pytest

from sparkcdc.testing.compare import read_upstream_table
from sparkcdc.testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

DB = "e2e_filter"

CONFIG = f'''
[filter]
rules = ["{DB}.*"]

[[filter.event-filters]]
matcher = ["{DB}.t1"]
ignore-event = ["delete"]
ignore-insert-value-expr = "doubled > 100 OR name = 'ignore'"
ignore-update-new-value-expr = "gender = 'secret'"
ignore-update-old-value-expr = "age < 0"

[[filter.event-filters]]
matcher = ["{DB}.t_drop", "{DB}.t_trunc"]
ignore-event = ["drop table", "truncate table"]
'''

STORAGE_CONFIG = f'''
[filter]
rules = ["{DB}.t_sel"]

[[sink.column-selectors]]
matcher = ["{DB}.t_sel"]
columns = ["*", "!secret"]
'''


def wait_until(check, what: str, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception:
            pass
        time.sleep(1)
    raise AssertionError(f"{what} not seen within {timeout}s")


def test_event_filters_and_column_selector(mariadb, mariadb_factory, tmp_path):
    downstream = mariadb_factory()
    config, storage_config = tmp_path / "cf.toml", tmp_path / "storage.toml"
    config.write_text(CONFIG)
    storage_config.write_text(STORAGE_CONFIG)
    out_dir = tmp_path / "storage-out"
    server = ServerProcess(str(tmp_path / "cdc"), mariadb.uri).start()
    try:
        server.cli("changefeed", "create", "-c", "filtered", "--config", str(config), "--no-confirm",
                   "--sink-uri", f"mysql://root@127.0.0.1:{downstream.port}/")
        server.cli("changefeed", "create", "-c", "selected", "--config", str(storage_config),
                   "--no-confirm", "--sink-uri", f"file://{out_dir}?protocol=csv&flush-interval=2s")
        up = mariadb.connect()
        with up.cursor() as cur:
            for statement in [
                f"CREATE DATABASE {DB}",
                f"CREATE TABLE {DB}.t1 (id INT PRIMARY KEY, name VARCHAR(32), age INT, gender VARCHAR(8),"
                " doubled INT AS (age * 2) VIRTUAL)",
                f"CREATE TABLE {DB}.t_drop (id INT PRIMARY KEY, v VARCHAR(8))",
                f"CREATE TABLE {DB}.t_trunc (id INT PRIMARY KEY, v VARCHAR(8))",
                f"CREATE TABLE {DB}.t_sel (id INT PRIMARY KEY, v VARCHAR(16), secret VARCHAR(16))",
                f"INSERT INTO {DB}.t1 (id, name, age, gender) VALUES (1, 'a', 10, 'm')",
                f"INSERT INTO {DB}.t1 (id, name, age, gender) VALUES (2, 'b', 60, 'f')",    # doubled 120
                f"INSERT INTO {DB}.t1 (id, name, age, gender) VALUES (3, 'ignore', 1, 'm')",
                f"INSERT INTO {DB}.t1 (id, name, age, gender) VALUES (4, 'd', 20, 'f')",
                f"INSERT INTO {DB}.t1 (id, name, age, gender) VALUES (5, 'e', -5, 'm')",
                f"UPDATE {DB}.t1 SET gender = 'secret' WHERE id = 1",                        # new expr
                f"UPDATE {DB}.t1 SET name = 'e2' WHERE id = 5",                              # old expr
                f"UPDATE {DB}.t1 SET name = 'd2' WHERE id = 4",                              # kept
                f"DELETE FROM {DB}.t1 WHERE id = 4",                                         # ignored
                f"INSERT INTO {DB}.t_drop VALUES (1, 'x'), (2, 'y')",
                f"DROP TABLE {DB}.t_drop",                                                   # ignored
                f"INSERT INTO {DB}.t_trunc VALUES (1, 'x'), (2, 'y')",
                f"TRUNCATE TABLE {DB}.t_trunc",                                              # ignored
                f"INSERT INTO {DB}.t_trunc VALUES (3, 'z')",
                f"INSERT INTO {DB}.t_sel VALUES (1, 'visible-1', 'TOPSECRET-1'), (2, 'visible-2', 'TOPSECRET-2')",
                f"UPDATE {DB}.t_sel SET v = 'visible-3', secret = 'TOPSECRET-3' WHERE id = 2",
                f"CREATE TABLE {DB}.finish_mark (id INT PRIMARY KEY)",
                f"INSERT INTO {DB}.finish_mark VALUES (1)",
            ]:
                cur.execute(statement)
        down = downstream.connect()

        def finished():
            with down.cursor() as cur:
                return cur.execute(f"SELECT 1 FROM {DB}.finish_mark")
        wait_until(finished, "finish_mark downstream")

        t1 = read_upstream_table(down, DB, "t1")
        assert {k: (r["name"], r["age"], r["gender"]) for k, r in t1.items()} == {
            ("1",): ("a", "10", "m"), ("4",): ("d2", "20", "f"), ("5",): ("e", "-5", "m")}
        assert sorted(read_upstream_table(down, DB, "t_drop")) == [("1",), ("2",)]
        assert sorted(read_upstream_table(down, DB, "t_trunc")) == [("1",), ("2",), ("3",)]

        def storage_text():
            files = glob.glob(os.path.join(out_dir, DB, "t_sel", "**", "*.csv"), recursive=True)
            text = "".join(open(f, encoding="utf-8").read() for f in files)
            return text if "visible-3" in text else None
        text = wait_until(storage_text, "t_sel rows in the storage sink", timeout=120)
        assert "visible-1" in text and "TOPSECRET" not in text
        schemas = glob.glob(os.path.join(out_dir, DB, "t_sel", "meta", "schema_*.json"))
        assert schemas and all('"secret"' not in open(s).read() for s in schemas)
    finally:
        server.stop()
