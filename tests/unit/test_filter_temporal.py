"""Temporal columns in event-filter expressions compare as MySQL compares them."""

from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from sparkcdc.errors import ErrExpressionColumnNotFound, ErrExpressionParseFailed, ErrInvalidReplicaConfig
from sparkcdc.filter import temporal
from sparkcdc.filter.expression import compile_expression
from sparkcdc.model.events import ColumnInfo, TableInfo

T = TableInfo("db", "t", 1, (
    ColumnInfo("id", "int", is_primary_key=True, nullable=False),
    ColumnInfo("born", "date"),
    ColumnInfo("seen", "datetime"),
    ColumnInfo("ts", "timestamp"),
    ColumnInfo("dur", "time"),
    ColumnInfo("name", "varchar"),
), 1, ("id",))

ROW = ("1", "2024-01-02", "2024-01-02 00:00:00", "2024-03-04 05:06:07.250000", "-01:02:03", "x")


def matches(text, row=ROW):
    return compile_expression(text, "test").bind(T).matches(row)


@pytest.mark.parametrize("text, expected", [
    # a string constant is read as a date of the column's kind, in every form MySQL accepts
    ("born = '2024-01-02'", True),
    ("born = '2024-1-2'", True),
    ("born = '20240102'", True),
    ("born = '24-01-02'", True),
    ("born = '2024/01/02'", True),
    ("born < '2024-01-10'", True),        # as text, '2024-01-02' < '2024-01-10' too; see next
    ("born < '2024-1-10'", True),         # as text '2024-01-02' > '2024-1-10': temporal wins
    ("born = '2024-01-02 00:00:00'", True),
    ("born < '2024-01-02 00:00:01'", True),
    # DATETIME equal to a date constant at midnight, not greater (text comparison would say greater)
    ("seen > '2024-01-02'", False),
    ("seen = '2024-01-02'", True),
    ("seen = born", True),
    ("ts BETWEEN '2024-03-04 05:06:07' AND '2024-03-04 05:06:08'", True),
    ("ts > '2024-03-04 05:06:07.25'", False),
    ("ts = '2024-03-04T05:06:07.25'", True),
    ("ts IN ('2024-3-4 5:6:7.25', '1999-01-01')", True),
    # numbers compare with the numeric form
    ("born = 20240102", True),
    ("seen = 20240102000000", True),
    ("ts > 20240304050607", True),
    ("ts = 20240304050607.25", True),
    ("dur = -10203", True),
    ("dur < '00:00:00'", True),
    ("dur = '-1:2:3'", True),
    ("dur > '-1 01:00:00'", True),         # -25 h < -1:02:03
    # not a date: compared as text, as MySQL does after its warning
    ("born = 'yesterday'", False),
    ("born > 'abc'", False),
    # string functions still see the canonical text
    ("born LIKE '2024-%'", True),
    ("CONCAT(born, '') = '2024-01-02'", True),
    ("LENGTH(seen) = 19", True),
    # casts
    ("CAST(seen AS DATE) = born", True),
    ("CAST('2024-01-02 10:00:00' AS DATE) = born", True),
    ("CAST(ts AS TIME) = '05:06:07.25'", True),
    ("CAST('nope' AS DATE) IS NULL", True),
    ("born > DATE '2023-12-31'", True),
    ("seen < TIMESTAMP '2024-01-02 00:00:01'", True),
])
def test_temporal_comparisons(text, expected):
    assert matches(text) is expected


def test_null_temporal_is_unknown():
    row = ("1", None, None, None, None, "x")
    assert matches("born = '2024-01-02'", row) is False
    assert matches("born IS NULL", row) is True


def test_zero_date_is_a_value():
    row = ("1", "0000-00-00", "0000-00-00 00:00:00", None, "00:00:00", "x")
    assert matches("born = '0000-00-00'", row) is True
    assert matches("born < '1000-01-01'", row) is True


@given(st.datetimes(), st.datetimes())
def test_datetime_order_matches_python(a, b):
    ta = temporal.Temporal(a.isoformat(sep=" "), temporal.DATETIME)
    tb = temporal.Temporal(b.isoformat(sep=" "), temporal.DATETIME)
    assert temporal.compare_temporal(ta, tb) == (a > b) - (a < b)
    # and against b written in MySQL's compact form
    compact = (f"{b.year:04d}{b.month:02d}{b.day:02d}{b.hour:02d}{b.minute:02d}{b.second:02d}"
               + (f".{b.microsecond:06d}" if b.microsecond else ""))
    assert temporal.compare_temporal(ta, compact) == (a > b) - (a < b)


def test_numeric_forms():
    assert temporal.Temporal("2024-01-02", temporal.DATE).as_number() == 20240102
    assert temporal.Temporal("2024-01-02 03:04:05.5", temporal.DATETIME).as_number() == Decimal("20240102030405.5")
    assert temporal.Temporal("-838:59:59", temporal.TIME).as_number() == -8385959


def test_filter_error_codes():
    with pytest.raises(ErrExpressionParseFailed) as caught:
        compile_expression("born >", "filter.event-filters[0].ignore-insert-value-expr")
    assert caught.value.code == "SPARKCDC:ErrExpressionParseFailed"
    assert isinstance(caught.value, ErrInvalidReplicaConfig)  # still a config error for callers
    with pytest.raises(ErrExpressionColumnNotFound, match="nope") as caught:
        compile_expression("nope = 1", "x").bind(T)
    assert caught.value.code == "SPARKCDC:ErrExpressionColumnNotFound"
