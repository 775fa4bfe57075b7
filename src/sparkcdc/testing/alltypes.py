"""A table with every MariaDB column type and rows at the edges of each, shared by the
decoder's type test and the e2e tests that push it through a changefeed."""

COLUMNS = [
    ("ti", "TINYINT"), ("tiu", "TINYINT UNSIGNED"), ("si", "SMALLINT"), ("siu", "SMALLINT UNSIGNED"),
    ("mi", "MEDIUMINT"), ("miu", "MEDIUMINT UNSIGNED"), ("i", "INT"), ("iu", "INT UNSIGNED"),
    ("bi", "BIGINT"), ("biu", "BIGINT UNSIGNED"),
    ("d", "DECIMAL(65,30)"), ("d2", "DECIMAL(10,2)"), ("f", "FLOAT"), ("db", "DOUBLE"),
    ("c", "CHAR(10)"), ("vc", "VARCHAR(300)"), ("tx", "TEXT"),
    ("bn", "BINARY(4)"), ("vb", "VARBINARY(300)"), ("bl", "BLOB"),
    ("dt", "DATE"), ("tm", "TIME"), ("tm3", "TIME(3)"), ("tm6", "TIME(6)"),
    ("dtm", "DATETIME"), ("dtm1", "DATETIME(1)"), ("dtm6", "DATETIME(6)"),
    ("ts", "TIMESTAMP NULL"), ("ts3", "TIMESTAMP(3) NULL"), ("yr", "YEAR"),
    ("en", "ENUM('a','b,c','it''s','')"), ("st", "SET('x','y','z''q')"),
    ("b1", "BIT(1)"), ("b64", "BIT(64)"), ("b10", "BIT(10)"), ("js", "JSON"),
]
ALL_BYTES = bytes(range(256))
EMOJI = "héllo 😀 世界"

ROWS = [
    dict(ti=-128, tiu=255, si=-32768, siu=65535, mi=-8388608, miu=16777215, i=-2147483648, iu=4294967295,
         bi=-9223372036854775808, biu=18446744073709551615,
         d="-12345678901234567890123456789012345.123456789012345678901234567890", d2="-0.05", f=3.14159, db=2.718281828459045,
         c="ab", vc=EMOJI, tx=EMOJI * 20, bn=b"\x00\x01", vb=ALL_BYTES, bl=ALL_BYTES * 3,
         dt="1000-01-01", tm="-838:59:59", tm3="-00:00:01.500", tm6="12:34:56.000001",
         dtm="1000-01-01 00:00:00", dtm1="2024-02-29 23:59:59.9", dtm6="9999-12-31 23:59:59.999999",
         ts="1970-01-01 00:00:01", ts3="2038-01-19 03:14:07.999", yr=1901,
         en="b,c", st="x,z'q", b1=1, b64=18446744073709551615, b10=5, js='{"k": [1, "😀", null]}'),
    dict(ti=127, tiu=0, si=32767, siu=0, mi=8388607, miu=0, i=2147483647, iu=0,
         bi=9223372036854775807, biu=0, d="0.000000000000000000000000000001", d2="99999999.99", f=-1e-10, db=1e300,
         c="", vc="", tx="", bn=b"\xff\xff\xff\xff", vb=b"", bl=b"\x00",
         dt="2024-12-31", tm="838:59:59", tm3="00:00:00", tm6="-01:02:03.040506",
         dtm="2024-06-01 12:00:00", dtm1="2024-06-01 12:00:00.1", dtm6="2024-06-01 12:00:00.000001",
         ts="2024-06-01 12:00:00", ts3="2024-06-01 12:00:00.001", yr=2155,
         en="it's", st="", b1=0, b64=0, b10=1023, js="[]"),
    {name: None for name, _ in COLUMNS} | {"i": 7},  # NULLs (i is the key)
]

COLUMN_NAMES = [n for n, _ in COLUMNS]


def create_alltypes(conn, database: str, table: str = "alltypes", rows: bool = True) -> None:
    """Create the table (key `i`) in `database`, in the session's time zone UTC, and insert ROWS
    (unless `rows` is False: `insert_alltypes` later)."""
    cols = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)
    with conn.cursor() as cur:
        cur.execute("SET time_zone='+00:00'")
        cur.execute(f"CREATE TABLE `{database}`.`{table}` ({cols}, PRIMARY KEY (i))")
    if rows:
        insert_alltypes(conn, database, table)


def insert_alltypes(conn, database: str, table: str = "alltypes") -> None:
    """Insert ROWS, one statement (and transaction, with autocommit) each."""
    placeholders = ", ".join(["%s"] * len(COLUMNS))
    with conn.cursor() as cur:
        for row in ROWS:
            cur.execute(f"INSERT INTO `{database}`.`{table}` VALUES ({placeholders})",
                        [row[n] for n in COLUMN_NAMES])


# Every column type as part of a primary key, for the tests of key predicates (issue 21: a FLOAT
# key bound as `3.3` matched no row). Text, blob and JSON columns take part through a prefix.
_PREFIX_KEY_TYPES = ("TEXT", "BLOB", "JSON")
# A third key value for FLOAT and DOUBLE: TiCDC's clustered_index case, and a double no float equals.
_THIRD_KEY_VALUE = {"f": 3.3, "db": 0.1}


def key_tables(prefix: str) -> list[tuple[str, str, str]]:
    """(table, column, CREATE TABLE body) per column type: (rid, column, v), PRIMARY KEY (rid, column)."""
    tables = []
    for name, sql_type in COLUMNS:
        part = f"`{name}`(10)" if sql_type in _PREFIX_KEY_TYPES else f"`{name}`"
        tables.append((f"{prefix}_{name}", name, f"(rid INT NOT NULL, `{name}` {sql_type.replace(' NULL', '')} "
                                                 f"NOT NULL, v INT, PRIMARY KEY (rid, {part}))"))
    return tables


def insert_key_rows(cursor, database: str, table: str, column: str) -> None:
    """Rows rid 1, 2, 3 of a `key_tables` table."""
    first, second = [row[column] for row in ROWS if row[column] is not None][:2]
    cursor.executemany(f"INSERT INTO `{database}`.`{table}` VALUES (%s, %s, %s)",
                       [(1, first, 10), (2, second, 20), (3, _THIRD_KEY_VALUE.get(column, first), 30)])


def change_key_rows(cursor, database: str, table: str, column: str) -> None:
    """An update found by its key (rid 1), a key that moves (rid 3), a delete (rid 2)."""
    first = next(row[column] for row in ROWS if row[column] is not None)
    name = f"`{database}`.`{table}`"
    cursor.execute(f"UPDATE {name} SET v = v + 1 WHERE rid = 1")
    cursor.execute(f"UPDATE {name} SET `{column}` = %s, v = 0 WHERE rid = 3", (first,))
    cursor.execute(f"DELETE FROM {name} WHERE rid = 2")
