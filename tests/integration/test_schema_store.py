"""The schema store against a real MariaDB: after each DDL, the version computed from the DDL text
equals what information_schema shows at that moment."""

import pytest

from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.store import SchemaStore
from sparkcdc.upstream.schema_reader import read_catalog, read_table_definition

pytestmark = pytest.mark.integration

SEQUENCE = [
    "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL, f FLOAT(30), ts TIMESTAMP(3) NULL)",
    "ALTER TABLE t ADD COLUMN w INT NOT NULL DEFAULT 1 AFTER id",
    "ALTER TABLE t ADD COLUMN (x TEXT(100) CHARACTER SET latin1, y ENUM('a','b,c') NOT NULL)",
    "ALTER TABLE t MODIFY v VARCHAR(40) CHARACTER SET latin1 NOT NULL FIRST",
    "ALTER TABLE t CHANGE w w2 BIGINT UNSIGNED",
    "ALTER TABLE t RENAME COLUMN w2 TO w3",
    "ALTER TABLE t ALTER COLUMN w3 SET DEFAULT 5",
    "ALTER TABLE t ADD UNIQUE KEY uv (v), ADD INDEX (w3)",
    "ALTER TABLE t DROP PRIMARY KEY",
    "ALTER TABLE t DROP COLUMN id",
    "ALTER TABLE t ADD PRIMARY KEY (v, y)",
    "ALTER TABLE t RENAME INDEX uv TO uv2",
    "ALTER TABLE t DROP INDEX uv2",
    "ALTER TABLE t COMMENT 'hello', ENGINE=InnoDB",
    "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4",
    "ALTER TABLE t DEFAULT CHARSET latin1",
    "ALTER TABLE t ADD COLUMN z CHAR(3)",
    "CREATE TABLE u (a INT NOT NULL, b INT NOT NULL, c JSON, g INT AS (a + 1) VIRTUAL, UNIQUE KEY (b), UNIQUE KEY (a))",
    "CREATE INDEX ia ON u (a, b)",
    "DROP INDEX ia ON u",
    "TRUNCATE TABLE u",
    "RENAME TABLE u TO u2, t TO t2",
    "ALTER TABLE t2 RENAME TO t3",
    "CREATE TABLE k LIKE t3",
    "ALTER TABLE k ADD COLUMN s SERIAL",
    "CREATE TABLE n (id INT AUTO_INCREMENT, note NATIONAL VARCHAR(5), b BIT, bin BINARY(4), KEY (id)) DEFAULT CHARSET=utf8mb3",
    "ALTER TABLE n DROP COLUMN note, ADD COLUMN (note2 TINYBLOB, y YEAR, dt DATETIME(6))",
    "DROP TABLE k, n",
]


def test_versions_match_information_schema_after_each_ddl(mariadb, fresh_db):
    conn = mariadb.connect(database=fresh_db)
    try:
        store = SchemaStore(read_catalog(conn))
        for ts, statement in enumerate(SEQUENCE, start=1):
            with conn.cursor() as cur:
                cur.execute(statement)
            outcome = store.apply(statement, fresh_db, ts, f"test:{ts}")
            assert outcome.event.ddl_type != T.UNPARSEABLE, (statement, outcome.event.extra)
            for (schema, table), definition in outcome.tables.items():
                actual = read_table_definition(conn, schema, table)
                if definition is None:
                    assert actual is None, statement
                    continue
                assert actual is not None, statement
                ours, theirs = definition.info(ts), actual.info(ts)
                assert ours.columns == theirs.columns, statement
                assert ours.handle_key == theirs.handle_key, statement
                assert {(i.name, i.kind, i.columns) for i in definition.indexes} == {
                    (i.name, i.kind, i.columns) for i in actual.indexes}, statement
                assert definition.charset == actual.charset, statement
        # And the whole catalog, at the end.
        final = read_catalog(conn)
        ours = {k: v.info(0) for k, v in store.catalog.tables.items() if k[0] == fresh_db}
        theirs = {k: v.info(0) for k, v in final.tables.items() if k[0] == fresh_db}
        assert ours == theirs
    finally:
        conn.close()
