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
    # Found by tools/ddl_corpus.py on MariaDB's own suite (main/partition_alter.test,
    # suite/rpl/t/sequence.test, suite/parts/inc/partition_mgm.inc):
    "CREATE TABLE sw (k INT, l INT, KEY (k))",
    "ALTER TABLE sw RENAME COLUMN k TO l, RENAME COLUMN l TO k",
    "CREATE SEQUENCE s1",
    "DROP TABLE s1, sw",
    "ALTER TABLE gone OPTIMIZE PARTITION p0",  # logged although the table does not exist
    "CREATE SEQUENCE s2",
    "RENAME TABLE s2 TO s3",
    "CREATE TABLE ai (b INT AUTO_INCREMENT NULL UNIQUE, ID INT NOT NULL, PRIMARY KEY (id))",
    "CREATE TABLE ai2 (c INT AUTO_INCREMENT, KEY (c))",
]


# TiCDC's partition_table workload (tests/integration_tests/partition_table/data/prepare.sql, its
# DDL as MariaDB accepts it), the rest of MariaDB 10.11's partition DDLs, and common_1's chained
# multi-table RENAME.
PARTITION_SEQUENCE = [
    "CREATE TABLE t (a INT, PRIMARY KEY (a)) PARTITION BY HASH(a) PARTITIONS 5",
    "ALTER TABLE t TRUNCATE PARTITION p3",
    "CREATE TABLE t1 (a INT PRIMARY KEY) PARTITION BY RANGE ( a ) ( PARTITION p0 VALUES LESS THAN (6),"
    "PARTITION p1 VALUES LESS THAN (11),PARTITION p2 VALUES LESS THAN (21))",
    "ALTER TABLE t1 ADD PARTITION (PARTITION p3 VALUES LESS THAN (30), PARTITION p4 VALUES LESS THAN (40))",
    "ALTER TABLE t1 TRUNCATE PARTITION p0",
    "ALTER TABLE t1 DROP PARTITION p1",
    "ALTER TABLE t REMOVE PARTITIONING",
    "ALTER TABLE t PARTITION BY HASH (a) PARTITIONS 5",
    "CREATE TABLE t2 (a INT PRIMARY KEY)",
    "ALTER TABLE t1 EXCHANGE PARTITION p3 WITH TABLE t2",
    "ALTER TABLE t1 REORGANIZE PARTITION p0,p2 INTO (PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS "
    "THAN (10), PARTITION p2 VALUES LESS THAN (21))",
    "ALTER TABLE t1 REORGANIZE PARTITION p2,p3,p4 INTO (PARTITION p2 VALUES LESS THAN (20), PARTITION p3 VALUES LESS "
    "THAN (26), PARTITION p4 VALUES LESS THAN (35), PARTITION pMax VALUES LESS THAN (MAXVALUE))",
    "ALTER TABLE t1 PARTITION BY KEY(a) PARTITIONS 7",
    "ALTER TABLE t1 PARTITION BY RANGE(a) (PARTITION p0 VALUES LESS THAN (5), PARTITION p2 VALUES LESS THAN (20), "
    "PARTITION p3 VALUES LESS THAN (26), PARTITION p4 VALUES LESS THAN (35), PARTITION pMax VALUES LESS THAN (MAXVALUE))",
    "ALTER TABLE t ADD PARTITION PARTITIONS 2",
    "ALTER TABLE t COALESCE PARTITION 3",
    "ALTER TABLE t REORGANIZE PARTITION",
    "ALTER TABLE t1 ANALYZE PARTITION p0, p2",
    "ALTER TABLE t1 OPTIMIZE PARTITION p0",
    "ALTER TABLE t1 REBUILD PARTITION ALL",
    "ALTER TABLE t1 REPAIR PARTITION p3",
    "ALTER TABLE t1 CHECK PARTITION p4",
    "ALTER TABLE t1 CONVERT PARTITION pMax TO TABLE t1_max",
    "ALTER TABLE t1_max ADD COLUMN note VARCHAR(10) DEFAULT 'x'",
    "ALTER TABLE t1_max DROP COLUMN note",
    "ALTER TABLE t1 CONVERT TABLE t1_max TO PARTITION pMax VALUES LESS THAN (MAXVALUE)",
    "CREATE TABLE l (id INT NOT NULL, v INT, UNIQUE KEY (id)) PARTITION BY LIST (id) (PARTITION a VALUES IN (1, 2))",
    "ALTER TABLE l ADD PARTITION (PARTITION b VALUES IN (3, 4))",
    "ALTER TABLE l ADD COLUMN w INT PARTITION BY HASH(id) PARTITIONS 2",
    "CREATE TABLE rename_t3 (id INT PRIMARY KEY, val INT)",
    "CREATE TABLE rename_t1 (id INT PRIMARY KEY, val INT)",
    "CREATE TABLE rename_t2 (id INT PRIMARY KEY, val INT, extra TEXT)",
    "RENAME TABLE rename_t1 TO rename_t4, rename_t2 TO rename_t1, rename_t3 TO rename_t2",
    "RENAME TABLE rename_t1 TO tmp, rename_t4 TO rename_t1, tmp TO rename_t4",
]


def _replay_and_compare(conn, database, statements) -> None:
    """Run each statement on the server and in the store; after each, every table the store
    reports changed has the definition information_schema shows."""
    store = SchemaStore(read_catalog(conn))
    for ts, statement in enumerate(statements, start=1):
        with conn.cursor() as cur:
            cur.execute(statement)
        outcome = store.apply(statement, database, ts, f"test:{ts}")
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
    ours = {k: v.info(0) for k, v in store.catalog.tables.items() if k[0] == database}
    theirs = {k: v.info(0) for k, v in final.tables.items() if k[0] == database}
    assert ours == theirs


def test_versions_match_information_schema_after_each_ddl(mariadb, fresh_db):
    conn = mariadb.connect(database=fresh_db)
    try:
        _replay_and_compare(conn, fresh_db, SEQUENCE)
    finally:
        conn.close()


def test_partition_ddls_and_chained_renames_match_information_schema(mariadb, fresh_db):
    conn = mariadb.connect(database=fresh_db)
    try:
        _replay_and_compare(conn, fresh_db, PARTITION_SEQUENCE)
    finally:
        conn.close()
