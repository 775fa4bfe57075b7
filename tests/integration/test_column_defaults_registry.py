"""Column defaults against a real MariaDB: the default the schema store derives from each DDL's text
equals the one read from information_schema COLUMN_DEFAULT (which quotes strings, writes DEFAULT
NULL as the text NULL and re-prints expressions), and both are the values TiDB would record."""

import pytest

from sparkcdc.schema.store import SchemaStore
from sparkcdc.upstream.schema_reader import read_catalog, read_table_definition

pytestmark = pytest.mark.integration

CREATE = """CREATE TABLE d (
  id INT PRIMARY KEY AUTO_INCREMENT,
  i INT DEFAULT 5, neg BIGINT NOT NULL DEFAULT -42, iq INT DEFAULT '7', ub INT UNSIGNED DEFAULT 0,
  dec1 DECIMAL(6,2) DEFAULT 1.5, dec2 DECIMAL(10,0) DEFAULT '12', f FLOAT DEFAULT 1.25, dbl DOUBLE DEFAULT -0.5,
  s VARCHAR(20) DEFAULT 'it''s', e_s VARCHAR(5) NOT NULL DEFAULT '', c CHAR(3) DEFAULT _utf8mb4'ab',
  n VARCHAR(3) DEFAULT NULL, plain INT, nn INT NOT NULL,
  dt DATETIME DEFAULT '2024-01-02 03:04:05', dt_date DATETIME(3) DEFAULT '2024-01-02',
  ts TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  ts_now TIMESTAMP NULL DEFAULT NOW(), dte DATE DEFAULT '2020-02-29', tm TIME(2) DEFAULT '12:34:56.78',
  y YEAR DEFAULT 2024, b BIT(3) DEFAULT b'101', b1 BIT(1) DEFAULT 1,
  en ENUM('a','b c') DEFAULT 'b c', st SET('x','y') DEFAULT 'x,y',
  expr INT DEFAULT (1 + 2), fn VARCHAR(36) DEFAULT (uuid()), t TEXT DEFAULT ('txt')
)"""

DDLS = [
    CREATE,
    "ALTER TABLE d ALTER COLUMN i SET DEFAULT 9",
    "ALTER TABLE d ALTER COLUMN s DROP DEFAULT",
    "ALTER TABLE d ALTER COLUMN nn SET DEFAULT 3",
    "ALTER TABLE d MODIFY dec1 DECIMAL(8,3) DEFAULT 2.5",
    "ALTER TABLE d CHANGE f f2 DOUBLE DEFAULT 0.1",
    "ALTER TABLE d MODIFY plain INT DEFAULT 11",
    "ALTER TABLE d MODIFY iq INT",
    "ALTER TABLE d ADD COLUMN added VARCHAR(10) NOT NULL DEFAULT 'new' AFTER id",
    "ALTER TABLE d ALTER COLUMN dte SET DEFAULT NULL",
]

# What TiDB records for the CREATE above (the canonical text of each column's type).
EXPECTED_AFTER_CREATE = {
    "id": None, "i": "5", "neg": "-42", "iq": "7", "ub": "0", "dec1": "1.50", "dec2": "12", "f": "1.25",
    "dbl": "-0.5", "s": "it's", "e_s": "", "c": "ab", "n": None, "plain": None, "nn": None,
    "dt": "2024-01-02 03:04:05", "dt_date": "2024-01-02 00:00:00.000", "ts": "CURRENT_TIMESTAMP(3)",
    "ts_now": "CURRENT_TIMESTAMP", "dte": "2020-02-29", "tm": "12:34:56.78", "y": "2024", "b": "5", "b1": "1",
    "en": "b c", "st": "x,y", "expr": "1+2", "fn": "uuid()", "t": "txt",
}


