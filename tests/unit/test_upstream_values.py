import datetime
import decimal

from sparkcdc.model.events import ColumnInfo
from sparkcdc.upstream.values import converter, null_value


def conv(mysql_type, value, **kw):
    return converter(ColumnInfo("c", mysql_type, **kw))(value)


def test_numbers():
    assert conv("bigint", 18446744073709551615, unsigned=True) == "18446744073709551615"
    assert conv("decimal", decimal.Decimal("1.5"), precision=10, scale=2) == "1.50"
    assert conv("decimal", decimal.Decimal("-0.00"), precision=10, scale=2) == "0.00"
    assert conv("decimal", decimal.Decimal("-0.001"), precision=10, scale=3) == "-0.001"
    assert conv("float", 0.10000000149011612) == "0.1"
    assert conv("float", 1e20) == "100000000000000000000"
    assert conv("double", 1.0) == "1"
    assert conv("double", 0.1) == "0.1"
    assert conv("double", 1e-7) == "0.0000001"
    assert conv("double", -2.5e16) == "-25000000000000000"
    assert conv("bit", "101", length=3) == "5"


def test_strings_and_binary():
    assert conv("varchar", "😀", charset="utf8mb4") == "😀"
    assert conv("varbinary", bytes(range(256)), charset="binary").encode("latin-1") == bytes(range(256))
    assert conv("binary", b"\x01", charset="binary", length=3) == "\x01\x00\x00"
    assert conv("json", '{"a": 1}') == '{"a": 1}'
    assert conv("json", {b"a": [1, b"x"]}) == '{"a": [1, "x"]}'


def test_temporal():
    assert conv("date", datetime.date(1, 2, 3)) == "0001-02-03"
    assert conv("datetime", datetime.datetime(999, 1, 2, 3, 4, 5, 120000), scale=3) == "0999-01-02 03:04:05.120"
    assert conv("datetime", datetime.datetime(2024, 1, 2, 3, 4, 5), scale=0) == "2024-01-02 03:04:05"
    assert conv("timestamp", datetime.datetime(1970, 1, 1), scale=2) == "0000-00-00 00:00:00.00"
    assert conv("time", datetime.timedelta(hours=-838, minutes=-59, seconds=-59), scale=0) == "-838:59:59"
    assert conv("time", -datetime.timedelta(seconds=1, microseconds=500000), scale=1) == "-00:00:01.5"
    assert conv("year", 1900) == "0000"
    assert conv("year", 2024) == "2024"


def test_enum_set_and_nulls():
    col = ColumnInfo("c", "set", elements=("a", "b", "c"))
    assert converter(col)({"c", "a"}) == "a,c"
    assert null_value(col, "empty set") == ""
    assert null_value(col, "null") is None
    assert null_value(ColumnInfo("c", "datetime", scale=1), "out of datetime2 range") == "0000-00-00 00:00:00.0"
    assert conv("enum", "b", elements=("a", "b")) == "b"
