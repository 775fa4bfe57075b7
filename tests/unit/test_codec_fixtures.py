"""A table with every column type, and rows over it, shared by codec and storage tests."""

from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.tso import compose

COLUMNS = (
    ColumnInfo("id", "int", nullable=False, is_primary_key=True),
    ColumnInfo("t_tiny", "tinyint", unsigned=True),
    ColumnInfo("t_small", "smallint"),
    ColumnInfo("t_medium", "mediumint"),
    ColumnInfo("t_big", "bigint", unsigned=True),
    ColumnInfo("t_decimal", "decimal", precision=10, scale=2),
    ColumnInfo("t_float", "float"),
    ColumnInfo("t_double", "double"),
    ColumnInfo("t_bit", "bit", length=8),
    ColumnInfo("t_char", "char", charset="utf8mb4", length=4),
    ColumnInfo("t_varchar", "varchar", charset="utf8mb4", length=32),
    ColumnInfo("t_text", "text", charset="utf8mb4"),
    ColumnInfo("t_binary", "binary", charset="binary", length=3),
    ColumnInfo("t_varbinary", "varbinary", charset="binary", length=16),
    ColumnInfo("t_blob", "blob", charset="binary"),
    ColumnInfo("t_date", "date"),
    ColumnInfo("t_datetime", "datetime", scale=3),
    ColumnInfo("t_timestamp", "timestamp"),
    ColumnInfo("t_time", "time"),
    ColumnInfo("t_year", "year"),
    ColumnInfo("t_enum", "enum", elements=("a", "b", "c")),
    ColumnInfo("t_set", "set", elements=("x", "y", "z")),
    ColumnInfo("t_json", "json"),
)
TABLE = TableInfo("db", "all_types", 42, COLUMNS, compose(1_700_000_000_000), handle_key=("id",))

FULL = (
    "1", "200", "-3", "70000", "18446744073709551615", "12.50", "1.5", "1234567.25", "5",
    "ab", 'say "hi", <ok> & go', "line1\nline2", "\x00\x01\xff", "caf\xe9", "\x80\x81",
    "2024-02-29", "2024-02-29 13:14:15.123", "2024-02-29 01:02:03", "-838:59:59", "2024",
    "b", "x,z", '{"k": [1, 2]}',
)
NULLS = ("2",) + (None,) * (len(COLUMNS) - 1)

TS1 = compose(1_700_000_001_000, 1)
TS2 = compose(1_700_000_002_000, 2)
TS3 = compose(1_700_000_003_000, 3)
UPDATED = ("1",) + FULL[1:10] + ("changed",) + FULL[11:]

ROWS = [
    RowChange(TS1, "db", "all_types", "insert", after=FULL),
    RowChange(TS1, "db", "all_types", "insert", after=NULLS, seq=1),
    RowChange(TS2, "db", "all_types", "update", before=FULL, after=UPDATED),
    RowChange(TS3, "db", "all_types", "delete", before=NULLS),
]