def test_parser_defaults_equal_information_schema_after_each_ddl(mariadb, fresh_db):
    conn = mariadb.connect(database=fresh_db)
    try:
        store = SchemaStore(read_catalog(conn))
        for ts, statement in enumerate(DDLS, start=1):
            with conn.cursor() as cur:
                cur.execute(statement)
            outcome = store.apply(statement, fresh_db, ts, f"test:{ts}")
            ours = outcome.tables[(fresh_db, "d")].info(ts)
            theirs = read_table_definition(conn, fresh_db, "d").info(ts)
            assert [(c.name, c.default) for c in ours.columns] == [(c.name, c.default) for c in theirs.columns], \
                statement
            assert ours.columns == theirs.columns, statement
            if statement is CREATE:
                assert {c.name: c.default for c in ours.columns} == EXPECTED_AFTER_CREATE
        final = {c.name: c.default for c in store.catalog.tables[(fresh_db, "d")].info(0).columns}
        assert (final["i"], final["s"], final["nn"], final["dec1"], final["f2"], final["plain"]) == (
            "9", None, "3", "2.500", "0.1", "11")
        assert (final["iq"], final["added"], final["dte"]) == (None, "new", None)
    finally:
        conn.close()


def test_persisted_table_info_keeps_defaults_and_old_json_reads(mariadb, fresh_db):
    from sparkcdc.model.events import TableInfo

    conn = mariadb.connect(database=fresh_db)
    try:
        with conn.cursor() as cur:
            cur.execute(CREATE)
        info = read_table_definition(conn, fresh_db, "d").info(1)
    finally:
        conn.close()
    assert TableInfo.from_json(info.to_json()) == info
    # JSON written before defaults were tracked has no "default" key: it reads as no default.
    old = info.to_json().replace('"default":"5",', "")
    assert TableInfo.from_json(old).column("i").default is None


def test_avro_schema_with_defaults_registers_and_reads_with_a_stock_client(mariadb, fresh_db, kafka, registry):
    """Defaults read from a real table go into the registered Avro schema; Apicurio accepts it and
    confluent-kafka's AvroDeserializer reads a row whose NULLs sit in `[type, "null"]` unions."""
    import json
    import urllib.request

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from sparkcdc.config.replica import parse_replica_config
    from sparkcdc.model.events import RowChange
    from sparkcdc.sink.kafka.sink import KafkaSink
    from sparkcdc.testing.kafka import read_topic

    conn = mariadb.connect(database=fresh_db)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE a (id INT PRIMARY KEY, i INT DEFAULT 5, s VARCHAR(8) NOT NULL DEFAULT 'x<y', "
                        "f FLOAT DEFAULT 1.1, b BIT(3) DEFAULT b'101', vb VARBINARY(4) DEFAULT 'ab', "
                        "ts TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP, d DECIMAL(5,2) DEFAULT 1.5, n INT)")
        info = read_table_definition(conn, fresh_db, "a").info(1)
    finally:
        conn.close()
    topic = "avro-defaults"
    uri = f"kafka://{kafka.bootstrap}/{topic}?protocol=avro&enable-tidb-extension=true&schema-registry={registry.url}"
    sink = KafkaSink(uri, parse_replica_config(""))
    sink.write_rows(info, [RowChange(100, fresh_db, "a", "insert",
                                     after=("1", None, "s", None, None, None, None, None, None))])
    sink.close()
    with urllib.request.urlopen(f"{registry.url}/subjects/{topic}-value/versions/latest") as response:
        registered = json.loads(json.loads(response.read())["schema"])
    defaults = {f["name"]: f.get("default", "<none>") for f in registered["fields"]}
    assert defaults["i"] == 5 and defaults["s"] == "x<y" and defaults["b"] == "BQ==" and defaults["vb"] == "YWI="
    assert defaults["ts"] == "CURRENT_TIMESTAMP" and defaults["d"] is None and defaults["n"] is None
    assert abs(defaults["f"] - 1.1) < 1e-6
    (message,) = [m for items in read_topic(kafka.bootstrap, topic).values() for m in items]
    value = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))(
        message.value(), SerializationContext(topic, MessageField.VALUE))
    assert value["id"] == 1 and value["s"] == "s" and value["i"] is None and value["ts"] is None
